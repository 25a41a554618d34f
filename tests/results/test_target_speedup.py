"""Speedups to target priced on the paired step-time ratio (dstbench.results.target_speedup): the
arithmetic on hand-made numbers, and on lines timed in the same rounds of a drifting machine, an
interval that holds the drift out where the unpaired one cannot."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dstbench.results.intervals import BetweenProcesses
from dstbench.results.target_speedup import StepRatio, paired_step_units, round_steps, speedup_to_target, step_ratio
from dstbench.results.target_time import StepTime, step_time
from tests.results.test_target_time import timed_line


def test_the_other_cases_steps_are_priced_at_the_ratio_times_the_cases_step() -> None:
    own = StepTime(step_ms=10.0, step_log_var=0.0, step_df=10.0, covers="")
    other = StepTime(step_ms=99.0, step_log_var=0.5, step_df=3.0, covers="", update_ms=30.0)  # its own step time is not used
    exact = StepRatio(2.0, 0.0, math.inf, "")
    value, low, high = speedup_to_target(([1000.0], [5.0], other), ([900.0], [0.0], own), ratio=exact)
    assert value == pytest.approx((1000 * 20.0 + 5 * 30.0) / (900 * 10.0))
    assert low == high == pytest.approx(value)  # one seed, an exact ratio and an exact update cost: no spread
    # Without the ratio (not timed side by side) each case's own step time, both timing parts added.
    value, low, high = speedup_to_target(([1000.0], [5.0], other), ([900.0], [0.0], own))
    assert value == pytest.approx((1000 * 99.0 + 5 * 30.0) / (900 * 10.0)) and low < value < high
    # The ratio's variance enters at the share of steps in the other's time (all of it without updates).
    noisy = StepRatio(2.0, 0.01, 20.0, "")
    dense = StepTime(step_ms=1.0, step_log_var=0.0, step_df=10.0, covers="")
    _, low, high = speedup_to_target(([1000.0], [0.0], dense), ([1000.0], [0.0], own), ratio=noisy)
    assert math.log(high / 2.0) == pytest.approx(2.0860 * 0.1, rel=1e-3)  # t(0.975, 20) x sqrt(0.01)


def _drifting_pair(rng: np.random.Generator, rounds: int = 6, processes: int = 2) -> tuple[dict, dict]:
    """Two cases timed in the same rounds (20 and 10 ms per step) on a machine whose speed drifts
    1.5x from round to round, alike for both, with 2% noise of their own."""
    drift = [math.exp(rng.normal(0, 0.4)) for _ in range(rounds * processes)]
    lines = []
    for step_ms in (20.0, 10.0):
        line = timed_line(step_ms, [0] * len(drift), [0.0] * len(drift), rng, processes=processes, rounds=rounds, within=0.02)
        line["segment_ms"] = [x * d for x, d in zip(line["segment_ms"], drift)]
        lines.append(line)
    return lines[0], lines[1]


def test_the_paired_ratio_holds_the_machines_drift_out() -> None:
    rng = np.random.default_rng(3)
    other, case = _drifting_pair(rng)
    assert len(round_steps(case)) == 12 and paired_step_units([(other, case)]).paired == 12
    ratio = step_ratio([(other, case)], BetweenProcesses())
    assert ratio is not None and ratio.value == pytest.approx(2.0, rel=0.03)
    assert "paired over 2 processes x 6 rounds" in ratio.covers
    steps = [1000.0, 1100.0, 900.0]
    own_time = step_time(_frame(case), BetweenProcesses())
    other_time = step_time(_frame(other), BetweenProcesses())
    assert own_time is not None and other_time is not None
    paired = speedup_to_target((steps, [0.0] * 3, other_time), (steps, [0.0] * 3, own_time), ratio=ratio)
    unpaired = speedup_to_target((steps, [0.0] * 3, other_time), (steps, [0.0] * 3, own_time))
    assert paired[1] < 2.0 < paired[2] and paired[2] / paired[1] < 1.1
    assert unpaired[2] / unpaired[1] > 1.5 * (paired[2] / paired[1])  # each case's own times carry the drift
    # Cases never timed in the same rounds share nothing to pair.
    elsewhere = {**case, "segment_group": ["other"] * len(case["segment_group"])}
    assert step_ratio([(other, elsewhere)], BetweenProcesses()) is None


def _frame(line: dict):  # type: ignore[no-untyped-def]
    import pandas as pd

    return pd.DataFrame([line])
