"""RigL's training step and topology update with masked execution (dense kernels over zero-filled
weights) and with csr (only the active weights, CSR kernels), at densities 0.1 and 0.5, on the
smoke suite's ViT. The suites `cpu_kernels*.yaml` time the same comparison as whole segments."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import dstbench
from dstbench.dst.masked.csr import CsrLinear
from dstbench.measure.trackers import FlopCounter
from dstbench.measure.trackers.memory import training_state_bytes
from tests.benchmarks.conftest import OPTIMIZER, TOTAL_STEPS, pedantic, smoke_batch

EXECUTIONS = ["masked", "csr"]
DENSITIES = [0.1, 0.5]


def _rigl(vit: torch.nn.Module, execution: str, density: float) -> dstbench.Method:
    return dstbench.create_method(
        "rigl", vit, density=density, total_steps=TOTAL_STEPS, optimizer=OPTIMIZER, fuse_norms=True, execution=execution
    )


@pytest.mark.parametrize("density", DENSITIES)
@pytest.mark.parametrize("execution", EXECUTIONS)
def test_training_step_by_execution(benchmark: Any, vit: torch.nn.Module, execution: str, density: float) -> None:
    method = _rigl(vit, execution, density)
    method.update_due = lambda step: False  # type: ignore[method-assign]  # an ordinary step every round
    inputs, targets = smoke_batch(method.model)
    with FlopCounter() as flops:  # the first step also builds the optimizer state counted below
        first_loss = method.train_step(inputs, targets)
    state = training_state_bytes(method)
    benchmark.group = f"rigl training step at density {density:g}"
    benchmark.extra_info.update(
        execution=execution, density=density, state_bytes=state["total"], state_breakdown=state, flops_per_step=flops.total
    )
    steps_before = method.step
    loss = pedantic(benchmark, method.train_step, args=(inputs, targets))
    assert method.step > steps_before
    assert torch.isfinite(first_loss) and torch.isfinite(loss)
    assert isinstance(method.model.blocks[0].attn.qkv, CsrLinear) == (execution == "csr")


@pytest.mark.parametrize("density", DENSITIES)
def test_csr_topology_update(benchmark: Any, vit: torch.nn.Module, density: float) -> None:
    method = _rigl(vit, "csr", density)
    inputs, targets = smoke_batch(method.model)
    method.train_step(inputs, targets)
    step = next(s for s in range(1, TOTAL_STEPS + 1) if method.update_due(s))

    def backward() -> tuple[tuple, dict]:
        # What the update step does before it, untimed: the flagged backward keeps dense gradients.
        method.optimizer.zero_grad(set_to_none=True)
        method.before_forward(step)
        method.forward_loss(inputs, targets).backward()
        return (), {}

    def update() -> None:
        with torch.no_grad():
            method.update_topology(step)

    before = method.masks()
    benchmark.group = "csr topology update"
    benchmark.extra_info.update(density=density, step=step, active_weights=method.mask_set.total_active())
    pedantic(benchmark, update, setup=backward)
    after = method.masks()
    assert any(not torch.equal(before[k], after[k]) for k in before), "the update changed no mask"
    assert method.mask_set.total_active() == sum(m.sum().item() for m in before.values())
