"""One training step of every registered method on the smoke suite's ViT (new methods join
automatically). The step is the steady-state one: topology updates have their own benchmarks."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import dstbench
from dstbench.measure.trackers.memory import ActivationCounter, training_state_bytes
from tests.benchmarks.conftest import OPTIMIZER, TOTAL_STEPS, pedantic, smoke_batch


def _density(kind: str) -> float:
    return 1.0 if kind == "dense" else 0.1  # dense runs only at 1.0, as in a suite


@pytest.mark.parametrize("name", dstbench.list_methods())
def test_training_step(benchmark: Any, vit: torch.nn.Module, name: str) -> None:
    kind = dstbench.method_info(name).kind
    method = dstbench.create_method(
        name, vit, density=_density(kind), total_steps=TOTAL_STEPS, optimizer=OPTIMIZER
    )
    # Never due inside the benchmark, so every round is an ordinary step (the first update of
    # most methods falls within the rounds otherwise, and would be timed as a step).
    method.update_due = lambda step: False  # type: ignore[method-assign]
    inputs, targets = smoke_batch(method.model)
    counter = ActivationCounter(method.model)
    with counter:  # the first step also builds the optimizer state that the byte count includes
        first_loss = method.train_step(inputs, targets)
    state = training_state_bytes(method)
    benchmark.group = "training step"
    benchmark.extra_info.update(
        method=name, kind=kind, density=_density(kind), batch_size=int(inputs.shape[0]),
        state_bytes=state["total"], state_breakdown=state, activation_bytes=counter.total,
    )
    steps_before = method.step
    loss = pedantic(benchmark, method.train_step, args=(inputs, targets))
    assert method.step > steps_before
    assert torch.isfinite(first_loss) and torch.isfinite(loss)
    assert counter.total > 0 and state["parameters"] > 0
