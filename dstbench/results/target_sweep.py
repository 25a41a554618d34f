"""Time to target across targets: the same curves timed to several top-1 targets, no retraining.

A run's targets are its suite's `accuracy.target_sweep` (top-1 fractions, or points below dense's
mean final top-1), else `DEFAULT_BELOW_DENSE` points below dense where the run has dense, else
none. For each target every case's steps and seconds to it are read from its curves
(`dstbench.results.time_to_target`, `dstbench.results.target_time`) and pooled over its seeds
(`dstbench.results.pooling.pool_seeds`: the mean time with its interval, the speedup to target
against the reference paired by seed); cases are ranked by their time to it, a case any seed of
which missed it after those that reached it (tied among themselves).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dstbench.results.pooling import pool_seeds
from dstbench.results.replicates import frame_points
from dstbench.results.run_folder import RunFolder
from dstbench.results.target_time import add_target_times
from dstbench.results.time_to_target import BelowDense, add_time_to_target

DEFAULT_BELOW_DENSE = (0.5, 1.0, 2.0, 5.0)  # points below dense's mean final top-1, without a sweep in the suite
SWEEP_COLUMNS = (
    "run", "point", "target", "target_top1", "target_basis", "case_id", "method", "density", "seeds", "target_reached",
    "time_to_target_s", "time_to_target_ci_low", "time_to_target_ci_high", "time_to_target_speedup",
    "time_to_target_speedup_ci_low", "time_to_target_speedup_ci_high", "rank",
)


def sweep_of(run: Any) -> tuple[list[float | BelowDense], str]:
    """A run's targets and where they come from (its suite's `accuracy.target_sweep`, or the default)."""
    folder = RunFolder.open(run)
    accuracy = folder.suite_data().get("accuracy") or {}
    sweep = accuracy.get("target_sweep") if isinstance(accuracy, dict) else None
    if isinstance(sweep, list) and sweep:
        return [float(t) for t in sweep], "the suite's accuracy.target_sweep"
    if isinstance(sweep, dict) and sweep.get("below_dense"):
        return [BelowDense(float(p)) for p in sweep["below_dense"]], "the suite's accuracy.target_sweep"
    loaded = folder.loaded()
    if not loaded.empty and (loaded["kind"] == "dense").any():
        return [BelowDense(p) for p in DEFAULT_BELOW_DENSE], (
            f"the default: {', '.join(f'{p:g}' for p in DEFAULT_BELOW_DENSE)} points below dense's mean final top-1")
    return [], "none: no accuracy.target_sweep, and no dense to sweep below"


def _label(target: float | BelowDense) -> str:
    return f"dense - {target.points:g} pp" if isinstance(target, BelowDense) else f"top-1 {target:g}"


def target_sweep(derived: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, sweep point, target, case) of a derived frame (one row per case and seed,
    with `run`): the target (`target`: its label; `target_top1`: its value there), the case's
    pooled time to it and speedup to it against the frame's reference with their intervals, the
    share of its seeds that reached it, and `rank` (1: fastest to it; cases that missed share the
    last rank). Empty without accuracy curves."""
    if derived.empty or "run" not in derived or "curve" not in derived:
        return pd.DataFrame(columns=list(SWEEP_COLUMNS))
    reference = derived.attrs.get("reference")
    rows: list[pd.DataFrame] = []
    for run in pd.unique(derived["run"].astype(str)):
        lines = derived[derived["run"].astype(str) == run]
        for target in sweep_of(run)[0]:
            timed = add_target_times(add_time_to_target(lines, {run: target}))
            timed.attrs["reference"] = reference
            pooled = pool_seeds(timed)
            pooled = pooled[pooled["target_seeds"].fillna(0) > 0] if "target_seeds" in pooled else pooled.iloc[0:0]
            if pooled.empty:
                continue
            pooled = pooled.assign(point=frame_points(pooled), target=_label(target), seeds=pooled["target_seeds"])
            for point, cases in pooled.groupby("point", sort=False):
                times = pd.to_numeric(cases["time_to_target_s"], errors="coerce")
                reached = times.notna().sum()
                ranks = times.rank(method="min")
                rows.append(cases.assign(rank=ranks.fillna(reached + 1).astype(int)))
    if not rows:
        return pd.DataFrame(columns=list(SWEEP_COLUMNS))
    out = pd.concat(rows, ignore_index=True)
    for column in SWEEP_COLUMNS:
        if column not in out:
            out[column] = math.nan
    return out[list(SWEEP_COLUMNS)]
