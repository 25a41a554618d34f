"""Runs of one suite that differ only in `seed:`: means and confidence intervals over the seeds,
by the code that pools a suite's own `seeds:` in one run folder (`joined_seeds` makes such runs
one run over their seeds, `dstbench.results.pooling.pool_seeds` pools it).

`dstbench report RUN_A RUN_B RUN_C`, given such runs, adds the "Over seeds" table: per (method,
density), the mean of each accuracy figure over the runs with its 95% Student-t interval (n - 1
degrees of freedom: with 3 seeds the half-width is 4.30 standard errors). Runs that differ in
anything else (model, data, epochs, methods' params...) are not pooled: the table is then left out,
and `seed_summary` refuses them. `seed_summary` is the same table as a DataFrame, for scripts.

The seed and the settings come from each run folder's `suite.yaml` (read without validation, so
no dataset or torch is needed).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from dstbench.report.sections import Table, register_table
from dstbench.results.pooling import pool_seeds
from dstbench.results.run_folder import RunFolder
from dstbench.util.files import SUITE_FILE

SEED_METRICS = ("top1", "top5")


def seed_runs(run_dirs: Iterable[str | Path]) -> dict[str, int]:
    """`{run folder: seed}` for runs whose stored suites are equal except for `seed`, each seed once.
    Raises ValueError naming the first difference otherwise."""
    runs = [str(d) for d in run_dirs]
    suites = {run: RunFolder.open(run).suite_data() for run in runs}
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


def joined_seeds(frame: pd.DataFrame) -> pd.DataFrame:
    """The lines of runs that differ only in their seed (`seed_runs`; ValueError otherwise) as one
    run over those seeds: each line's `seed` its run's, `run` one label. What a suite's `seeds:`
    gives in one run folder, so both are pooled by the same code (`dstbench.results.pooling`)."""
    seeds = seed_runs(pd.unique(frame["run"]))
    label = " + ".join(Path(run).name for run in seeds)
    return frame.assign(seed=frame["run"].astype(str).map(seeds), run=label)


def seed_summary(frame: pd.DataFrame, metrics: Sequence[str] = SEED_METRICS, level: float = 0.95) -> pd.DataFrame:
    """One row per (method, density) of result lines from runs that differ only in their seed:
    `n` (finished cases), `seeds`, and per metric `<m>_mean`, `<m>_ci_low`, `<m>_ci_high`
    (`pool_seeds` over `joined_seeds`). Methods keep the order of the first run, densities go high
    to low."""
    joined = joined_seeds(frame)
    ok = joined[joined["status"] == "ok"] if "status" in joined else joined
    metrics = [m for m in metrics if m in ok and ok[m].notna().any()]
    pooled = pool_seeds(joined, level=level)
    pooled = pooled[pooled["seeds"] > 0]
    if pooled.empty:
        return pd.DataFrame()
    out = pd.DataFrame({"method": pooled["method"], "density": pooled["density"].astype(float), "n": pooled["seeds"],
                        "seeds": [sorted(s) for s in pooled["seed_list"]]})
    for metric in metrics:
        out[f"{metric}_mean"], out[f"{metric}_ci_low"], out[f"{metric}_ci_high"] = (
            pooled[metric], pooled[f"{metric}_ci_low"], pooled[f"{metric}_ci_high"])
    method_rank = {m: i for i, m in enumerate(pd.unique(frame["method"]))}
    out = out.assign(_rank=out["method"].map(method_rank), _density=-out["density"])
    return out.sort_values(["_density", "_rank"], kind="stable").drop(columns=["_rank", "_density"]).reset_index(drop=True)


def paired_difference(frame: pd.DataFrame, baseline: str, level: float = 0.95) -> pd.DataFrame:
    """Per (method, density), top-1 minus the `baseline` method's at the same density and seed,
    pooled over the seeds both finished: `n`, `diff_mean`, `diff_ci_low`, `diff_ci_high` (the
    negated `top1_drop` of `pool_seeds` against `baseline`). Pairing by seed takes out what a seed
    does to every method alike (initial weights, data order). `frame`: one run over a suite's
    `seeds:` (its lines name their seed), or runs that differ only in their seed (joined first)."""
    several = "run" in frame and frame["run"].nunique() > 1
    pooled = pool_seeds(joined_seeds(frame) if several else frame, baseline=baseline, level=level)
    pooled = pooled[(pooled["method"] != baseline) & (pooled["top1_drop_seeds"] > 0)]
    return pd.DataFrame({
        "method": pooled["method"], "density": pooled["density"].astype(float), "n": pooled["top1_drop_seeds"],
        "diff_mean": -pooled["top1_drop"], "diff_ci_low": -pooled["top1_drop_ci_high"],
        "diff_ci_high": -pooled["top1_drop_ci_low"],
    }).reset_index(drop=True)


def format_mean_ci(
    mean: float, low: float, high: float, scale: float = 100.0, digits: int = 1, *, signed: bool = False, unit: str = "",
) -> str:
    """`95.3 [94.1, 96.5]` (percentages by default; `unit` after the mean, `signed` numbers with
    their sign: `+1.81 pp [+0.04, +3.57]`); the mean alone when the interval is unknown."""
    if not math.isfinite(mean):
        return "—"
    spec = f"{'+' if signed else ''}.{digits}f"
    text = f"{mean * scale:{spec}}{unit}"
    return text + (f" [{low * scale:{spec}}, {high * scale:{spec}}]" if math.isfinite(low) and math.isfinite(high) else "")


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
