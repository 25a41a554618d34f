"""`CsrLinear`: the products against a dense masked linear, the structure rebuild, FLOP formulas."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from dstbench.dst.masked.csr import CsrLinear
from dstbench.dst.masked.sparse_linear import kernel_linear


def _layer(out: int = 12, inp: int = 8, density: float = 0.3, seed: int = 0) -> tuple[torch.nn.Linear, torch.Tensor, CsrLinear]:
    torch.manual_seed(seed)
    linear = torch.nn.Linear(inp, out)
    mask = torch.rand(out, inp) < density
    with torch.no_grad():
        linear.weight.mul_(mask)
    return linear, mask, CsrLinear(linear, mask)


def test_values_hold_the_active_weights_in_row_major_order() -> None:
    linear, mask, layer = _layer()
    assert layer.nnz == int(mask.sum())
    assert torch.equal(layer.values.detach(), linear.weight.detach()[mask])
    assert torch.equal(layer.active(), mask)
    assert torch.equal(layer.scatter(layer.values.detach()), linear.weight.detach())
    assert layer.bias is linear.bias  # the same Parameter: optimizer state and name stay
    assert {t.dtype for t in layer.index_buffers().values()} == {torch.int32}


@pytest.mark.parametrize("normed", [False, True])
def test_forward_and_gradients_match_the_dense_masked_linear(normed: bool) -> None:
    linear, mask, layer = _layer()
    norm = torch.nn.LayerNorm(8)
    x = torch.randn(2, 5, 8, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out = layer.norm_linear(x, norm) if normed else layer(x)
    ref = F.linear(norm(x_ref) if normed else x_ref, linear.weight, linear.bias)
    torch.testing.assert_close(out, ref)
    assert out.is_contiguous()
    grad = torch.randn_like(out)
    out.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad)
    # The weight gradient exists at the active positions only: the dense one's entries there.
    torch.testing.assert_close(layer.values.grad, linear.weight.grad[mask])
    torch.testing.assert_close(layer.bias.grad, linear.bias.grad)
    assert layer.dense_grad is None


def test_a_flagged_step_keeps_the_dense_gradient() -> None:
    linear, mask, layer = _layer()
    x = torch.randn(4, 8)
    layer.want_dense_grad = True
    layer(x).sum().backward()
    F.linear(x, linear.weight, linear.bias).sum().backward()
    torch.testing.assert_close(layer.dense_grad, linear.weight.grad)
    torch.testing.assert_close(layer.values.grad, linear.weight.grad[mask])


def test_set_active_keeps_survivors_zeroes_grown_drops_pruned() -> None:
    linear, mask, layer = _layer()
    optimizer = torch.optim.Adam([layer.values])
    layer(torch.randn(3, 8)).sum().backward()
    optimizer.step()
    before = layer.scatter(layer.values.detach())
    moment = layer.scatter(optimizer.state[layer.values]["exp_avg"])
    new = mask.clone()
    active = mask.flatten().nonzero().flatten()
    inactive = (~mask).flatten().nonzero().flatten()
    new.view(-1)[active[:2]] = False  # prune two
    new.view(-1)[inactive[:3]] = True  # grow three: the count changes (a soft budget)
    layer.set_active(new, optimizer)
    assert layer.nnz == int(mask.sum()) + 1 and layer.values.shape == (layer.nnz,)
    after = layer.scatter(layer.values.detach())
    kept = mask & new
    assert torch.equal(after[kept], before[kept])
    grown = new & ~mask
    assert torch.all(after[grown] == 0)
    state = optimizer.state[layer.values]
    assert state["exp_avg"].shape == layer.values.shape
    assert torch.equal(layer.scatter(state["exp_avg"])[kept], moment[kept])
    assert torch.all(layer.scatter(state["exp_avg_sq"])[grown] == 0)
    assert layer.values.grad is None
    # The transposed structure follows: the input gradient still matches the dense layer.
    x = torch.randn(3, 8, requires_grad=True)
    layer(x).sum().backward()
    x_ref = x.detach().clone().requires_grad_(True)
    F.linear(x_ref, after, linear.bias).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_flop_counter_counts_the_sparse_products() -> None:
    _, mask, layer = _layer(out=16, inp=16, density=0.25)
    x = torch.randn(10, 16, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        layer(x).sum().backward()
    nnz = int(mask.sum())
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    # forward and input gradient: two CSR products, weight gradient: one sampled product
    assert counts["dstbench_sparse.csr_mm"] == 2 * (2 * nnz * 10)
    assert counts["dstbench_sparse.csr_sampled_mm"] == 2 * nnz * 10
    assert counter.get_total_flops() == 3 * 2 * nnz * 10


def test_kernel_linear_under_autocast_returns_the_autocast_dtype() -> None:
    linear, _, layer = _layer()
    x = torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = kernel_linear(layer, x, layer.values, layer.bias)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), F.linear(x, linear.weight, linear.bias), atol=2e-2, rtol=2e-2)
