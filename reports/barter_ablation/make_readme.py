"""Write the generated part of `reports/barter_ablation/README.md` from the run folder next to it.

    python reports/barter_ablation/make_readme.py [RUN_DIR ...]     # default: every folder in runs/

The run is `suites/barter_ablation.yaml`, whose `seeds: [0, 1, 2]` train every case once per seed in
one folder; its cases are pooled over their seeds by `dstbench.results.pooling.pool_seeds`, as
`Run.frame()` and the report's accuracy table pool them. Several folders that differ only in
their seed are joined into one run first (`dstbench.report.seeds.joined_seeds`). Everything
between the two GENERATED markers is rewritten; the text around them is kept, so the written
reading of the tables lives in the README itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from dstbench.report.generated_readme import BEGIN, END, make_readme

HERE = Path(__file__).resolve().parent
BASELINE = "barter_split"  # today's rule before issue 15: the paired differences are against it


def _markdown(headers: list[str], rows: list[list[str]], align: list[str]) -> str:
    from tabulate import tabulate

    return tabulate(rows, headers=headers, tablefmt="github", colalign=align, disable_numparse=True)


def accuracy_table(pooled: pd.DataFrame, frame: pd.DataFrame) -> str:
    """Top-1 per method (rows) and density (columns): mean [95% CI] over the seeds, how many, and
    the case's letters in that density's ranking (`dstbench.results.ranking`: two cases share a
    letter exactly when their paired-by-seed difference is not significant after Holm)."""
    from dstbench.report.seeds import format_mean_ci
    from dstbench.results.ranking import rank_cases

    densities = sorted({float(d) for d in pooled["density"] if d < 1.0}, reverse=True)
    cell = {(r["method"], float(r["density"])): format_mean_ci(r["top1"], r["top1_ci_low"], r["top1_ci_high"])
            + f" (n={r['seeds']})" for _, r in pooled.iterrows()}
    letters = {}
    for density in densities:
        ranking = rank_cases(frame, density)
        for case, group in zip(ranking["case_id"], ranking["letters"]):
            letters[(case.split("@")[0], density)] = group
    rows = []
    for method in pd.unique(pooled["method"]):
        dense_only = all((method, d) not in cell for d in densities)
        label = f"{method} (density 1)" if dense_only else method
        rows.append([label] + [f"{cell.get((method, 1.0 if dense_only else d), '—')} {letters.get((method, d), '')}".rstrip()
                               for d in densities])
    return _markdown(["method"] + [f"density {d:g}" for d in densities], rows, ["left"] + ["right"] * len(densities))


def difference_table(frame: pd.DataFrame) -> str:
    """Each BARTER arm's top-1 minus `BASELINE`'s at the same density, paired by seed: the negated
    drop `pool_seeds` pairs against `BASELINE`."""
    from dstbench.report.seeds import format_mean_ci
    from dstbench.results.pooling import pool_seeds

    pooled = pool_seeds(frame, baseline=BASELINE)
    arms = pooled[pooled["method"].str.startswith("barter") & (pooled["method"] != BASELINE)]
    densities = sorted(set(arms["density"].astype(float)), reverse=True)
    cell = {(r["method"], float(r["density"])): format_mean_ci(-r["top1_drop"], -r["top1_drop_ci_high"], -r["top1_drop_ci_low"], digits=2)
            for _, r in arms.iterrows()}
    rows = [[m] + [cell.get((m, d), "—") for d in densities] for m in pd.unique(arms["method"])]
    return _markdown(["method"] + [f"density {d:g}" for d in densities], rows, ["left"] + ["right"] * len(densities))


def _blocks_without(extras: dict, kind: str) -> float:
    history = extras.get("topology_history") or []
    return float(sum(1 for units in history[-1][kind] if units == 0)) if history else np.nan


def exchange_table(frame: pd.DataFrame) -> str:
    """Per BARTER arm, density and unit kind, the exchange figures of each seed's case averaged over seeds."""
    from dstbench.util.text import percent
    from dstbench.report.compact_topology import exchange_summary

    records = []
    for _, r in frame[(frame["status"] == "ok") & (frame["kind"] == "compact")].iterrows():
        extras = r["method_extras"] if isinstance(r["method_extras"], dict) else {}
        for kind, s in (exchange_summary(extras) or {}).items():
            start = (extras.get("topology_history") or [{}])[0].get(kind) or []
            records.append({"method": r["method"], "density": float(r["density"]), "kind": kind, **s,
                            "empty_start": float(sum(1 for u in start if u == 0)), "empty_end": _blocks_without(extras, kind)})
    table = pd.DataFrame(records)
    means = table.groupby(["method", "density", "kind"], sort=False).mean(numeric_only=True).reset_index()
    means = means.sort_values(["density", "kind"], ascending=[False, True], kind="stable")
    rows = []
    for _, m in means.iterrows():
        ratio = m["fresh_pruned_share"] / m["fresh_population_share"] if m["fresh_population_share"] else np.nan
        rows.append([
            m["method"], f"{m['density']:g}", m["kind"], f"{m['pruned']:.0f}", percent(m["fresh_pruned_share"]),
            percent(m["fresh_population_share"]), "—" if not np.isfinite(ratio) else f"{ratio:.2f}",
            f"{m['moved']:.0f}", f"{m['new']:.0f}", f"{m['empty_start']:.0f} → {m['empty_end']:.1f}",
        ])
    headers = ["arm", "density", "units", "pruned", "pruned: made at previous update", "population: made at previous update",
               "ratio", "moved between blocks", "new units", "empty blocks: start → end"]
    return _markdown(headers, rows, ["left", "right", "left"] + ["right"] * 7)


def generated(run_dirs: list[Path]) -> str:
    from dstbench.report.seeds import joined_seeds
    from dstbench.results.derive import load_frame
    from dstbench.results.pooling import pool_seeds

    frame = load_frame(run_dirs)
    if len(run_dirs) > 1:
        frame = joined_seeds(frame)  # folders that differ only in their seed: one run over those seeds
    pooled = pool_seeds(frame)
    seeds = sorted({int(s) for s in frame["seed"].dropna()})

    def shown(run: Path) -> str:
        return str(run.relative_to(HERE)) if run.is_relative_to(HERE) else str(run)

    listing = "\n".join(f"- `{shown(run)}`" for run in run_dirs)
    return "\n\n".join([
        BEGIN,
        f"Pooled over seeds {', '.join(map(str, seeds))} (`seeds:` in the suite), from:\n\n{listing}",
        "### Top-1 on the 1,000 mnist5k test images, % (mean [95% CI] over seeds)\n\n"
        "The letters after each figure: two cases at one density (dense with each) share a letter exactly when their "
        "top-1 difference paired by seed is not significant (paired t-test, Holm over every pair at that density, "
        "alpha 0.05).\n\n" + accuracy_table(pooled, frame),
        f"### Top-1 minus `{BASELINE}`'s at the same density and seed, points (mean [95% CI])\n\n" + difference_table(frame),
        "### Exchange dynamics (per case and seed, averaged over seeds)\n\n"
        "Sums over each case's updates. *Made at previous update*: copies of a unit cloned at the update "
        "before (the first copy included) or new units; both shares are over the updates after the "
        "first, and *ratio* > 1 means such units were pruned more often than their number would say. "
        "*Empty blocks*: blocks holding no unit of that kind at step 0 and at the end.\n\n" + exchange_table(frame),
        END,
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="*", type=Path)
    parser.add_argument("--readme", type=Path, default=HERE / "README.md")
    args = parser.parse_args(argv)
    return make_readme(args.run_dirs, HERE, args.readme, generated, "BARTER exchange ablation")


if __name__ == "__main__":
    raise SystemExit(main())
