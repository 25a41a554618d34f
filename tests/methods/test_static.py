"""Static: the masked methods' random initial mask, never updated, with the same lean step."""

from __future__ import annotations

import pytest
import torch

import dstbench
from dstbench.dst.masked.distributions import target_active
from tests.conftest import ADAMW, SGD, micro_batches, micro_vit
from tests.dst.masked.helpers import assert_zero_where_masked, run_steps


def _static(optimizer: dict = ADAMW, density: float = 0.2, seed: int = 0, **params: object) -> dstbench.Method:
    return dstbench.create_method("static", micro_vit(), density=density, total_steps=12, optimizer=optimizer, seed=seed, **params)


def test_registered_as_masked_with_only_mask_parameters() -> None:
    info = dstbench.method_info("static")
    assert info.kind == "masked"
    assert info.cls.param_names() == ["distribution", "prunable", "execution"]
    with pytest.raises(TypeError, match="unknown parameter"):
        _static(delta_t=10)
    with pytest.raises(ValueError, match="distribution"):
        _static(distribution="snip")


@pytest.mark.parametrize("distribution", ["erk", "uniform"])
def test_starts_from_the_mask_every_masked_method_starts_from(distribution: str) -> None:
    static = _static(distribution=distribution)
    for name in ("set", "rigl", "mest"):
        other = dstbench.create_method(
            name, micro_vit(), density=0.2, total_steps=12, optimizer=ADAMW, distribution=distribution
        )
        assert static.allotment == other.allotment
        assert all(torch.equal(a, b) for a, b in zip(static.masks().values(), other.masks().values()))


@pytest.mark.parametrize("optimizer", [SGD, {**SGD, "nesterov": True, "weight_decay": 0.01}, ADAMW], ids=["sgd", "nesterov", "adamw"])
def test_the_mask_never_changes_and_masked_weights_and_state_stay_zero(optimizer: dict) -> None:
    method = _static(optimizer, density=0.1)
    first = method.masks()
    total = method.mask_set.numel()
    for step, before, after in run_steps(method, 12):
        assert not method.update_due(step)
        assert all(torch.equal(first[n], after[n]) for n in first)
        assert_zero_where_masked(method, after)
        assert method.density() == target_active(total, 0.1) / total
    assert method.topology_updates == 0
    assert method.result_extras()["updates_scheduled"] == 0


def test_an_ordinary_step_masks_only_the_gradient() -> None:
    method = _static()
    calls = []
    method.mask_set.enforce = lambda: calls.append("enforce")  # type: ignore[method-assign]
    method.train_segment(micro_batches(), 4)
    assert calls == []


def test_csr_execution_trains_as_masked() -> None:
    # static shares the masked engine's executions: on csr it keeps the same mask and losses.
    runs = []
    for execution in ("masked", "csr"):
        method, batches = _static(execution=execution), micro_batches()
        losses = [method.train_segment(batches, 1).loss for _ in range(4)]
        runs.append((losses, method.masks()))
    (masked_losses, masked_masks), (csr_losses, csr_masks) = runs
    assert csr_losses == pytest.approx(masked_losses, rel=1e-3)
    assert all(torch.equal(masked_masks[name], csr_masks[name]) for name in masked_masks)
