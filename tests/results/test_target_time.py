"""Seconds to a top-1 target (dstbench.results.target_time): the update term on a constructed
schedule, a step's time less the updates in its segment, the interval's coverage on simulated
cases (seeds and timing both noisy), the speedup to target paired by seed, censored and unpriced
cases, and a digits run in `mode: both` end to end (`Run.frame`, the report, the expectations)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dstbench
from dstbench.dst.update_schedule import UpdateSchedule
from dstbench.results.derive import load_frame
from dstbench.results.expectations import evaluate
from dstbench.results.intervals import BetweenProcesses
from dstbench.results.target_speedup import speedup_to_target, step_ratio
from dstbench.results.target_time import (
    StepTime, absolute_between, add_target_times, clock_at, step_time, target_time, updates_before,
)
from dstbench.suite.schema_sections import Expectation


def scheduled_curve(schedule: UpdateSchedule, evaluations: list[int]) -> list[dict[str, Any]]:
    """A curve evaluated at `evaluations`, its updates those of `schedule`, as the accuracy track writes it."""
    updates, curve, since = schedule.update_steps(), [], 0
    for epoch, step in enumerate(evaluations, 1):
        curve.append({"epoch": epoch, "step": step, "top1": 0.1 * epoch, "train_time_s": 0.5 * epoch,
                      "topology_updates": sum(1 for s in updates if s <= step), "update_steps": [s for s in updates if since < s <= step]})
        since = step
    return curve


def test_the_updates_before_the_target_follow_the_schedule() -> None:
    schedule = UpdateSchedule(delta_t=10, t_end=0.75, drop_fraction=0.3, total_steps=176)  # updates at 10, ..., 130
    curve = scheduled_curve(schedule, [44, 88, 132, 176])
    assert curve[-1]["topology_updates"] == 13
    assert updates_before(curve, 57.3) == 5.0  # 10, 20, 30, 40, 50
    assert updates_before(curve, 130.0) == 13.0 and updates_before(curve, 160.0) == 13.0  # none after t_end
    assert updates_before(curve, 9.9) == 0.0
    assert math.isnan(updates_before(curve, math.nan))
    older = [{k: v for k, v in p.items() if k != "update_steps"} for p in curve]  # written before they were recorded
    assert math.isnan(updates_before(older, 57.3))
    assert clock_at(curve, 66.0) == pytest.approx(0.75)  # halfway from 0.5 s at 44 to 1.0 s at 88
    # Seconds: steps x step time + updates x update cost, exactly.
    timing = StepTime(step_ms=8.0, step_log_var=0.0, step_df=10.0, covers="", update_ms=30.0)
    assert target_time([57.3], [5.0], timing).seconds == pytest.approx((57.3 * 8.0 + 5 * 30.0) / 1e3)
    unpriced = StepTime(step_ms=8.0, step_log_var=0.0, step_df=10.0, covers="")  # no update was timed
    assert math.isnan(target_time([57.3], [5.0], unpriced).seconds)
    assert target_time([57.3], [0.0], unpriced).seconds == pytest.approx(57.3 * 8.0 / 1e3)  # dense: nothing to price


def timed_line(step_ms: float, updates: list[int], update_ms: list[float], rng: np.random.Generator | None = None, *,
               steps: int = 5, processes: int = 2, rounds: int = 5, between: float = 0.0, within: float = 0.0,
               group: str = "g") -> dict[str, Any]:
    """A timed line: `processes` x `rounds` segments of `steps` steps at `step_ms` each (log-normal
    process offsets and round noise from `rng`), segment i holding updates[i] updates of update_ms[i] ms."""
    ms, process, offsets = [], [], [rng.normal(0, between) if rng is not None else 0.0 for _ in range(processes)]
    for p in range(processes):
        for _ in range(rounds):
            noise = rng.normal(0, within) if rng is not None else 0.0
            ms.append(steps * step_ms * math.exp(offsets[p] + noise))
            process.append(p)
    ms = [x + u for x, u in zip(ms, update_ms)]
    return {"status": "ok", "segment_ms": ms, "segment_steps": steps, "segment_group": [group] * len(ms),
            "segment_process": process, "segment_round": list(range(len(ms))), "segment_topology_updates": updates,
            "segment_topology_ms": update_ms, "topology_updates": sum(updates)}


def test_a_step_is_timed_without_the_updates_in_its_segment() -> None:
    updates = [1, 0] * 5
    costs = [40.0 if n else 0.0 for n in updates]  # every other segment holds a 40 ms update
    timing = step_time(pd.DataFrame([timed_line(10.0, updates, costs)]), BetweenProcesses())
    assert timing is not None
    assert timing.step_ms == pytest.approx(10.0)  # not 14 (the updates spread over the steps) nor the median of whole segments
    assert timing.update_ms == pytest.approx(40.0) and timing.update_segments == 5
    # Recompilation charged to updates (torch.compile) is part of an update's cost.
    compiled = timed_line(10.0, updates, costs) | {"topology_recompile_ms": 50.0}
    assert step_time(pd.DataFrame([compiled]), BetweenProcesses()).update_ms == pytest.approx(50.0)
    # Updates timed but not per segment (a line written before they were): no step time to take.
    assert step_time(pd.DataFrame([timed_line(10.0, updates, costs) | {"segment_topology_ms": []}]), BetweenProcesses()) is None


def simulated_case(rng: np.random.Generator, steps_mean: float, seeds: int) -> tuple[list[float], list[float], pd.DataFrame]:
    """Seeds' steps (normal) and updates (every 100 steps until step 750), and ten timed lines of a run
    sharing its process offsets' spread, the first this case's (updates of ~4 ms in every other segment)."""
    steps = list(rng.normal(steps_mean, 0.08 * steps_mean, seeds))
    updates = [float(min(s, 749) // 100) for s in steps]
    lines = []
    for case in range(10):
        counts = [1, 0] * 5
        costs = [float(rng.normal(4.0, 0.6)) if n else 0.0 for n in counts]
        lines.append(timed_line(10.0, counts, costs, rng, between=0.05, within=0.03, group=f"g{case}"))
    return steps, updates, pd.DataFrame(lines)


def test_the_interval_covers_the_true_time_as_often_as_it_says() -> None:
    rng = np.random.default_rng(0)
    draws = rng.normal(1000, 80, 1_000_000)
    expected_updates = float(np.mean(np.minimum(draws, 749) // 100))
    truth = (1000 * 10.0 + expected_updates * 4.0) / 1e3  # the step time's geometric centre is 10 ms
    covered, widths, trials = 0, [], 400
    for _ in range(trials):
        steps, updates, lines = simulated_case(rng, 1000, seeds=3)
        timing = step_time(lines.iloc[:1], absolute_between(lines))
        estimate = target_time(steps, updates, timing)
        covered += estimate.low <= truth <= estimate.high
        widths.append(estimate.high / estimate.low)
    assert 0.90 <= covered / trials <= 0.99, covered / trials
    assert 1.05 < float(np.median(widths)) < 2.0  # neither a point nor everything


def test_the_speedup_to_target_pairs_seeds_and_covers_the_true_ratio() -> None:
    rng = np.random.default_rng(1)
    same = StepTime(step_ms=10.0, step_log_var=0.001, step_df=20.0, covers="", update_ms=4.0, update_log_var=0.01, update_df=4.0)
    value, low, high = speedup_to_target(([900.0, 1000.0, 1100.0], [8.0, 9.0, 10.0], same), ([900.0, 1000.0, 1100.0], [8.0, 9.0, 10.0], same))
    assert value == pytest.approx(1.0) and low < 1.0 < high
    # A case half as fast per step that needs the same steps: 0.5x, whatever the seeds' spread, since
    # they are paired (the seed part of the interval vanishes).
    slow = StepTime(step_ms=20.0, step_log_var=0.001, step_df=20.0, covers="")
    value, low, high = speedup_to_target(([900.0, 1000.0, 1300.0], [0.0] * 3, same), ([900.0, 1000.0, 1300.0], [0.0] * 3, slow))
    assert value == pytest.approx(0.5) and 0.45 < low < 0.5 < high < 0.55
    # Coverage of the paired ratio on simulated cases: the method needs 10% fewer steps per seed.
    draws = rng.normal(1000, 80, 1_000_000)
    own_draws = 0.9 * draws + rng.normal(0, 20, len(draws))
    truth = (1000 * 10.0 + np.mean(np.minimum(draws, 749) // 100) * 4.0) / (900 * 10.0 + np.mean(np.minimum(own_draws, 749) // 100) * 4.0)
    covered, trials = 0, 300
    for _ in range(trials):
        steps, updates, lines = simulated_case(rng, 1000, seeds=3)
        between = absolute_between(lines)
        ref = (steps, updates, step_time(lines.iloc[:1], between))
        own_steps = [0.9 * s + rng.normal(0, 20) for s in steps]
        own = (own_steps, [float(min(s, 749) // 100) for s in own_steps], step_time(lines.iloc[1:2], between))
        value, low, high = speedup_to_target(ref, own)
        covered += low <= truth <= high
    assert 0.90 <= covered / trials <= 1.0, covered / trials  # wider than nominal: the timing parts are added as independent


def test_a_case_without_a_timed_update_has_no_time_and_says_why(tmp_path: Path) -> None:
    schedule = UpdateSchedule(delta_t=10, t_end=0.75, drop_fraction=0.3, total_steps=176)
    line = timed_line(10.0, [0] * 10, [0.0] * 10) | {
        "run": str(tmp_path), "method": "rigl", "kind": "masked", "density": 0.5, "seed": 0, "curve": scheduled_curve(schedule, [44, 88]),
        "steps_to_target": 50.0, "target_reached": True,
    }
    out = add_target_times(pd.DataFrame([line])).iloc[0]
    assert out["updates_to_target"] == 5.0 and math.isnan(out["time_to_target_s"])
    assert "no update fell in its timed segments" in out["time_to_target_basis"]
    older = line | {"segment_topology_updates": [1] * 10, "segment_topology_ms": [], "topology_updates": 10}
    out = add_target_times(pd.DataFrame([older])).iloc[0]
    assert math.isnan(out["time_to_target_s"]) and "do not list their updates' times" in out["time_to_target_basis"]
    untimed = {k: v for k, v in line.items() if not k.startswith("segment")}  # an accuracy-only line
    assert "no timed speed segments" in add_target_times(pd.DataFrame([untimed])).iloc[0]["time_to_target_basis"]


def test_a_run_in_mode_both_times_each_case_to_its_target(both_run: Path) -> None:
    run = dstbench.load_run(both_run)
    frame = run.frame(all_columns=True).set_index("case_id")
    barter = frame.loc["barter@0.5"]
    for column in ("time_to_target_s", "time_to_target_ci_low", "time_to_target_ci_high", "time_to_target_speedup",
                   "time_to_target_speedup_vs_dense", "updates_to_target", "train_time_to_target_s"):
        assert math.isfinite(barter[column]), column
    assert barter["time_to_target_ci_low"] < barter["time_to_target_s"] < barter["time_to_target_ci_high"]
    assert barter["time_to_target_speedup_ci_low"] < barter["time_to_target_speedup"] < barter["time_to_target_speedup_ci_high"]
    assert barter["updates_to_target"] > 0 and "update cost from" in barter["time_to_target_covers"]
    assert "2 seeds" in barter["time_to_target_covers"]
    # The estimate is steps x the step time + updates x an update's cost, the means over the seeds.
    expected = (barter["steps_to_target"] * barter["step_ms_without_updates"] + barter["updates_to_target"] * barter["update_ms"]) / 1e3
    assert barter["time_to_target_s"] == pytest.approx(expected)
    per_seed = run.frame(per_seed=True).set_index(["case_id", "seed"])
    curves = run.curves()
    for seed in (0, 1):
        own = curves[(curves["case_id"] == "barter@0.5") & (curves["seed"] == seed)].to_dict("records")
        line = next(line for line in load_frame([both_run]).to_dict("records") if line["case_id"] == "barter@0.5" and line["seed"] == seed)
        assert per_seed.loc[("barter@0.5", seed), "updates_to_target"] == updates_before(line["curve"], per_seed.loc[("barter@0.5", seed), "steps_to_target"])
        assert own[-1]["topology_updates"] == 9  # every 10 steps until 0.75 x 132
    dense = frame.loc["dense@1"]
    assert dense["updates_to_target"] == 0 and math.isnan(dense["update_ms"])
    assert dense["time_to_target_speedup_vs_dense"] == 1.0
    # The speedup prices the other case's steps at the paired step ratio of the rounds the two
    # shared (the timing phase interleaved them), not at its own step time.
    lines = {(line["case_id"], line["seed"]): line for line in load_frame([both_run]).to_dict("records")}

    def priced(other: str) -> float:
        rho = step_ratio([(lines[(other, 0)], lines[("barter@0.5", 0)])], BetweenProcesses())
        # 3 rounds were timed; a round the machine starved is left out, so a busy machine shows fewer.
        assert rho is not None and re.search(r"paired over 2 processes x [1-3] rounds?", rho.covers), rho
        row = frame.loc[other]
        return (row["steps_to_target"] * rho.value * barter["step_ms_without_updates"] + row["updates_to_target"] * (row["update_ms"] if row["updates_to_target"] else 0)) / 1e3

    assert barter["time_to_target_speedup"] == pytest.approx(priced("dense@1") / barter["time_to_target_s"])  # the reference is dense
    assert re.match(r"2 seeds paired; step-time ratio paired over 2 processes x [1-3] rounds?", barter["time_to_target_speedup_basis"])
    report = run.report()
    assert "time to target s" in report and "accuracy-run s" in report
    outcomes = evaluate([Expectation(metric="time_to_target_speedup", method="barter", vs="rigl", min=0.01),
                         Expectation(metric="time_to_target", method="barter", max=1e-9)], "dense", load_frame([both_run]))
    assert outcomes[0].passed and "95% CI [" in outcomes[0].message and "2 seeds" in outcomes[0].message
    assert not outcomes[1].passed and "> max" in outcomes[1].message
    assert outcomes[0].value == pytest.approx(priced("rigl@0.5") / barter["time_to_target_s"])
