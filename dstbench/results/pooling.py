"""One run's seeds pooled (a suite's `seeds:`): per case, the mean of top-1 over the seeds with
its Student-t interval, and the drop against a baseline paired by seed. What `Run.frame()`,
the report's accuracy table and `check`'s top-1 expectations show.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from dstbench.results.replicates import frame_points, stored_seed
from dstbench.results.target_speedup import pool_target_times
from dstbench.results.time_to_target import pooled_target


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval; the interval is NaN with fewer than two values."""
    from scipy import stats

    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return (math.nan, math.nan, math.nan)
    mean = float(x.mean())
    if len(x) < 2:
        return (mean, math.nan, math.nan)
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return (mean, mean - half, mean + half)


# Pooled over a case's seeds with an interval: each gets `<m>_ci_low`, `<m>_ci_high`, `<m>_std`.
POOLED_METRICS = ("top1", "top5")


def pooled_means() -> tuple[str, ...]:
    """The result fields a pooled row shows as plain means over the ok seeds: those declared
    `over_seeds="mean"` (training time; a plugin tracker's), beside the accuracies' intervals."""
    from dstbench.results.record import result_fields

    return tuple(spec.name for spec in result_fields() if spec.over_seeds == "mean" and spec.name not in POOLED_METRICS)

# What `pool_seeds` adds to each case's row.
POOLED_COLUMNS = (
    "seeds", "seed_list", "failed_seeds", *(f"{m}{s}" for m in POOLED_METRICS for s in ("", "_ci_low", "_ci_high", "_std")),
    "top1_drop", "top1_drop_ci_low", "top1_drop_ci_high", "top1_drop_seeds",
)


def _first_seed_row(rows: pd.DataFrame, first_seed: Any) -> pd.Series:
    """The row of the run's first seed (the one whose speed segments run without timing.per_seed),
    else the first row."""
    if "seed" in rows and first_seed is not None:
        matching = rows[rows["seed"] == first_seed]
        if not matching.empty:
            return matching.iloc[0]
    return rows.iloc[0]


def pool_seeds(derived: pd.DataFrame, baseline: str = "dense", level: float = 0.95) -> pd.DataFrame:
    """One row per case (run, method, density, sweep point) of a frame with one row per (case, seed), as `Run.frame()`
    shows it. Over the seeds whose line is ok: `seeds` (how many) and `seed_list` (which), and for
    top-1 and top-5 their mean (`top1`, `top5`), Student-t interval at `level` (`top1_ci_low`,
    `top1_ci_high`, n - 1 degrees of freedom, cut to [0, 1]; NaN with one seed) and sample standard deviation
    (`top1_std`; NaN with one seed); `top1_drop`: `baseline`'s top-1 minus the case's, paired by
    seed (the same run, sweep point and seed; a seed counts where both are ok), its interval and
    `top1_drop_seeds` (the pairs it rests on); each field declared `over_seeds="mean"` (`pooled_means`:
    `train_time_s`, a plugin tracker's) their mean; the steps to a top-1
    target (`dstbench.results.time_to_target.pooled_target`: `target_reached` a fraction of the
    seeds, `steps_to_target` NaN unless every seed reached). `failed_seeds` lists the
    seeds whose line is not ok; `status` is ok only when none is. Every other column is the first
    seed's (its speed and memory figures: the timed seed unless `timing.per_seed`)."""
    if derived.empty:
        return derived.assign(**{c: pd.Series(dtype=float) for c in POOLED_COLUMNS})
    derived = derived.reset_index(drop=True)  # rows are told apart by their index below
    means = pooled_means()
    frame = derived.assign(_point=frame_points(derived), _order=range(len(derived)))
    ok = frame["status"] == "ok"
    values_of = {m: pd.to_numeric(frame[m], errors="coerce") if m in frame else pd.Series(np.nan, index=frame.index)
                 for m in (*POOLED_METRICS, *means)}
    top1 = values_of["top1"]
    base = frame[(frame["method"] == baseline) & ok]
    # The baseline's top-1 by (run, point, seed); dense runs at 1.0, any other baseline at the case's density.
    base_top1 = {
        (str(r["run"]), r["_point"], r.get("seed"), None if r["kind"] == "dense" else float(r["density"])): top1[i]
        for i, r in base.iterrows()
    }
    at_one = not base.empty and (base["kind"] == "dense").all()
    first_seeds = {run: stored_seed(run) for run in pd.unique(frame["run"].astype(str))} if "run" in frame else {}
    rows = []
    # A case is its method, density and sweep point (what its id is made of) within its run.
    cases_of = frame.groupby([frame["run"].astype(str), "method", frame["density"].astype(float), "_point"], sort=False)
    for (run, *_), cases in cases_of:
        row = _first_seed_row(cases, first_seeds.get(run)).to_dict()
        good = cases[ok[cases.index]]
        pooled_values: dict[str, Any] = {}
        for metric in POOLED_METRICS:
            values = [float(v) for v in values_of[metric][good.index] if math.isfinite(v)]
            mean, low, high = mean_ci(values, level)
            # An accuracy is a fraction: its interval is cut to [0, 1] (a t interval over few, spread
            # seeds near 100% would reach past it).
            low, high = (max(0.0, low), min(1.0, high)) if math.isfinite(low) else (low, high)
            std = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
            pooled_values.update({metric: mean, f"{metric}_ci_low": low, f"{metric}_ci_high": high, f"{metric}_std": std})
        for metric in means:
            pooled_values[metric] = mean_ci(values_of[metric][good.index].tolist())[0]
        drops = []
        for index, case in good.iterrows():
            if case["method"] == baseline:
                continue
            density = None if at_one else float(case["density"])
            other = base_top1.get((run, case["_point"], case.get("seed"), density))
            if other is not None and math.isfinite(other) and math.isfinite(top1[index]):
                drops.append(float(other - top1[index]))
        drop = mean_ci(drops, level)
        failed = cases[~ok[cases.index]]
        seeds = good["seed"] if "seed" in good else pd.Series(dtype=float)
        row.update(
            seeds=len(good), seed_list=[int(s) for s in seeds if pd.notna(s)],
            failed_seeds=[int(s) for s in failed["seed"] if pd.notna(s)] if "seed" in failed else [],
            **pooled_values,
            top1_drop=drop[0], top1_drop_ci_low=drop[1], top1_drop_ci_high=drop[2], top1_drop_seeds=len(drops),
        )
        row.update(pooled_target(cases))
        if not failed.empty:
            row["status"] = str(failed.iloc[0]["status"])
        rows.append(row)
    pooled = pd.DataFrame(rows)
    pooled = pooled.sort_values("_order", kind="stable").drop(columns=["_point", "_order"]).reset_index(drop=True)
    pooled.attrs.update(derived.attrs)
    return pool_target_times(pooled, derived)
