"""Survival to a top-1 target: per case, the share of its seeds that have reached the target by
each training step, or by each estimated training second.

A seed reaches the target at its steps to target (`dstbench.results.time_to_target`: the first
crossing, interpolated between evaluations) or at its estimated seconds to target
(`dstbench.results.target_time`: those steps priced at the case's measured step and update
times). The curve of a case is a step function that rises by 1/n at each seed's time, n being every
seed that trained (a failed or diverged seed, and one that never reached, count in n and never
rise: censored), so a case that not every seed brought there stays below 1. It starts at (0, 0)
and ends at the last evaluation any of its seeds made (a censored seed was watched until then).
Seconds are left out for a case whose reaching seeds have no estimate (no timed segments).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dstbench.results.replicates import frame_points
from dstbench.results.time_to_target import curve_points

SURVIVAL_COLUMNS = ("run", "point", "case_id", "method", "density", "x", "reached", "seeds")
BASES = {"steps": "steps_to_target", "seconds": "time_to_target_s"}


def _last_x(row: Any, by: str) -> float:
    """The last evaluation of a seed's curve, in steps or estimated seconds (NaN where unpriced)."""
    points = curve_points(row.get("curve"))
    if not points:
        return math.nan
    step = points[-1][0]
    if by == "steps":
        return step
    step_ms, update_ms = row.get("step_ms_without_updates"), row.get("update_ms")
    last = row["curve"][-1] if isinstance(row.get("curve"), list) and isinstance(row["curve"][-1], dict) else {}
    updates = float(last.get("topology_updates") or 0)
    if not isinstance(step_ms, (int, float)) or not math.isfinite(step_ms):
        return math.nan
    cost = updates * float(update_ms) if updates and isinstance(update_ms, (int, float)) and math.isfinite(update_ms) else 0.0
    return (step * float(step_ms) + cost) / 1e3


def survival_curves(derived: pd.DataFrame, by: str = "steps") -> pd.DataFrame:
    """One row per point of every case's survival curve (`by`: "steps" or "seconds"): the case's
    run, sweep point, id, method and density, `x`, the share of its seeds `reached` by then, and
    `seeds` (how many trained). `derived` has one row per (case, seed) with the target columns
    (`RunFolder.frame`)."""
    if by not in BASES:
        raise ValueError(f"survival by {by!r}: steps or seconds")
    column = BASES[by]
    if derived.empty or "target_reached" not in derived or column not in derived:
        return pd.DataFrame(columns=list(SURVIVAL_COLUMNS))
    judged = derived[derived["target_reached"].map(lambda r: r is True or r is False)]
    judged = judged.assign(_point=frame_points(judged), _run=judged["run"].astype(str) if "run" in judged else "")
    rows: list[dict[str, Any]] = []
    for (run, point, case), seeds in judged.groupby(["_run", "_point", "case_id"], sort=False):
        reached = seeds[seeds["target_reached"].astype(bool)]
        times = [float(t) for t in reached[column]]
        if any(not math.isfinite(t) for t in times):
            continue  # a seed got there at a time this basis cannot place
        n = len(seeds)
        ends = [x for x in (_last_x(r, by) for _, r in seeds.iterrows()) if math.isfinite(x)]
        end = max([*ends, *times, 0.0])
        first = seeds.iloc[0]
        base = {"run": run, "point": point, "case_id": case, "method": first["method"], "density": float(first["density"]), "seeds": n}
        curve = [(0.0, 0.0)] + [(t, (k + 1) / n) for k, t in enumerate(sorted(times))] + [(end, len(times) / n)]
        rows += [{**base, "x": x, "reached": share} for x, share in curve]
    return pd.DataFrame(rows, columns=list(SURVIVAL_COLUMNS))
