"""`execution: condensed` (SRigL's representation): the products against a dense linear on the same
weights, the backward gathering again rather than saving, masked and condensed SRigL making the
same decisions, ablation resizing the live rows, checkpoints, FLOPs and the refusals."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import dstbench
from dstbench.dst.masked import condensed
from dstbench.dst.masked.condensed import CondensedLinear, CondensedMaskSet
from dstbench.measure.trackers import training_state_bytes
from tests.conftest import ADAMW, micro_batches, micro_vit

STEPS = 10  # updates at steps 3, 6 and 9


def _constant_fan_in_mask(rows: int, columns: int, k: int, ablated: tuple[int, ...] = (), seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.zeros(rows, columns, dtype=torch.bool)
    for row in range(rows):
        if row not in ablated:
            mask[row, torch.randperm(columns, generator=generator)[:k]] = True
    return mask


def _layer(mask: torch.Tensor) -> tuple[CondensedLinear, torch.nn.Linear]:
    torch.manual_seed(0)
    linear = torch.nn.Linear(mask.shape[1], mask.shape[0])
    with torch.no_grad():
        linear.weight.mul_(mask)
    reference = copy.deepcopy(linear)
    return CondensedLinear(linear, mask), reference


@pytest.mark.parametrize("ablated", [(), (1, 4)], ids=["all-live", "two-ablated"])
def test_products_match_the_dense_linear_on_the_same_weights(ablated: tuple[int, ...]) -> None:
    mask = _constant_fan_in_mask(6, 10, 3, ablated)
    layer, reference = _layer(mask)
    assert layer.values.shape == (6 - len(ablated), 3) and layer.index.shape == layer.values.shape
    x = torch.randn(2, 5, 10, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out, want = layer(x), reference(x_ref)
    torch.testing.assert_close(out, want)
    grad = torch.randn_like(out)
    out.backward(grad)
    want.backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(layer.scatter(layer.values.grad), reference.weight.grad * mask)
    torch.testing.assert_close(layer.bias.grad, reference.bias.grad)


def test_blocks_split_the_rows_without_changing_the_products(monkeypatch: pytest.MonkeyPatch) -> None:
    mask = _constant_fan_in_mask(7, 9, 4)
    layer, reference = _layer(mask)
    x = torch.randn(11, 9, requires_grad=True)
    whole = layer(x)
    whole.sum().backward()
    grads = (x.grad.clone(), layer.values.grad.clone())
    monkeypatch.setattr(condensed, "CPU_BLOCK_ELEMENTS", 4 * 11 * 2)  # two rows per block: four blocks
    assert len(condensed._blocks(7, 4, 11, torch.device("cpu"))) == 4
    x.grad, layer.values.grad = None, None
    split = layer(x)
    split.sum().backward()
    torch.testing.assert_close(split, whole)
    torch.testing.assert_close((x.grad, layer.values.grad), grads)


def test_the_backward_gathers_again_instead_of_saving_the_gathered_inputs() -> None:
    layer, _ = _layer(_constant_fan_in_mask(64, 32, 8))
    x = torch.randn(40, 32, requires_grad=True)
    saved: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(x)
    # x, the values and the bias: never the (tokens, live, k) gather (40 * 64 * 8 values).
    assert sum(saved) == x.numel() + layer.values.numel() + layer.bias.numel()
    out.sum().backward()


def test_bf16_autocast_runs_the_products_in_bf16() -> None:
    mask = _constant_fan_in_mask(8, 16, 4)
    layer, reference = _layer(mask)
    x = torch.randn(12, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, want = layer(x), reference(x)
    assert out.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), want.float(), rtol=2e-2, atol=2e-2)


def test_flops_are_what_the_condensed_kernels_execute() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    layer, _ = _layer(_constant_fan_in_mask(6, 10, 3, ablated=(2,)))
    x = torch.randn(7, 10, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        layer(x).sum().backward()
    assert counter.get_total_flops() == 3 * 2 * 7 * 5 * 3  # forward, input grad, weight grad over 5 live rows of 3


def test_a_mask_without_a_constant_fan_in_is_refused() -> None:
    mask = _constant_fan_in_mask(4, 8, 3)
    mask[0, :] = True
    with pytest.raises(ValueError, match="same fan-in in every live neuron"):
        _layer(mask)


def _srigl(execution: str, density: float = 0.2, **params: object) -> dstbench.Method:
    params = {"delta_t": 3, "t_end": 11, **params}  # updates at steps 3, 6 and 9
    return dstbench.create_method(
        "srigl", micro_vit(), density=density, total_steps=12, optimizer=ADAMW, execution=execution, **params
    )


def _train(method: dstbench.Method, steps: int = STEPS) -> tuple[list[float], list[dict[str, torch.Tensor]]]:
    batches = micro_batches()
    losses, masks = [], []
    for _ in range(steps):
        losses.append(method.train_segment(batches, 1).loss)
        masks.append(method.masks())
    return losses, masks


def test_condensed_srigl_makes_the_decisions_masked_srigl_makes() -> None:
    masked, condensed_ = _srigl("masked"), _srigl("condensed")
    assert isinstance(condensed_.mask_set, CondensedMaskSet)
    assert isinstance(condensed_.model.blocks[0].mlp.fc1, CondensedLinear)
    (masked_losses, masked_masks), (losses, masks) = _train(masked), _train(condensed_)
    assert condensed_.topology_updates == masked.topology_updates == 3
    for step, (a, b) in enumerate(zip(masked_masks, masks), 1):
        assert all(torch.equal(a[n], b[n]) for n in a), f"step {step}: masks differ"
    assert losses == pytest.approx(masked_losses, rel=1e-4)
    assert condensed_.density() == masked.density()
    # What the structures hold is what the masks say: [live, k] per layer.
    by_layer = condensed_.fan_in_by_layer()  # read from the masks the structures describe
    for name, layer in condensed_.mask_set.layers.items():
        assert layer.values.shape == (by_layer[name]["live"], by_layer[name]["fan_in"])


def test_ablation_resizes_the_live_rows_with_their_optimizer_state() -> None:
    method = _srigl("condensed", gamma_sal=0.9)
    _train(method)
    assert method.result_extras()["ablated_neurons"] > 0
    state = method.optimizer.state
    resized = 0
    for layer in method.mask_set.layers.values():
        live = layer.rows.numel()
        resized += live < layer.out_features
        assert layer.values.shape == layer.index.shape == (live, layer.fan_in)
        assert all(t.shape == layer.values.shape for t in state[layer.values].values() if t.dim() > 0)
    assert resized > 0
    held = sum(int(mask.sum()) for mask in method.masks().values())
    assert method.density() == held / method.mask_set.numel()


def test_condensed_state_is_under_half_the_masked_state_at_density_0_1() -> None:
    masked, condensed_ = _srigl("masked", density=0.1), _srigl("condensed", density=0.1)
    _train(masked, steps=1)
    _train(condensed_, steps=1)
    full, small = training_state_bytes(masked), training_state_bytes(condensed_)
    prunable = masked.mask_set.numel()
    held = condensed_.mask_set.total_active()
    # The prunable weights, their gradients and AdamW's two moments: 16 bytes per weight, masked;
    # 16 per active weight plus 8 per index, condensed (the masks' byte per weight gone).
    layers_masked = 16 * prunable + prunable
    layers_condensed = 16 * held + sum(t.numel() * t.element_size() for l in condensed_.mask_set.layers.values()
                                       for t in l.index_buffers().values())
    assert full["total"] - small["total"] == layers_masked - layers_condensed
    assert small["total"] < 0.5 * full["total"]


def test_a_checkpoint_resumes_the_condensed_structure() -> None:
    method = _srigl("condensed", gamma_sal=0.9)
    _train(method, steps=4)  # past an update that ablated neurons
    state = copy.deepcopy(method.state_dict())
    resumed = _srigl("condensed", gamma_sal=0.9)
    resumed.load_state_dict(state)
    assert resumed.mask_set.counts == method.mask_set.counts
    assert all(torch.equal(method.mask_set.layers[n].index, l.index) for n, l in resumed.mask_set.layers.items())
    torch.manual_seed(1)
    losses, _ = _train(method, steps=3)
    torch.manual_seed(1)
    assert _train(resumed, steps=3)[0] == losses


def test_condensed_is_refused_for_masks_without_a_constant_fan_in() -> None:
    with pytest.raises(ValueError, match="execution condensed stores the same fan-in .* this method runs masked, csr, semi_structured"):
        dstbench.create_method("rigl", micro_vit(), density=0.2, total_steps=12, optimizer=ADAMW, execution="condensed")
    with pytest.raises(ValueError, match="execution semi_structured needs transposable 2:4 masks"):
        _srigl("semi_structured")
