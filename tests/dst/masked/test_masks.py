"""The masking engine: bool masks, in-place masking of gradients, and the invariant that weights
and optimizer state stay exactly zero at masked positions when only the gradient is masked."""

from __future__ import annotations

import pytest
import torch

from dstbench.dst.optimizer import build_optimizer, state_tensors
from dstbench.dst.masked.masks import MaskSet, random_mask
from dstbench.measure.trackers.memory import unique_bytes
from dstbench.models.timm_models import prunable_weights
from tests.conftest import ADAMW, SGD, micro_vit


# Every optimizer dstbench builds: SGD with momentum (plain, coupled weight decay, nesterov) and
# AdamW (decoupled weight decay), each tested with torch's per-parameter loop (its CPU default) and
# its multi-tensor implementation (its CUDA default).
OPTIMIZERS = {
    "sgd": SGD,
    "sgd_decay": {**SGD, "weight_decay": 0.01},
    "sgd_nesterov": {**SGD, "nesterov": True, "weight_decay": 0.01},
    "adamw": ADAMW,
}


def _engine(optimizer_spec: dict) -> tuple[torch.nn.Module, torch.optim.Optimizer, MaskSet]:
    model = micro_vit()
    optimizer = build_optimizer(optimizer_spec, model)
    engine = MaskSet(prunable_weights(model), optimizer)
    _set_random(engine, {name: w.numel() // 4 for name, w in engine.weights.items()}, seed=0)
    return model, optimizer, engine


def _set_random(engine: MaskSet, allotment: dict[str, int], seed: int) -> None:
    """Random masks as a masked method starts from: `random_mask` per layer, in order, through `set_mask`."""
    generator = torch.Generator().manual_seed(seed)
    for name, weight in engine.weights.items():
        engine.set_mask(name, random_mask(weight.shape, allotment[name], generator))


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    model(torch.randn(4, 3, 32, 32)).logsumexp(-1).mean().backward()


def test_random_masks_allot_exact_counts_and_zero_the_rest() -> None:
    _, _, engine = _engine(ADAMW)
    for name, mask in engine.bool_masks().items():
        assert int(mask.sum()) == engine.weights[name].numel() // 4 == engine.counts[name]
        assert torch.all(engine.weights[name][~mask] == 0)
        assert torch.all(engine.weights[name][mask] != 0)


def test_masks_are_bool_one_byte_per_weight() -> None:
    _, _, engine = _engine(ADAMW)
    buffers = engine.buffers()
    assert all(m.dtype == torch.bool for m in buffers.values())
    assert unique_bytes(buffers.values()) == engine.numel()


def test_gradients_are_masked_in_place() -> None:
    model, optimizer, engine = _engine(ADAMW)
    _step(model, optimizer)
    pointers = {name: w.grad.data_ptr() for name, w in engine.weights.items()}
    assert any(torch.any(w.grad[~engine.active(n)] != 0) for n, w in engine.weights.items())
    engine.mask_grads()
    for name, weight in engine.weights.items():
        assert weight.grad.data_ptr() == pointers[name]
        assert torch.all(weight.grad[~engine.active(name)] == 0)
        assert torch.any(weight.grad[engine.active(name)] != 0)


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "foreach"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_masking_only_the_gradient_keeps_weights_and_state_exactly_zero(name: str, foreach: bool) -> None:
    # The lean step: the gradient is the only thing masked, yet after several steps every masked
    # weight and every optimizer-state entry there is exactly 0, while the active ones moved.
    model, optimizer, engine = _engine({**OPTIMIZERS[name], "foreach": foreach})
    before = {n: w.detach().clone() for n, w in engine.weights.items()}
    for _ in range(3):
        _step(model, optimizer)
        engine.mask_grads()
        optimizer.step()
    for n, weight in engine.weights.items():
        active = engine.active(n)
        assert torch.all(weight[~active] == 0), f"{name}: a masked weight moved"
        assert not torch.equal(weight[active], before[n][active])
        states = state_tensors(optimizer, weight)
        assert states, f"{name}: no element-wise state to check"
        for value in states:
            assert torch.all(value[~active] == 0), f"{name}: optimizer state moved at a masked position"
            assert torch.any(value[active] != 0)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_enforce_zeroes_weights_and_state_after_a_step_on_the_dense_gradient(name: str) -> None:
    model, optimizer, engine = _engine(OPTIMIZERS[name])
    _step(model, optimizer)
    optimizer.step()  # unmasked gradient (Chase's update step): masked weights and state move
    name0, weight0 = next(iter(engine.weights.items()))
    states = state_tensors(optimizer, weight0)
    assert states and all(torch.any(v[~engine.active(name0)] != 0) for v in states)
    assert torch.any(weight0[~engine.active(name0)] != 0)
    pointers = [v.data_ptr() for v in states] + [weight0.data_ptr()]
    engine.enforce()
    for n, weight in engine.weights.items():
        mask = engine.active(n)
        assert torch.all(weight[~mask] == 0) and torch.all(weight[mask] != 0)
        for value in state_tensors(optimizer, weight):
            assert torch.all(value[~mask] == 0)
    assert [v.data_ptr() for v in state_tensors(optimizer, weight0)] + [weight0.data_ptr()] == pointers


def test_enforce_zeroes_a_non_finite_value_at_a_masked_position() -> None:
    _, _, engine = _engine(ADAMW)
    name, weight = next(iter(engine.weights.items()))
    masked = torch.nonzero(~engine.active(name))[0]
    weight.data[tuple(masked)] = float("nan")
    engine.enforce()
    assert weight[tuple(masked)] == 0


def test_set_mask_zeroes_grown_and_pruned_weights_and_state_and_keeps_the_rest() -> None:
    model, optimizer, engine = _engine(ADAMW)
    _step(model, optimizer)
    optimizer.step()
    name, weight = next(iter(engine.weights.items()))
    old = engine.active(name)
    new = old.clone().flatten()
    on, off = torch.nonzero(~new).flatten()[:5], torch.nonzero(new).flatten()[:5]
    new[on], new[off] = True, False
    new = new.view_as(old)
    weight.data.add_(1.0)  # make every position nonzero, so zeroing is visible
    kept_values = weight[old & new].clone()
    engine.set_mask(name, new)
    changed = old ^ new
    assert torch.all(weight[changed] == 0)
    assert torch.equal(weight[old & new], kept_values)
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.all(optimizer.state[weight][key][changed] == 0)
    assert engine.counts[name] == int(old.sum())
    assert torch.equal(engine.active(name), new)


def test_state_dict_round_trip() -> None:
    _, _, engine = _engine(SGD)
    saved = engine.state_dict()
    assert all(m.dtype == torch.bool for m in saved.values())
    _, _, other = _engine(SGD)
    _set_random(other, {n: 1 for n in other.weights}, seed=5)
    other.load_state_dict(saved)
    assert all(torch.equal(other.active(n), saved[n]) for n in saved)
    assert other.counts == engine.counts
