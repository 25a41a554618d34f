"""SRigL: a constant fan-in in every live neuron, neuron ablation, grow only within live neurons."""

from __future__ import annotations

import pytest
import torch

import dstbench
from dstbench.dst.masked.csr import CsrMaskSet
from dstbench.dst.masked.distributions import target_active
from dstbench.dst.registry import params_of
from tests.conftest import ADAMW, SGD, micro_batches, micro_vit
from tests.dst.masked.helpers import LAYER, assert_zero_where_masked, one_layer_method, run_steps, state_tensors


def _srigl(optimizer: dict = ADAMW, density: float = 0.2, **params: object) -> dstbench.Method:
    params = {"delta_t": 3, "t_end": 11, **params}  # updates at steps 3, 6 and 9
    return dstbench.create_method("srigl", micro_vit(), density=density, total_steps=12, optimizer=optimizer, **params)


def _row_counts(mask: torch.Tensor) -> torch.Tensor:
    return mask.sum(dim=1)


def _assert_constant_fan_in(method: dstbench.Method, masks: dict[str, torch.Tensor]) -> dict[str, int]:
    """Every live row of every layer holds the same count k = allotment // live; returns k per layer."""
    fan_ins = {}
    for name, mask in masks.items():
        counts = _row_counts(mask)
        live = counts > 0
        assert len(counts[live].unique()) == 1, f"{name}: fan-ins {counts[live].unique().tolist()}"
        k = int(counts[live][0])
        assert k == method.allotment[name] // int(live.sum()), name
        fan_ins[name] = k
    return fan_ins


def test_registered_as_masked_with_rigls_parameters_and_gamma_sal() -> None:
    info = dstbench.method_info("srigl")
    assert info.kind == "masked" and info.cls.update_replaces_step
    params = info.cls.Params()
    assert (params.delta_t, params.drop_fraction, params.t_end, params.distribution, params.gamma_sal) == (100, 0.3, 0.75, "erk", 0.3)
    assert "gamma_sal" in {p.name: p.help for p in params_of(info.cls) if p.help}


@pytest.mark.parametrize("density", [0.1, 0.2, 0.5])
def test_starts_with_k0_random_weights_in_every_row(density: float) -> None:
    method = _srigl(density=density)
    for name, mask in method.masks().items():
        rows = mask.shape[0]
        assert _row_counts(mask).tolist() == [method.allotment[name] // rows] * rows
    again = _srigl(density=density)
    assert all(torch.equal(a, b) for a, b in zip(method.masks().values(), again.masks().values()))


@pytest.mark.parametrize("gamma_sal", [0.3, 0.9])
def test_constant_fan_in_and_density_short_of_the_target_by_under_one_weight_per_live_neuron(gamma_sal: float) -> None:
    method = _srigl(density=0.2, gamma_sal=gamma_sal)
    total = method.mask_set.numel()
    ablated_at_end = 0
    for step, before, after in run_steps(method, 12):
        fan_ins = _assert_constant_fan_in(method, after)
        live = {name: int((_row_counts(mask) > 0).sum()) for name, mask in after.items()}
        # k * live per layer, within its budget by under one weight per live row: the density is
        # that count, never above the target, and short of it by fewer weights than live neurons.
        held = sum(fan_ins[n] * live[n] for n in after)
        assert method.density() == held / total
        for name in after:
            assert 0 <= method.allotment[name] - fan_ins[name] * live[name] < live[name], name
        assert 0 <= target_active(total, 0.2) - held < sum(live.values())
        assert_zero_where_masked(method, after)
        ablated_at_end = sum(mask.shape[0] - live[n] for n, mask in after.items())
    assert method.topology_updates == 3
    extras = method.result_extras()
    assert extras["ablated_neurons"] == ablated_at_end
    assert extras["fan_in"] == fan_ins and extras["gamma_sal"] == gamma_sal
    if gamma_sal == 0.9:
        assert ablated_at_end > 0  # most neurons fall short of 0.9 k0 salient weights


def _hand_built(method: dstbench.Method) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """8x8 layer, 4 active per row. Rows 0 and 1 hold the smallest |w| and the smallest |g|; every
    |w| and |g| distinct. Returns (active, weights, grads)."""
    active = method.masks()[LAYER]
    values = (torch.arange(64, dtype=torch.float32).view(8, 8) + 1.0) * 0.01
    grad = torch.arange(64, dtype=torch.float32).view(8, 8).flip(1) * 0.1 + 0.05
    weight = method.mask_set.weights[LAYER]
    with torch.no_grad():
        weight.copy_(values * active)
    weight.grad = grad.clone()
    return active, weight.detach().clone(), grad


def test_ablation_removes_neurons_without_salient_weights_and_moves_their_budget() -> None:
    # Budget 32 over 8 rows: k0 = 4, threshold max(1, int(0.3 * 4)) = 1. At step 10 of 100 (t_end
    # 75) the fraction is 0.287: n_drop = 9, n_keep = 23 of 32. The 23 largest |w| lie in rows 2-7
    # (24 active there), the 9 largest |g| in row 7 and row 6: rows 0 and 1 hold no salient weight.
    method = one_layer_method("srigl", density=0.5, gamma_sal=0.3)
    active, weight, grad = _hand_built(method)
    with torch.no_grad():
        method.update_topology(10)
    new = method.masks()[LAYER]
    counts = _row_counts(new).tolist()
    assert counts[:2] == [0, 0]
    assert counts[2:] == [5] * 6  # k = 32 // 6: the ablated rows' budget went to the others
    assert method.density() == 30 / 64
    after = method.mask_set.weights[LAYER]
    grown = new & ~active
    # Grown only within live rows, by |g| within each row; grown weights start at 0.
    assert not grown[:2].any() and torch.all(after[grown] == 0)
    kept = torch.zeros_like(active)
    kept[2:] = active[2:]
    kept[2, active[2].nonzero()[0]] = False  # the 24th largest |w| of the live rows: pruned
    for row in range(2, 8):
        need = 5 - int(kept[row].sum())
        best = torch.where(~kept[row], grad[row], -torch.inf).argsort(descending=True)[:need]
        assert sorted(best.tolist()) == (new[row] & ~kept[row]).nonzero().flatten().tolist(), row
    # What stays (or is pruned and regrown) keeps its value; the ablated rows are zero with their state.
    stays = new & active
    assert torch.equal(after[stays], weight[stays])
    assert torch.all(after[:2] == 0)
    for value in state_tensors(method, method.mask_set.weights[LAYER]):
        assert torch.all(value[:2] == 0)


def test_a_neuron_with_more_than_k_kept_weights_keeps_its_largest() -> None:
    # Row 7 fully active (8 weights), rows 0-6 four each: 36 held, budget 32, k = 4 (no ablation).
    method = one_layer_method("srigl", density=0.5, gamma_sal=0.0)
    start = method.masks()[LAYER]
    start[7] = True
    method.mask_set.set_mask(LAYER, start)
    active, weight, grad = _hand_built(method)
    with torch.no_grad():
        method.update_topology(10)  # n_drop = int(36 * 0.287) = 10: row 7's 8 are among the 26 kept
    new = method.masks()[LAYER]
    assert _row_counts(new).tolist() == [4] * 8
    assert new[7].tolist() == [False] * 4 + [True] * 4  # its 4 largest |w|, nothing grown there


def test_gamma_sal_zero_never_ablates() -> None:
    method = _srigl(density=0.2, gamma_sal=0.0)
    for _, _, after in run_steps(method, 12):
        assert all(bool((_row_counts(mask) > 0).all()) for mask in after.values())
    assert method.result_extras()["ablated_neurons"] == 0


def test_the_update_reads_the_dense_gradient_and_replaces_the_optimizer_step() -> None:
    method = _srigl(SGD)
    method.train_segment(micro_batches(), 2)
    seen = {}
    update = method.update_topology

    def spy(step: int) -> None:
        name = next(iter(method.masks()))
        weight = method.mask_set.weights[name]
        seen.update(grad=weight.grad.clone(), weight=weight.detach().clone(), active=method.masks()[name])
        update(step)

    method.update_topology = spy  # type: ignore[method-assign]
    name = next(iter(method.masks()))
    before = method.mask_set.weights[name].detach().clone()
    method.train_segment(micro_batches(seed=1), 1)
    assert torch.any(seen["grad"][~seen["active"]] != 0), "the update saw a masked gradient"
    assert torch.equal(seen["weight"], before), "an optimizer step ran before the update"


def test_same_seed_same_masks_update_by_update() -> None:
    runs = [_srigl(seed=seed) for seed in (5, 5, 6)]
    trajectories = [[after for _, _, after in run_steps(m, 10)] for m in runs]
    for a, b in zip(trajectories[0], trajectories[1]):
        assert all(torch.equal(a[n], b[n]) for n in a)
    assert any(not torch.equal(trajectories[0][-1][n], trajectories[2][-1][n]) for n in trajectories[0][-1])


def test_csr_execution_trains_as_masked_does() -> None:
    runs = []
    for execution in ("masked", "csr"):
        method, batches = _srigl(execution=execution), micro_batches()
        losses, masks = [], []
        for _ in range(10):
            losses.append(method.train_segment(batches, 1).loss)
            masks.append(method.masks())
        runs.append((method, losses, masks))
    (masked, masked_losses, masked_masks), (csr, csr_losses, csr_masks) = runs
    assert isinstance(csr.mask_set, CsrMaskSet)
    assert csr_losses == pytest.approx(masked_losses, rel=1e-3)
    for step, (a, b) in enumerate(zip(masked_masks, csr_masks), 1):
        assert all(torch.equal(a[n], b[n]) for n in a), f"step {step}: masks differ"
    _assert_constant_fan_in(csr, csr_masks[-1])
    assert csr.density() == masked.density()
    assert csr.mask_set.total_active() == sum(layer.values.numel() for layer in csr.mask_set.layers.values())


def test_csr_holds_the_structure_while_ablating() -> None:
    # gamma_sal 0.9 ablates many neurons; csr's products differ from the dense ones in the last bits,
    # enough to flip a neuron at the threshold, so this checks the invariants rather than equality.
    method = _srigl(execution="csr", gamma_sal=0.9)
    for _, _, after in run_steps(method, 10):
        _assert_constant_fan_in(method, after)
    layers = method.mask_set.layers
    assert method.result_extras()["ablated_neurons"] > 0
    assert method.mask_set.total_active() == sum(layer.values.numel() for layer in layers.values())
    held = sum(int(mask.sum()) for mask in method.masks().values())
    assert method.density() == held / method.mask_set.numel()


def test_checkpoint_round_trip_keeps_the_structure() -> None:
    method = _srigl(gamma_sal=0.9)
    method.train_segment(micro_batches(), 7)
    restored = _srigl(gamma_sal=0.9, seed=3)
    restored.load_state_dict(method.state_dict())
    assert restored.result_extras()["fan_in"] == method.result_extras()["fan_in"]
    for m in (method, restored):
        m.train_segment(micro_batches(seed=2), 3)
    assert all(torch.equal(a, b) for a, b in zip(method.masks().values(), restored.masks().values()))


@pytest.mark.parametrize(
    "params, message",
    [({"execution": "semi_structured"}, "2:4"), ({"gamma_sal": -0.5}, r"gamma_sal must be >= 0"),
     ({"grad_accumulation": 3}, r"grad_accumulation must be an integer from 1 to delta_t - 1 \(2\)"),
     ({"reset_state": "some"}, "reset_state must be one of"),
     ({"reset_state": "momentum", "execution": "csr"}, "reset_state momentum keeps Adam's moments")],
)
def test_invalid_parameters_are_refused(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _srigl(**params)


def test_a_budget_below_one_weight_per_row_is_refused() -> None:
    with pytest.raises(ValueError, match="fan-in of 0"):
        one_layer_method("srigl", density=0.05)  # 3 weights over 8 rows


def test_a_convolution_holds_a_constant_fan_in_per_output_channel() -> None:
    """On a small timm CNN every masked convolution's output channel (its filter's in x kh x kw
    inputs) holds the same count, update after update, ablation included."""
    from dstbench.models.timm_models import create_model

    torch.manual_seed(0)
    model = create_model("test_resnet", num_classes=10)
    method = dstbench.create_method("srigl", model, density=0.2, total_steps=12, optimizer=SGD, delta_t=3, t_end=11, gamma_sal=0.9)
    convolutions = [name for name, weight in method.mask_set.weights.items() if weight.dim() == 4]
    assert convolutions and "conv1.0.weight" not in method.mask_set.weights  # the stem stays dense
    batches = [(torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))) for _ in range(12)]
    method.train_segment(batches, 12)
    assert method.topology_updates == 3
    masks = method.masks()
    for name in convolutions:
        if method.allotment[name] == masks[name].numel():
            continue  # ERK made it dense
        counts = masks[name].flatten(1).sum(dim=1)
        live = counts > 0
        assert len(counts[live].unique()) == 1, f"{name}: fan-ins {counts[live].unique().tolist()}"
        assert int(counts[live][0]) == method.allotment[name] // int(live.sum())
    extras = method.result_extras()
    assert extras["neurons"] == sum(mask.shape[0] for mask in masks.values())
    assert abs(method.density() - 0.2) < 0.01
