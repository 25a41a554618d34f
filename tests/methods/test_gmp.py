"""GMP: dense start, per-layer magnitude pruning on the cubic schedule, nothing regrows."""

from __future__ import annotations

import pytest
import torch

import dstbench
from dstbench.dst.masked.distributions import target_active
from dstbench.dst.registry import params_of
from tests.conftest import ADAMW, micro_batches, micro_vit
from tests.dst.masked.helpers import LAYER, assert_zero_where_masked, one_layer_batches, one_layer_method, run_steps


def _gmp(density: float = 0.2, total_steps: int = 40, **params: object) -> dstbench.Method:
    params = {"delta_t": 4, "t_start": 0.1, "t_end": 0.6, **params}  # prunes at 8, 12, 16, 20, 24
    return dstbench.create_method("gmp", micro_vit(), density=density, total_steps=total_steps, optimizer=ADAMW, **params)


def test_registered_as_masked_with_the_schedule_parameters() -> None:
    info = dstbench.method_info("gmp")
    assert info.kind == "masked"
    params = info.cls.Params()
    assert (params.distribution, params.delta_t, params.t_start, params.t_end, params.initial_sparsity) == ("uniform", 100, 0.25, 0.75, 0.0)
    assert not info.cls.update_replaces_step and not info.cls.grow.needs_dense_grad


def test_every_parameter_has_help() -> None:
    helps = {p.name: p.help for p in params_of(dstbench.method_info("gmp").cls)}
    assert set(helps) == {"distribution", "prunable", "execution", "delta_t", "t_start", "t_end", "initial_sparsity"}
    assert all(helps.values()), helps
    assert "RigL paper" in helps["distribution"]


def test_one_layer_follows_the_cubic_at_known_steps() -> None:
    # 64 weights, uniform 0.2: 13 at the end. Steps 20..60 of 100, every 10: 13 + round(51 (1 - p)^3).
    method = one_layer_method("gmp", density=0.2, t_start=0.2, t_end=0.6, delta_t=10)
    assert method.schedule.update_steps() == [30, 40, 50, 60]
    assert method.masks()[LAYER].all() and method.density() == 1.0
    counts = {}
    batches = one_layer_batches()
    for _ in range(70):
        method.train_segment(batches, 1)
        counts[method.step] = int(method.masks()[LAYER].sum())
    assert [counts[t] for t in (29, 30, 39, 40, 50, 60, 70)] == [64, 35, 35, 19, 14, 13, 13]
    assert method.topology_updates == 4


@pytest.mark.parametrize("density", [0.1, 0.5])
def test_the_final_density_is_exact_and_every_layer_at_its_allotment(density: float) -> None:
    method = _gmp(density)
    method.train_segment(micro_batches(), 30)
    total = method.mask_set.numel()
    assert method.density() == target_active(total, density) / total
    assert method.mask_set.counts == method.allotment
    # uniform: every layer at the target density on its own (to the weight).
    for name, count in method.allotment.items():
        assert abs(count - density * method.mask_set.numel(name)) <= 1


def test_pruned_weights_and_adam_state_stay_zero_and_nothing_regrows() -> None:
    method = _gmp()
    pruned_at = []
    for step, before, after in run_steps(method, 30):
        assert all(bool((after[n] & ~before[n]).sum() == 0) for n in after), f"regrowth at step {step}"
        assert_zero_where_masked(method, after)
        if any(not torch.equal(before[n], after[n]) for n in after):
            pruned_at.append(step)
    assert pruned_at == [8, 12, 16, 20, 24]
    state = method.optimizer.state[method.mask_set.weights[next(iter(method.masks()))]]
    assert {"exp_avg", "exp_avg_sq"} <= set(state)


def test_erk_distribution_ends_at_the_erk_allotment() -> None:
    method = _gmp(distribution="erk")
    erk = dstbench.create_method("rigl", micro_vit(), density=0.2, total_steps=40, optimizer=ADAMW)
    method.train_segment(micro_batches(), 30)
    assert method.mask_set.counts == erk.allotment


def test_density_over_the_run_is_recorded_per_update_and_per_segment() -> None:
    method = _gmp()
    batches = micro_batches()
    for steps in (6, 10, 14):  # steps 1-6, 7-16, 17-30
        method.train_segment(batches, steps)
    extras = method.result_extras()
    by_update = extras["density_by_update"]
    assert [step for step, _ in by_update] == [0, 8, 12, 16, 20, 24]
    assert by_update[0][1] == 1.0 and by_update[-1][1] == method.density()
    densities = [d for _, d in by_update]
    assert densities == sorted(densities, reverse=True)
    segments = extras["density_by_segment"]
    assert [s["steps"] for s in segments] == [[1, 6], [7, 16], [17, 30]]
    assert segments[0]["density_mean"] == 1.0
    # Steps 7-8 dense, 9-12 at the density after step 8, 13-16 after step 12.
    d = dict(by_update)
    assert segments[1]["density_mean"] == pytest.approx((2 * 1.0 + 4 * d[8] + 4 * d[12]) / 10)
    assert segments[1]["density_end"] == d[16]
    assert segments[2]["density_end"] == method.density()
    assert (extras["t_start_step"], extras["t_end_step"], extras["updates_scheduled"]) == (4, 24, 5)


def test_checkpoint_round_trip_keeps_masks_and_density_records() -> None:
    method = _gmp()
    method.train_segment(micro_batches(), 14)
    restored = _gmp()
    restored.load_state_dict(method.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(method.masks().values(), restored.masks().values()))
    assert restored.result_extras()["density_by_update"] == method.result_extras()["density_by_update"]
    for m in (method, restored):
        m.train_segment(micro_batches(seed=3), 12)
    assert all(torch.equal(a, b) for a, b in zip(method.masks().values(), restored.masks().values()))
    assert restored.density() == method.density()


def test_csr_execution_prunes_as_masked_does() -> None:
    runs = []
    for execution in ("masked", "csr"):
        method, batches = _gmp(execution=execution), micro_batches()
        losses = [method.train_segment(batches, 1).loss for _ in range(26)]
        runs.append((losses, method.masks(), method.density()))
    (masked_losses, masked_masks, masked_density), (csr_losses, csr_masks, csr_density) = runs
    assert csr_losses == pytest.approx(masked_losses, rel=1e-3)
    assert all(torch.equal(masked_masks[n], csr_masks[n]) for n in masked_masks)
    assert csr_density == masked_density


@pytest.mark.parametrize(
    "params, error, message",
    [
        ({"execution": "semi_structured"}, ValueError, "2:4"),
        ({"t_end": 50}, ValueError, "past the run's 40 steps"),
        ({"t_start": 0.7}, ValueError, "is after t_end"),
        ({"initial_sparsity": 1.0}, ValueError, "initial_sparsity"),
        ({"drop_fraction": 0.3}, TypeError, "unknown parameter"),
    ],
)
def test_invalid_parameters_are_refused(params: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        _gmp(**params)
