"""`execution: csr` and live autograd graphs: a layer refuses to change its structure (resize
included) while a forward of it awaits its backward, and that backward still computes what the
forward's structure says; and the precision its products run in, as the result line records it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dstbench.dst.masked.csr import CsrLinear
from tests.conftest import ADAMW, micro_batches
from tests.dst.masked.helpers import micro_method

REFUSED = "cannot change a layer's active positions while a forward of it awaits its backward"


def _layer() -> tuple[torch.nn.Linear, torch.Tensor, CsrLinear, torch.optim.Optimizer]:
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 12)
    mask = torch.rand(12, 8) < 0.4
    with torch.no_grad():
        linear.weight.mul_(mask)
    layer = CsrLinear(linear, mask)
    return linear, mask, layer, torch.optim.AdamW([layer.values, layer.bias], lr=1e-3)


@pytest.mark.parametrize("resize", [True, False], ids=["resize", "same-count"])
def test_a_live_graph_refuses_a_structure_change_and_its_backward_stays_right(resize: bool) -> None:
    linear, mask, layer, optimizer = _layer()
    x = torch.randn(6, 8)
    out = layer(x)  # the graph saved `values` and reads the structure in its backward
    grow = (~mask).flatten().nonzero()[0]
    new = mask.flatten().clone()
    new[grow] = True
    if not resize:
        new[mask.flatten().nonzero()[0]] = False  # one out, one in: the same count
    values_before = layer.values.detach().clone()
    with pytest.raises(RuntimeError, match=REFUSED):
        layer.set_active(new.view_as(mask), optimizer)
    assert layer.nnz == int(mask.sum()) and torch.equal(layer.values.detach(), values_before)  # nothing changed
    grad = torch.randn_like(out)
    out.backward(grad)
    F.linear(x, linear.weight, linear.bias).backward(grad)
    torch.testing.assert_close(layer.values.grad, linear.weight.grad[mask])
    # The backward ran: the change goes through now, and the values fit the new structure.
    layer.set_active(new.view_as(mask), optimizer)
    assert layer.nnz == int(new.sum()) == layer.values.numel()
    assert layer.values.grad is None


def test_a_second_backward_through_a_retained_graph_is_refused_after_a_structure_change() -> None:
    # After the first backward the layer may change its structure (nothing awaits a backward); a
    # second backward through the retained graph would read the new structure with the old saved
    # values: it raises instead.
    linear, mask, layer, optimizer = _layer()
    x = torch.randn(6, 8)
    out = layer(x)
    out.sum().backward(retain_graph=True)
    torch.testing.assert_close(layer.values.grad, torch.ones(6, 12).t().matmul(x)[mask])
    layer.set_active(torch.ones_like(mask), optimizer)
    with pytest.raises(RuntimeError, match="retain_graph=True is not supported"):
        out.sum().backward()


def test_forwards_without_a_graph_do_not_block_a_change() -> None:
    _, mask, layer, optimizer = _layer()
    with torch.no_grad():
        layer(torch.randn(3, 8))
    dropped = layer(torch.randn(3, 8))
    del dropped  # its graph is freed with it: no backward will come
    layer.set_active(torch.ones_like(mask), optimizer)
    assert layer.nnz == mask.numel()


def test_a_soft_budget_resizes_within_training() -> None:
    method = micro_method("chase", ADAMW, execution="csr")
    batches = micro_batches()
    sizes = []
    for _ in range(4):  # the update at step 3 changes the count (soft budget): values are resized
        method.train_segment(batches, 1)
        sizes.append(sum(layer.values.numel() for layer in method.mask_set.layers.values()))
    assert sizes[2] != sizes[1] and method.topology_updates == 1


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_csr_products_run_in_fp32_and_the_line_says_so(precision: str) -> None:
    csr = micro_method("rigl", ADAMW, execution="csr", precision=precision)
    masked = micro_method("rigl", ADAMW, precision=precision)
    assert csr.result_extras()["kernel_precision"] == "fp32"
    assert masked.result_extras()["kernel_precision"] == precision
    layer = csr.mask_set.layers["blocks.0.mlp.fc1.weight"]
    seen: list[torch.dtype] = []
    original = layer.output

    def spy(values: torch.Tensor, x2d: torch.Tensor, cast: torch.dtype | None, prepared: None) -> torch.Tensor:
        out = original(values, x2d, cast, prepared)
        seen.append(out.dtype)
        return out

    layer.output = spy  # type: ignore[method-assign]
    csr.train_segment(micro_batches(), 1)
    assert seen == [torch.float32]
