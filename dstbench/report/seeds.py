"""Means and confidence intervals over seeds: of one run's `seeds:` (`pool_seeds`, what
`Run.frame()` shows), and of runs of one suite that differ only in `seed:`.

`dstbench report RUN_A RUN_B RUN_C`, given such runs, adds the "Over seeds" table: per (method,
density), the mean of each accuracy figure over the runs with its 95% Student-t interval (n - 1
degrees of freedom: with 3 seeds the half-width is 4.30 standard errors). Runs that differ in
anything else (model, data, epochs, methods' params...) are not pooled: the table is then left out,
and `seed_summary` refuses them. `seed_summary` is the same table as a DataFrame, for scripts
(`reports/barter_ablation/make_readme.py`).

The seed and the settings come from each run folder's `suite.yaml` (read without validation, so
no dataset or torch is needed).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from dstbench.report.sections import Table, register_table
from dstbench.results.replicates import frame_points, stored_seed
from dstbench.util.files import SUITE_FILE

SEED_METRICS = ("top1", "top5")


def stored_suite(run_dir: str | Path) -> dict[str, Any]:
    """The suite a run folder keeps, as plain data ({} when unreadable)."""
    try:
        data = yaml.safe_load((Path(run_dir) / SUITE_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def seed_runs(run_dirs: Iterable[str | Path]) -> dict[str, int]:
    """`{run folder: seed}` for runs whose stored suites are equal except for `seed`, each seed once.
    Raises ValueError naming the first difference otherwise."""
    runs = [str(d) for d in run_dirs]
    suites = {run: stored_suite(run) for run in runs}
    seeds: dict[str, int] = {}
    first = None
    for run, suite in suites.items():
        if not isinstance(suite.get("seed"), int):
            raise ValueError(f"{run}: no seed in its {SUITE_FILE}")
        seeds[run] = suite["seed"]
        rest = {k: v for k, v in suite.items() if k != "seed"}
        if first is None:
            first = (run, rest)
        elif rest != first[1]:
            keys = sorted(k for k in set(rest) | set(first[1]) if rest.get(k) != first[1].get(k))
            raise ValueError(f"{run} and {first[0]} differ in more than the seed: {', '.join(keys)}")
    if len(set(seeds.values())) != len(seeds):
        raise ValueError(f"runs share a seed: {seeds}")
    return seeds


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


def seed_summary(frame: pd.DataFrame, metrics: Sequence[str] = SEED_METRICS, level: float = 0.95) -> pd.DataFrame:
    """One row per (method, density) of result lines from runs that differ only in their seed:
    `n` (finished cases), `seeds`, and per metric `<m>_mean`, `<m>_ci_low`, `<m>_ci_high`.
    Methods keep the order of the first run, densities go high to low."""
    seeds = seed_runs(pd.unique(frame["run"]))
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    metrics = [m for m in metrics if m in ok and ok[m].notna().any()]
    method_rank = {m: i for i, m in enumerate(pd.unique(frame["method"]))}
    rows = []
    for (method, density), cases in ok.groupby(["method", "density"], sort=False):
        row: dict[str, Any] = {
            "method": method, "density": float(density), "n": len(cases),
            "seeds": sorted(seeds[str(run)] for run in cases["run"]),
        }
        for metric in metrics:
            values = pd.to_numeric(cases[metric], errors="coerce").tolist()
            row[f"{metric}_mean"], row[f"{metric}_ci_low"], row[f"{metric}_ci_high"] = mean_ci(values, level)
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out = out.assign(_rank=out["method"].map(method_rank), _density=-out["density"])
    return out.sort_values(["_density", "_rank"], kind="stable").drop(columns=["_rank", "_density"]).reset_index(drop=True)


def paired_difference(frame: pd.DataFrame, baseline: str, metric: str = "top1", level: float = 0.95) -> pd.DataFrame:
    """Per (method, density), `metric` minus the `baseline` method's at the same density and seed,
    pooled over the seeds both finished: `n`, `diff_mean`, `diff_ci_low`, `diff_ci_high`. Pairing
    by seed takes out what a seed does to every method alike (initial weights, data order)."""
    seeds = seed_runs(pd.unique(frame["run"]))
    ok = frame[(frame["status"] == "ok") if "status" in frame else slice(None)]
    ok = ok.assign(seed=ok["run"].astype(str).map(seeds), value=pd.to_numeric(ok[metric], errors="coerce"))
    base = ok[ok["method"] == baseline].set_index(["density", "seed"])["value"]
    rows = []
    for (method, density), cases in ok[ok["method"] != baseline].groupby(["method", "density"], sort=False):
        diffs = [v - base[(density, s)] for s, v in zip(cases["seed"], cases["value"]) if (density, s) in base.index]
        diffs = [d for d in diffs if np.isfinite(d)]  # a seed without the metric on either side pairs nothing
        if diffs:
            mean, low, high = mean_ci(diffs, level)
            rows.append({"method": method, "density": float(density), "n": len(diffs), "diff_mean": mean,
                         "diff_ci_low": low, "diff_ci_high": high})
    return pd.DataFrame(rows)


# What `pool_seeds` adds to each case's row.
POOLED_COLUMNS = (
    "seeds", "failed_seeds", "top1", "top1_ci_low", "top1_ci_high", "top1_std", "top1_drop", "top1_drop_ci_low",
    "top1_drop_ci_high", "top1_drop_seeds",
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
    """One row per case (run, case id) of a frame with one row per (case, seed), as `Run.frame()`
    shows it. Over the seeds whose line is ok: `seeds` (how many), `top1` (their mean),
    `top1_ci_low`/`top1_ci_high` (Student-t interval at `level`, n - 1 degrees of freedom; NaN
    with one seed), `top1_std` (sample standard deviation; NaN with one seed), and `top1_drop`:
    `baseline`'s top-1 minus the case's, paired by seed (the same run, sweep point and seed; a
    seed counts where both are ok), its interval and `top1_drop_seeds` (the pairs it rests on).
    `failed_seeds` lists the seeds whose line is not ok; `status` is ok only when none is. Every
    other column is the first seed's (its speed and memory figures: the timed seed unless
    `timing.per_seed`)."""
    if derived.empty:
        return derived.assign(**{c: pd.Series(dtype=float) for c in POOLED_COLUMNS})
    frame = derived.assign(_point=frame_points(derived), _order=range(len(derived)))
    ok = frame["status"] == "ok"
    top1 = pd.to_numeric(frame["top1"], errors="coerce") if "top1" in frame else pd.Series(np.nan, index=frame.index)
    base = frame[(frame["method"] == baseline) & ok]
    # The baseline's top-1 by (run, point, seed); dense runs at 1.0, any other baseline at the case's density.
    base_top1 = {
        (str(r["run"]), r["_point"], r.get("seed"), None if r["kind"] == "dense" else float(r["density"])): top1[i]
        for i, r in base.iterrows()
    }
    at_one = not base.empty and (base["kind"] == "dense").all()
    first_seeds = {run: stored_seed(run) for run in pd.unique(frame["run"].astype(str))} if "run" in frame else {}
    rows = []
    for (run, _case), cases in frame.groupby([frame["run"].astype(str), "case_id"], sort=False):
        row = _first_seed_row(cases, first_seeds.get(run)).to_dict()
        good = cases[ok[cases.index]]
        values = [float(v) for v in top1[good.index] if math.isfinite(v)]
        mean, low, high = mean_ci(values, level)
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
        row.update(
            seeds=len(good), failed_seeds=[int(s) for s in failed["seed"] if pd.notna(s)] if "seed" in failed else [],
            top1=mean, top1_ci_low=low, top1_ci_high=high,
            top1_std=float(np.std(values, ddof=1)) if len(values) > 1 else math.nan,
            top1_drop=drop[0], top1_drop_ci_low=drop[1], top1_drop_ci_high=drop[2], top1_drop_seeds=len(drops),
        )
        if not failed.empty:
            row["status"] = str(failed.iloc[0]["status"])
        rows.append(row)
    pooled = pd.DataFrame(rows)
    pooled = pooled.sort_values("_order", kind="stable").drop(columns=["_point", "_order"]).reset_index(drop=True)
    pooled.attrs.update(derived.attrs)
    return pooled


def format_mean_ci(mean: float, low: float, high: float, scale: float = 100.0, digits: int = 1) -> str:
    """`95.3 [94.1, 96.5]` (percentages by default); the mean alone when the interval is unknown."""
    if not math.isfinite(mean):
        return "—"
    text = f"{mean * scale:.{digits}f}"
    return text + (f" [{low * scale:.{digits}f}, {high * scale:.{digits}f}]" if math.isfinite(low) else "")


@register_table(
    "seed_table", "Over seeds", order=48,
    caption="Runs that differ only in their seed, pooled: mean and 95% Student-t interval over the seeds.",
)
def seed_table(derived: pd.DataFrame) -> Table | None:
    if "run" not in derived or derived["run"].nunique() < 2:
        return None
    try:
        summary = seed_summary(derived)
    except ValueError:
        return None  # not runs of one setup: nothing to pool
    metrics = [m for m in SEED_METRICS if f"{m}_mean" in summary]
    if summary.empty or not metrics:
        return None
    rows = [
        [str(r["method"]), f"{r['density']:g}", str(r["n"]), ", ".join(map(str, r["seeds"]))]
        + [format_mean_ci(r[f"{m}_mean"], r[f"{m}_ci_low"], r[f"{m}_ci_high"]) for m in metrics]
        for _, r in summary.iterrows()
    ]
    return Table(
        headers=["method", "density", "n", "seeds"] + [f"{m} % [95% CI]" for m in metrics],
        rows=rows,
        align=["left", "right", "right", "left"] + ["right"] * len(metrics),
        note="Each run is one seed of the same suite; n counts the finished cases pooled.",
    )
