"""One topology update of every masked method (drop and grow over every prunable tensor)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import dstbench
from dstbench.measure.trackers.memory import training_state_bytes, unique_bytes
from tests.benchmarks.conftest import OPTIMIZER, TOTAL_STEPS, pedantic, smoke_batch

# Masked methods that update their masks (static never does).
MASKED = [
    name for name in dstbench.list_methods()
    if dstbench.method_info(name).kind == "masked" and "delta_t" in dstbench.method_info(name).cls.param_names()
]
PARAMS = MASKED or [pytest.param(None, marks=pytest.mark.skip(reason="no masked method is registered yet"))]


def _first_due_step(method: dstbench.Method) -> int:
    for step in range(1, method.total_steps + 1):
        if method.update_due(step):
            return step
    pytest.fail(f"{method.name} never falls due in {method.total_steps} steps")


def _snapshot(method: dstbench.Method) -> dict[str, torch.Tensor]:
    return {key: tensor.detach().clone() for key, tensor in method.method_buffers().items()}


@pytest.mark.parametrize("name", PARAMS)
def test_masked_update(benchmark: Any, vit: torch.nn.Module, name: str) -> None:
    method = dstbench.create_method(name, vit, density=0.1, total_steps=TOTAL_STEPS, optimizer=OPTIMIZER)
    inputs, targets = smoke_batch(method.model)
    method.train_step(inputs, targets)  # masks applied, optimizer state built
    step = _first_due_step(method)

    def backward() -> tuple[tuple, dict]:
        # What the training step does before an update: fresh gradients and the method's
        # post-backward statistics (dense gradients for RigL-style growth). Not timed.
        method.optimizer.zero_grad(set_to_none=True)
        method.forward_loss(inputs, targets).backward()
        method.after_backward(step)
        return (), {}

    def update() -> None:
        with torch.no_grad():
            method.update_topology(step)

    before = _snapshot(method)
    state = training_state_bytes(method)
    benchmark.group = "masked update"
    benchmark.extra_info.update(
        method=name, density=0.1, step=step, state_bytes=state["total"], state_breakdown=state,
        method_buffer_bytes=unique_bytes(method.method_buffers().values()),
    )
    pedantic(benchmark, update, setup=backward)
    after = _snapshot(method)
    assert before, f"{name} reports no method buffers (its masks)"
    assert any(not torch.equal(before[key], after[key]) for key in before), f"{name}'s update changed no mask"
