"""Seconds to a top-1 target: the steps a case took to reach it, priced at its measured step time.

    time_to_target_s = S x p + U x c

- S: steps to target, the mean over the case's seeds (`dstbench.results.time_to_target`); a case
  any of whose seeds missed the target is censored (NaN).
- U: topology updates made before the target, the mean over the seeds: the accuracy run's update
  steps (`curve[].update_steps`, from the method's schedule as it ran) at or before S.
- p: the time of one training step without its updates: each timed speed segment less the updates
  in it (`segment_topology_ms`), per step, summarised as `dstbench.results.intervals` summarises
  times (the mean over process sets of each set's median, on the log scale). A median of whole
  segments would drop the rare segments that hold an update and so hide their cost.
- c: the mean cost of one update in the timed segments: their update milliseconds over their update
  count, plus the recompilation charged to updates under torch.compile.

p and c come from the case's timed segments in the same run: `mode: both` times them in its timing
phase, in interleaved rounds as `mode: speed` does (`dstbench.suite.plan`). The accuracy run's own
clock (`train_time_to_target_s`, its `train_time_s` at S) is shown beside it as a check and never
mixed in: each training runs alone, so its clock is not comparable between cases.

The 95% interval is the delta method on log T, with three independent parts: the seeds' spread of
S x p + U x c (variance of the mean over seeds, n - 1 degrees of freedom), the step time's interval
(between-process variance pooled over the run's cases, as for speedups) and the update cost's
(a ratio estimator over the segments that held updates); degrees of freedom by Satterthwaite.
Speedups to target, priced on the paired step-time ratio of cases timed in the same rounds:
`dstbench.results.target_speedup`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from dstbench.results.intervals import (
    LEVEL, BetweenProcesses, UnitSamples, interval, judged_units, pool_between, starved_flags, summarize,
)
from dstbench.results.replicates import frame_points

TIME_COLUMNS = (
    "time_to_target_s", "time_to_target_ci_low", "time_to_target_ci_high", "time_to_target_covers",
    "time_to_target_basis", "updates_to_target", "step_ms_without_updates", "update_ms",
    "train_time_to_target_s",
)


# -- one seed's curve: updates before the target, the accuracy run's own clock there ---------------


def updates_before(curve: Any, steps: float) -> float:
    """The topology updates the accuracy run made at or before step `steps` (its curve's
    `update_steps`); NaN where the curve does not list them all (written before they were recorded)."""
    if not isinstance(curve, list) or not curve or not math.isfinite(steps):
        return math.nan
    listed: list[int] = []
    for point in curve:
        if not isinstance(point, dict) or not isinstance(point.get("update_steps"), list):
            return math.nan
        listed.extend(point["update_steps"])
    if len(listed) != curve[-1].get("topology_updates"):
        return math.nan  # a resume from an older checkpoint lost the earlier steps
    return float(sum(1 for step in listed if step <= steps))


def clock_at(curve: Any, steps: float) -> float:
    """The accuracy run's training seconds at step `steps`, interpolated between evaluations."""
    points = [(float(p["step"]), float(p["train_time_s"])) for p in curve if isinstance(p, dict)
              and isinstance(p.get("step"), (int, float)) and isinstance(p.get("train_time_s"), (int, float))] \
        if isinstance(curve, list) and math.isfinite(steps) else []
    if not points:
        return math.nan
    steps_at, seconds = zip(*[(0.0, 0.0), *points])
    return float(np.interp(steps, steps_at, seconds)) if steps <= steps_at[-1] else math.nan


# -- a case's timing: a step without updates, and an update ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class StepTime:
    """A case's measured ms per step without updates (`step_ms`) and per update (`update_ms`), each
    with the variance of its log estimate and the degrees of freedom; NaN variance: not estimable."""

    step_ms: float
    step_log_var: float
    step_df: float
    covers: str
    update_ms: float = math.nan  # NaN: no update fell in the timed segments
    update_log_var: float = 0.0
    update_df: float = math.inf
    update_segments: int = 0


def step_units(line: Any, tag: Any = 0) -> UnitSamples | None:
    """log(ms per step less the updates) of a line's timed segments by unit (its group and process
    set, tagged with `tag`: each seed's line is its own processes); starved segments are left out
    unless too few stay. None where the updates in a segment are unknown."""
    ms, groups, processes = (line.get(k) for k in ("segment_ms", "segment_group", "segment_process"))
    steps = line.get("segment_steps")
    if not isinstance(ms, list) or not ms or not isinstance(steps, numbers.Real) or steps <= 0:
        return None
    topology = line.get("segment_topology_ms")
    if not isinstance(topology, list) or len(topology) != len(ms):
        if line.get("topology_updates"):
            return None  # updates were timed but not per segment: a step's time cannot be told apart
        topology = [0.0] * len(ms)
    groups = groups if isinstance(groups, list) and len(groups) == len(ms) else ["untagged"] * len(ms)
    processes = processes if isinstance(processes, list) and len(processes) == len(ms) else [0] * len(ms)
    starved = starved_flags(line)

    def units(drop: bool) -> UnitSamples:
        out: dict[Any, list[float]] = {}
        left_out = 0
        for x, t, g, p, s in zip(ms, topology, groups, processes, starved):
            if not isinstance(x, (int, float)) or not math.isfinite(x) or x - float(t or 0) <= 0:
                continue
            if s and drop:
                left_out += 1
                continue
            out.setdefault((f"{tag}/{g}", int(p or 0)), []).append(math.log((x - float(t or 0)) / steps))
        return UnitSamples(out, left_out, len(ms))

    return judged_units(units)


def absolute_between(lines: pd.DataFrame) -> BetweenProcesses:
    """The between-process variance of log step times, pooled over the ok timed lines of one run:
    process offsets do not cancel in a time as they do in a ratio, so speedups' own pool is not it."""
    summaries = []
    for _, line in lines.iterrows():
        samples = step_units(line) if line.get("status") == "ok" else None
        summaries.append(summarize(samples) if samples is not None else None)
    return pool_between(summaries)


def step_time(lines: pd.DataFrame, between: BetweenProcesses) -> StepTime | None:
    """A case's `StepTime` from its timed ok lines (one per timed seed); None without any."""
    units: dict[Any, list[float]] = {}
    for tag, (_, line) in enumerate(lines.iterrows()):
        samples = step_units(line, tag) if line.get("status") == "ok" else None
        if samples is not None:
            units.update(samples.units)
    if not units:
        return None
    summary = summarize(UnitSamples(units))
    if summary is None:  # no unit of two rounds: a time, but no spread to judge it by
        values = [v for unit in units.values() for v in unit]
        timing = StepTime(math.exp(float(np.median(values))), math.nan, math.nan, "no spread: one round per process")
    else:
        iv = interval(summary, between)
        timing = StepTime(iv.value, iv.log_se**2, iv.df, iv.covers)
    return _with_update_cost(timing, lines)


def _with_update_cost(timing: StepTime, lines: pd.DataFrame) -> StepTime:
    """`timing` with the mean cost of an update over the lines' timed segments that held one."""
    charged, counted, per_segment = 0.0, 0, []
    for _, line in lines.iterrows():
        ms, counts = line.get("segment_topology_ms"), line.get("segment_topology_updates")
        if line.get("status") != "ok" or not isinstance(ms, list) or not isinstance(counts, list) or len(ms) != len(counts):
            continue
        per_segment += [(float(x), int(n)) for x, n in zip(ms, counts) if n]
        recompile, updates = line.get("topology_recompile_ms"), line.get("topology_updates")
        if isinstance(recompile, (int, float)) and math.isfinite(recompile) and updates:
            charged += float(recompile)  # under torch.compile: the recompiles an update caused
            counted += int(updates)
    total_updates = sum(n for _, n in per_segment)
    if not total_updates:
        return timing
    cost = sum(x for x, _ in per_segment) / total_updates
    m = len(per_segment)
    log_var, df = 0.0, math.inf
    if m > 1 and cost > 0:  # the ratio estimator's variance, over the segments that held updates
        variance = m / (m - 1) * sum((x - cost * n) ** 2 for x, n in per_segment) / total_updates**2
        log_var, df = variance / cost**2, float(m - 1)
    recompile = charged / counted if counted else 0.0
    return dataclasses.replace(timing, update_ms=cost + recompile, update_log_var=log_var, update_df=df, update_segments=m)


# -- the estimate and its interval ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TargetTime:
    """Seconds to target with its interval; `parts` are the log-variance parts and their df."""

    seconds: float
    low: float
    high: float
    parts: tuple[tuple[float, float], ...]


def log_interval(centre: float, parts: Sequence[tuple[float, float]], level: float = LEVEL) -> tuple[float, float]:
    """exp(log centre +- t * sqrt(sum of parts)), Satterthwaite's df over the parts (variance, df)."""
    variance = sum(v for v, _ in parts)
    if not math.isfinite(variance) or not math.isfinite(centre) or centre <= 0:
        return math.nan, math.nan
    if variance <= 0:
        return centre, centre
    denominator = sum(v**2 / df for v, df in parts if v > 0 and math.isfinite(df))
    df = variance**2 / denominator if denominator > 0 else math.inf
    half = float(stats.t.ppf(0.5 + level / 2, df)) * math.sqrt(variance)
    return centre * math.exp(-half), centre * math.exp(half)


def seconds_of(steps: float, updates: float, timing: StepTime) -> float:
    return (steps * timing.step_ms + (updates * timing.update_ms if updates else 0.0)) / 1e3


def timing_parts(steps: float, updates: float, timing: StepTime, total: float) -> list[tuple[float, float]]:
    """The step time's and the update cost's parts of Var(log T)."""
    share_steps = steps * timing.step_ms / 1e3 / total
    parts = [(share_steps**2 * timing.step_log_var, timing.step_df)]
    if updates:
        parts.append(((updates * timing.update_ms / 1e3 / total) ** 2 * timing.update_log_var, timing.update_df))
    return parts


def target_time(steps: Sequence[float], updates: Sequence[float], timing: StepTime, level: float = LEVEL) -> TargetTime:
    """Seconds to target from each seed's steps and updates before it, priced at `timing` (see the
    module docstring); NaN where a seed missed, its updates are unknown or an update is unpriced."""
    s, u = np.asarray(steps, dtype=float), np.asarray(updates, dtype=float)
    if not len(s) or not np.isfinite(s).all() or not np.isfinite(u).all() or (u.any() and not math.isfinite(timing.update_ms)):
        return TargetTime(math.nan, math.nan, math.nan, ())
    per_seed = np.array([seconds_of(a, b, timing) for a, b in zip(s, u)])
    total = float(per_seed.mean())
    parts = timing_parts(float(s.mean()), float(u.mean()), timing, total)
    if len(s) > 1:
        parts.insert(0, (float(per_seed.var(ddof=1)) / len(s) / total**2, float(len(s) - 1)))
    low, high = log_interval(total, parts, level)
    return TargetTime(total, low, high, tuple(parts))


# -- frames: each seed's line (`derive`) and each case over its seeds (`pool_seeds`) -------------------

RunCase = tuple[str, str, float, str]  # a case of one run in a frame: run, method, density, sweep point (seeds pooled)


def case_keys(frame: pd.DataFrame) -> pd.Series:
    points = frame_points(frame)
    return pd.Series([(str(r["run"]), str(r["method"]), float(r["density"]), points[i]) for i, r in frame.iterrows()],
                     index=frame.index, dtype=object)


def case_timings(derived: pd.DataFrame) -> dict[RunCase, StepTime | None]:
    """Each case's `StepTime` from its timed lines, the between-process variance pooled per run."""
    keys = case_keys(derived)
    between = {run: absolute_between(rows) for run, rows in derived.groupby(derived["run"].astype(str))}
    return {key: step_time(derived[keys == key], between[key[0]]) for key in pd.unique(keys)}


def _basis(timing: StepTime | None, updates: float, line: Any) -> str:
    """Why a case that reached the target has no time to it ('' when it has one)."""
    if timing is None:
        if isinstance(line.get("segment_ms"), list) and line["segment_ms"]:
            return "its timed segments do not list their updates' times (written before dstbench recorded them)"
        return "no timed speed segments (mode: both times them)"
    if updates and not math.isfinite(timing.update_ms):
        return "no update fell in its timed segments: an update's cost was not measured (lengthen timing.total_steps)"
    if not math.isfinite(updates):
        return "the curve does not list its update steps"
    return ""


def add_target_times(derived: pd.DataFrame) -> pd.DataFrame:
    """Each line (one seed of a case) with `updates_to_target`, `train_time_to_target_s` (the
    accuracy run's own clock there), the case's `step_ms_without_updates` and `update_ms`, and
    `time_to_target_s`: that seed's steps and updates priced at them (no interval for one seed)."""
    out = derived.copy()
    if derived.empty or "steps_to_target" not in derived or "run" not in derived:
        for column in TIME_COLUMNS:
            out[column] = pd.Series(dtype=object if column in ("time_to_target_covers", "time_to_target_basis") else float)
        return out
    timings, keys = case_timings(derived), case_keys(derived)
    columns: dict[str, list[Any]] = {c: [] for c in TIME_COLUMNS}
    for index, row in derived.iterrows():
        steps, timing = float(row["steps_to_target"]), timings[keys[index]]
        updates = updates_before(row.get("curve"), steps)
        seconds = target_time([steps], [updates], timing).seconds if timing is not None else math.nan
        values = {
            "time_to_target_s": seconds, "updates_to_target": updates, "train_time_to_target_s": clock_at(row.get("curve"), steps),
            "step_ms_without_updates": timing.step_ms if timing else math.nan, "update_ms": timing.update_ms if timing else math.nan,
            "time_to_target_ci_low": math.nan, "time_to_target_ci_high": math.nan, "time_to_target_covers": "",
            "time_to_target_basis": _basis(timing, updates, row) if math.isfinite(steps) else "",
        }
        for column in TIME_COLUMNS:
            columns[column].append(values[column])
    for column, values_list in columns.items():
        text = column in ("time_to_target_covers", "time_to_target_basis")
        out[column] = pd.Series(values_list, index=derived.index, dtype=object if text else float)
    return out
