"""Zhu & Gupta's gradual pruning schedule: its steps, its cubic, and a layer's counts along it."""

from __future__ import annotations

import pytest

from dstbench.dst.masked.gradual import GradualSchedule, layer_target, schedule_step


def _schedule(**overrides: float) -> GradualSchedule:
    spec = {"delta_t": 10, "t_start": 0.2, "t_end": 0.6, "total_steps": 100, **overrides}
    return GradualSchedule(**spec)  # type: ignore[arg-type]


def test_positions_are_fractions_up_to_one_and_steps_above() -> None:
    assert schedule_step(0.25, 570) == 143  # 142.5, halves up
    assert schedule_step(1.0, 570) == 570
    assert schedule_step(20, 570) == 20
    schedule = _schedule(t_start=0, t_end=8, delta_t=2)
    assert (schedule.start_step, schedule.end_step) == (0, 8)


def test_pruning_steps_run_every_delta_t_from_start_to_end() -> None:
    schedule = _schedule()
    # s_i = 0: step 20 would prune to the dense layer, so the first pruning step is 30.
    assert schedule.update_steps() == [30, 40, 50, 60] and schedule.last_update_step == 60
    assert not schedule.is_update_step(20) and not schedule.is_update_step(70)
    assert _schedule(initial_sparsity=0.5).update_steps() == [20, 30, 40, 50, 60]
    # t_end off the grid still prunes, so the target is reached there.
    assert _schedule(t_end=55).update_steps() == [30, 40, 50, 55]
    assert _schedule(t_start=0.5, t_end=0.5).update_steps() == [50]


def test_the_cubic_at_known_steps() -> None:
    schedule = _schedule()
    assert [schedule.remaining(t) for t in (10, 20, 30, 40, 50, 60, 90)] == [1.0, 1.0, 0.421875, 0.125, 0.015625, 0.0, 0.0]


@pytest.mark.parametrize("initial_sparsity", [0.0, 0.5])
def test_a_layer_follows_zhu_and_guptas_sparsity(initial_sparsity: float) -> None:
    # s_t = s_f + (s_i - s_f) (1 - (t - t0) / (t_end - t0))^3 between t0 = 20 and t_end = 60, dense
    # before t0: a layer of n weights holds (1 - s_t) n of them, to the nearest whole weight.
    schedule = _schedule(initial_sparsity=initial_sparsity)
    numel, final_sparsity = 10_000, 0.9
    for step in range(0, 101):
        if step < 20:
            s_t = 0.0
        else:
            progress = min(1.0, (step - 20) / 40)
            s_t = final_sparsity + (initial_sparsity - final_sparsity) * (1 - progress) ** 3
        held = layer_target(schedule, step, numel, round((1 - final_sparsity) * numel))
        assert abs(held - (1 - s_t) * numel) <= 0.5 + 1e-6, step


def test_a_layer_falls_from_dense_to_exactly_its_final_count() -> None:
    schedule = _schedule()
    # 64 weights, 13 at the end: 13 + round(51 * remaining).
    counts = [layer_target(schedule, t, 64, 13) for t in (10, 30, 40, 50, 60, 99)]
    assert counts == [64, 35, 19, 14, 13, 13]
    # With s_i: the first pruning step keeps round((1 - s_i) n), never fewer than the final count.
    assert layer_target(_schedule(initial_sparsity=0.5), 20, 64, 13) == 32
    assert layer_target(_schedule(initial_sparsity=0.9), 20, 64, 13) == 13
    every = [layer_target(schedule, t, 1000, 7) for t in range(0, 101)]
    assert every == sorted(every, reverse=True)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"delta_t": 0}, "delta_t must be positive"),
        ({"t_start": -1}, "must be >= 0"),
        ({"initial_sparsity": 1.0}, r"initial_sparsity must be in \[0, 1\)"),
        ({"t_start": 0.7}, "is after t_end"),
        ({"t_end": 0.001, "t_start": 0.0}, "falls before step 1"),
    ],
)
def test_invalid_schedules_are_refused(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _schedule(**overrides)
