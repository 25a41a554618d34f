"""FLOP counting: attention is counted on the CPU, on the same basis as explicit matmuls."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, bmm_flop, sdpa_backward_flop_count

import dstbench
from dstbench.measure.trackers.flops import FlopCounter, attention_backward_flops, attention_formulas
from tests.conftest import ADAMW, micro_batches, micro_vit

aten = torch.ops.aten


def _step_flops(fused_attn: bool, counter: str = "dstbench", fuse_norms: bool = False) -> int:
    # Patch 4 on 32x32: 65 tokens of width 64, so attention is a sizeable share of the step.
    method = dstbench.create_method(
        "dense", micro_vit(patch_size=4), density=1.0, total_steps=4, optimizer=ADAMW, fuse_norms=fuse_norms
    )
    for module in method.model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = fused_attn  # False: timm's reference path, attention as explicit matmuls
    inputs, targets = next(micro_batches())
    if counter == "dstbench":
        with FlopCounter() as flops:
            method.train_step(inputs, targets)
        return int(flops.total)
    with FlopCounterMode(display=False) as plain:
        method.train_step(inputs, targets)
    return int(plain.get_total_flops())


@pytest.mark.parametrize("fuse_norms", [False, True])
def test_cpu_count_with_fused_attention_equals_the_explicit_matmul_count(fuse_norms: bool) -> None:
    fused = _step_flops(True, fuse_norms=fuse_norms)
    explicit = _step_flops(False, fuse_norms=fuse_norms)
    assert fused == pytest.approx(explicit, rel=0.01)
    # Without dstbench's formulas the CPU attention kernel counts 0: the difference is visible here.
    assert _step_flops(True, counter="torch") < 0.99 * explicit
    assert _step_flops(False, counter="torch") == explicit  # explicit matmuls need no formula


def test_every_attention_kernel_is_counted_on_one_basis() -> None:
    formulas = attention_formulas()
    cpu = (aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_flash_attention_for_cpu_backward)
    cuda = (aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_flash_attention_backward)
    for forward, backward in (cpu, cuda):
        assert formulas[forward] is formulas[cpu[0]] and formulas[backward] is formulas[cpu[1]]
    q = (2, 3, 5, 7)  # batch, heads, tokens, head dim
    one = bmm_flop((6, 5, 7), (6, 7, 5))  # one attention matmul: 2 * 6 * 5 * 5 * 7
    assert attention_backward_flops(q, q, q, q) == 4 * one
    assert sdpa_backward_flop_count(q, q, q, q) == 5 * one  # torch's CUDA basis adds the recompute
