"""Steps to a top-1 target: when each case's accuracy curve first reaches it.

A method 5x faster per step that needs 3x the steps, or never gets there, is not 5x faster. Each
line's `curve` holds its test evaluations (`step`, `top1`, ...: `dstbench.execution.accuracy_track`);
`steps_to_target` is the first training step at which top-1 reaches the target, linearly
interpolated between the evaluation that reached it and the one before. The evaluations come every
`accuracy.eval_every` epochs, so a figure is only as precise as that period: `eval_period_steps` is
the gap it was interpolated across (AlgoPerf counts the first evaluation that crosses its target,
which is the upper end of that gap). An evaluation that reaches the target first of all has no
earlier point to interpolate from: its own step is taken, and the period is counted from step 0.

The target: the suite's `accuracy.target_top1`, or 99% of dense's mean final top-1 in the run (at
the same sweep point), or, without dense, of the reference's. A line that never reaches it is
censored: `target_reached` False and `steps_to_target` NaN, never a number. So is a seed whose
training failed (its line errored, crashed, ran out of memory or time) or ended with a non-finite
top-1 or training loss: as AlgoPerf counts a failed run, a miss, never a seed left out of the pool.
Those steps in seconds, at the case's measured step time: `dstbench.results.target_time`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from dstbench.results.replicates import frame_points
from dstbench.results.run_files import recorded_target

TARGET_SHARE = 0.99  # of the baseline's mean final top-1, without a target in the suite


@dataclasses.dataclass(frozen=True)
class BelowDense:
    """A target `points` percentage points below dense's mean final top-1 where the curves are read
    (a target sweep's `below_dense`: `dstbench.results.target_sweep`)."""

    points: float
TARGET_COLUMNS = ("target_top1", "target_basis", "steps_to_target", "target_reached", "eval_period_steps")


def curve_points(curve: Any) -> list[tuple[float, float]]:
    """(step, top1) of each evaluation of a line's curve that has both, in order."""
    points = []
    for point in curve if isinstance(curve, list) else []:
        step, top1 = (point.get("step"), point.get("top1")) if isinstance(point, dict) else (None, None)
        if isinstance(step, (int, float)) and isinstance(top1, (int, float)) and math.isfinite(top1):
            points.append((float(step), float(top1)))
    return points


def steps_to_target(curve: Any, target: float) -> tuple[float, float]:
    """(steps to `target`, the evaluation period it rests on) for one curve; (NaN, the last
    period) when no evaluation reaches the target (NaN, NaN without evaluations)."""
    points = curve_points(curve)
    before: tuple[float, float] | None = None
    for step, top1 in points:
        if top1 >= target:
            if before is None:
                return step, step  # no earlier evaluation: its own step, precise to within it
            (s0, a0), gap = before, step - before[0]
            return s0 + (target - a0) / (top1 - a0) * gap, gap
        before = (step, top1)
    period = points[-1][0] - points[-2][0] if len(points) > 1 else (points[0][0] if points else math.nan)
    return math.nan, period


def _final_top1_mean(rows: pd.DataFrame) -> float:
    values = pd.to_numeric(rows.loc[rows["status"] == "ok", "top1"], errors="coerce").dropna()
    return float(values.mean()) if len(values) else math.nan


def targets(frame: pd.DataFrame, suite_targets: Mapping[str, Any] | None = None) -> dict[tuple[str, str], tuple[float, str]]:
    """The target of each (run, sweep point) and what it is: the suite's (`suite_targets[run]`, as
    `RunFolder.target_top1` resolves it, or a `BelowDense`; a run not given: `recorded_target`), else 99% of dense's
    mean final top-1 there, else of the reference's; NaN with a reason where there is none."""
    points = frame_points(frame)
    found: dict[tuple[str, str], tuple[float, str]] = {}
    for (run, point), rows in frame.groupby([frame["run"].astype(str), points], sort=False):
        suite_target = suite_targets[run] if suite_targets is not None and run in suite_targets else recorded_target(run)
        if isinstance(suite_target, BelowDense):
            mean = _final_top1_mean(rows[rows["kind"] == "dense"])
            value = mean - suite_target.points / 100
            found[(run, point)] = ((value, f"top-1 {value:.4g}: {suite_target.points:g} points below dense's mean final top-1 "
                                            f"({mean:.4g})") if math.isfinite(mean) else (math.nan, "no target: no dense top-1 to be below"))
            continue
        if suite_target is not None:
            found[(run, point)] = (suite_target, f"top-1 {suite_target:g} (the suite's accuracy.target_top1)")
            continue
        references = [r for r in pd.unique(rows.get("reference", pd.Series(dtype=object))) if isinstance(r, str)]
        for name, chosen in (("dense", rows["kind"] == "dense"), *((r, rows["method"] == r) for r in references[:1])):
            mean = _final_top1_mean(rows[chosen])
            if math.isfinite(mean):
                found[(run, point)] = (TARGET_SHARE * mean, f"top-1 {TARGET_SHARE * mean:.4g}: 99% of {name}'s mean final top-1 ({mean:.4g})")
                break
        else:
            found[(run, point)] = (math.nan, "no target: no accuracy.target_top1, and no dense or reference top-1")
    return found


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def diverged(row: Any) -> bool:
    """Whether an ok line's training ended with a non-finite top-1 or training loss (its last
    evaluation's; JSON writes NaN as null): what it reached before then does not count."""
    curve = row.get("curve")
    last = curve[-1] if isinstance(curve, list) and curve and isinstance(curve[-1], dict) else {}
    return not _finite(row.get("top1")) or ("train_loss" in last and not _finite(last["train_loss"]))


def trained(row: Any) -> bool:
    """Whether a line's case was to train for accuracy (mode accuracy or both)."""
    return str(row.get("mode")) in ("accuracy", "both")


def add_time_to_target(frame: pd.DataFrame, suite_targets: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """`frame` (one row per line, with `run`) with `target_top1`, `target_basis`, `steps_to_target`,
    `target_reached` and `eval_period_steps` per line. `target_reached` is True or False for a line
    that trained for accuracy (False for a failed or diverged one: a miss), None for a speed line."""
    out = frame.copy()
    if frame.empty or "curve" not in frame:
        for column in TARGET_COLUMNS:
            out[column] = pd.Series(dtype=object if column in ("target_basis", "target_reached") else float)
        return out
    chosen = targets(frame, suite_targets)
    points = frame_points(frame)
    columns: dict[str, list[Any]] = {column: [] for column in TARGET_COLUMNS}
    for index, row in frame.iterrows():
        target, basis = chosen[(str(row["run"]), points[index])]
        steps = period = math.nan
        reached = None
        if row["status"] == "ok" and curve_points(row.get("curve")) and math.isfinite(target):
            steps, period = steps_to_target(row["curve"], target)
            if diverged(row):
                steps = math.nan
            reached = bool(math.isfinite(steps))
        elif row["status"] != "ok" and trained(row) and math.isfinite(target):
            reached = False  # a failed seed is a miss
        for column, value in zip(TARGET_COLUMNS, (target, basis, steps, reached, period)):
            columns[column].append(value)
    for column, values in columns.items():
        out[column] = pd.Series(values, index=frame.index, dtype=object if column in ("target_basis", "target_reached") else float)
    return out


def pooled_target(cases: pd.DataFrame) -> dict[str, Any]:
    """A case's figures over its seeds' lines: `target_reached` (the fraction of its seeds that
    reached; a failed seed counts as a miss), `target_seeds` (how many trained, failed ones
    included), `steps_to_target` (their mean when every one reached; NaN when any missed: never the
    mean of those that did) and `eval_period_steps` (the largest period those rest on)."""
    judged = cases[cases["target_reached"].map(lambda r: r is True or r is False)] if "target_reached" in cases else cases.iloc[0:0]
    if judged.empty:
        return {"target_reached": math.nan, "target_seeds": 0, "steps_to_target": math.nan, "eval_period_steps": math.nan}
    reached = judged["target_reached"].astype(bool)
    every = bool(reached.all())
    return {
        "target_reached": float(reached.mean()), "target_seeds": int(len(judged)),
        "steps_to_target": float(np.mean(judged["steps_to_target"])) if every else math.nan,
        "eval_period_steps": float(judged["eval_period_steps"].max()) if judged["eval_period_steps"].notna().any() else math.nan,
    }


def target_text(row: Any) -> str:
    """A case's steps to target as a reader wants it: '1,234 (evaluated every 88)', or 'not reached
    (reached in 1 of 2 seeds)'; '—' without curves."""
    seeds = row.get("target_seeds")
    if not isinstance(seeds, (int, float)) or not seeds or not math.isfinite(float(seeds)):
        return "—"
    fraction = float(row.get("target_reached"))
    if fraction < 1:
        return f"not reached (reached in {round(fraction * seeds)} of {int(seeds)} seed{'s' if seeds != 1 else ''})"
    return f"{float(row['steps_to_target']):,.0f} (evaluated every {float(row['eval_period_steps']):,.0f})"
