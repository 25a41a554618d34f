"""Write the generated part of `reports/cpu_accuracy/README.md` from the run folders next to it.

    python reports/cpu_accuracy/make_readme.py [RUN_DIR ...]     # default: every folder in runs/

Each folder is one run of `suites/cpu_accuracy.yaml` over its own seeds (0-2, and 3-5 by
`--set 'seeds=[3,4,5]'`), its cases pooled over those seeds by `dstbench.load_run(...).frame()`
(`dstbench.results.pooling.pool_seeds`): top-1 as the mean with a 95% Student-t interval, the drop
against dense paired by seed, time to target and its speedups as `dstbench.results.target_time`
gives them. The seed sets are disjoint, so the two rankings are two independent looks at one
question. Everything between the two GENERATED markers is rewritten; the text around them is kept.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from dstbench.report.generated_readme import BEGIN, END, make_readme

HERE = Path(__file__).resolve().parent
RANKED_DENSITY = 0.1


def _markdown(headers: list[str], rows: list[list[str]], align: list[str]) -> str:
    from tabulate import tabulate

    return tabulate(rows, headers=headers, tablefmt="github", colalign=align, disable_numparse=True)


def load(run_dir: Path) -> tuple[str, pd.DataFrame]:
    """(`seeds A-B`, the run's frame pooled over its seeds)."""
    import dstbench

    run = dstbench.load_run(run_dir)
    seeds = sorted({int(s) for s in run.frame(per_seed=True)["seed"].dropna()})
    return f"seeds {', '.join(map(str, seeds))}", run.frame()


def _cell(row: pd.Series | None, column: str, **style: object) -> str:
    from dstbench.report.tables import pooled_text

    return "—" if row is None else pooled_text(row, column, **style)


def _seconds(row: pd.Series) -> str:
    """Seconds to target [95% CI] (the frame names its interval `time_to_target_ci_low`/`_high`)."""
    from dstbench.report.seeds import format_mean_ci

    values = [row.get(c) for c in ("time_to_target_s", "time_to_target_ci_low", "time_to_target_ci_high")]
    return format_mean_ci(*(float(v) if v is not None else math.nan for v in values), scale=1.0, digits=2)


def _row(frame: pd.DataFrame, method: str, density: float) -> pd.Series | None:
    found = frame[(frame["method"] == method) & ((frame["density"] - density).abs() < 1e-9)]
    return None if found.empty else found.iloc[0]


def _cases(frame: pd.DataFrame) -> list[tuple[str, float]]:
    """(method, density): dense first, then by density (high to low), methods in suite order."""
    dense = [(m, 1.0) for m in pd.unique(frame.loc[frame["density"] >= 1.0, "method"])]
    sparse = frame[frame["density"] < 1.0]
    ordered = sorted(((m, float(d)) for m, d in zip(sparse["method"], sparse["density"])), key=lambda c: -c[1])
    return dense + list(dict.fromkeys(ordered))


def accuracy_table(runs: list[tuple[str, pd.DataFrame]]) -> str:
    """Top-1 (mean [95% CI], %) and the drop against dense (paired by seed, points) per case and seed set."""
    headers, rows = ["case"], []
    for label, _ in runs:
        headers += [f"top-1, {label}", f"dense minus case, {label}"]
    for method, density in _cases(runs[0][1]):
        cells = [f"{method}@{density:g}"]
        for _, frame in runs:
            row = _row(frame, method, density)
            n = "" if row is None else f" (n={int(row['seeds'])})"
            drop = "—" if method == "dense" else _cell(row, "top1_drop", signed=True)
            cells += [_cell(row, "top1") + n, drop]
        rows.append(cells)
    return _markdown(headers, rows, ["left"] + ["right"] * (len(headers) - 1))


def target_table(runs: list[tuple[str, pd.DataFrame]]) -> str:
    """Steps and seconds to the suite's target and the speedups to it, per case and seed set."""
    headers = ["case", "seeds", "reached", "steps to target", "seconds to target [95% CI]",
               "speedup to target vs rigl", "vs dense"]
    rows = []
    for label, frame in runs:
        for method, density in _cases(frame):
            row = _row(frame, method, density)
            if row is None:
                continue
            reached = row.get("target_reached")
            seeds = int(row["seeds"])
            steps = row.get("steps_to_target")
            rows.append([
                f"{method}@{density:g}", label.removeprefix("seeds "),
                "—" if reached is None or not math.isfinite(float(reached)) else f"{round(float(reached) * seeds)} of {seeds}",
                "—" if steps is None or not math.isfinite(float(steps)) else f"{float(steps):.0f}",
                _seconds(row),
                "—" if method == "rigl" else _cell(row, "time_to_target_speedup", scale=1.0, digits=2, unit="x"),
                "—" if method == "dense" else _cell(row, "time_to_target_speedup_vs_dense", scale=1.0, digits=2, unit="x"),
            ])
    return _markdown(headers, rows, ["left", "left"] + ["right"] * (len(headers) - 2))


def ranking(frame: pd.DataFrame, density: float = RANKED_DENSITY) -> list[str]:
    """Methods at `density` (and dense) by mean top-1, best first."""
    at = frame[((frame["density"] - density).abs() < 1e-9) | (frame["density"] >= 1.0)]
    return list(at.sort_values("top1", ascending=False, kind="stable")["method"])


def dense_leads(frame: pd.DataFrame, density: float = RANKED_DENSITY) -> tuple[list[str], list[str]]:
    """(methods at `density` that dense leads beyond the paired drop's 95% interval, the others)."""
    at = frame[((frame["density"] - density).abs() < 1e-9)]
    beyond = [r["method"] for _, r in at.iterrows() if float(r["top1_drop_ci_low"]) > 0]
    return beyond, [m for m in at["method"] if m not in beyond]


def findings(runs: list[tuple[str, pd.DataFrame]]) -> str:
    lines = []
    orders = []
    for label, frame in runs:
        order = ranking(frame)
        orders.append(order)
        beyond, within = dense_leads(frame)
        lead = ("dense leads every sparse method beyond its interval" if not within else
                f"dense leads {', '.join(beyond) or 'none'} beyond the interval, not {', '.join(within)}")
        lines.append(f"- {label}: at density {RANKED_DENSITY:g}, by mean top-1: {' > '.join(order)}; {lead}.")
    if len(orders) == 2:
        same = orders[0] == orders[1]
        moved = [m for m, n in zip(*orders) if m != n]
        lines.append(
            f"- The ranking at density {RANKED_DENSITY:g} is {'the same' if same else 'not the same'} on the two "
            f"disjoint seed sets" + ("." if same else f" (positions differ for {', '.join(dict.fromkeys(moved))}).")
        )
    return "\n".join(lines)


def generated(run_dirs: list[Path]) -> str:
    runs = [load(run) for run in run_dirs]

    def shown(run: Path) -> str:
        return str(run.relative_to(HERE)) if run.is_relative_to(HERE) else str(run)

    listing = "\n".join(f"- `{shown(run)}` ({label})" for run, (label, _) in zip(run_dirs, runs))
    return "\n\n".join([
        BEGIN,
        f"From:\n\n{listing}",
        "### What the two seed sets say\n\n" + findings(runs),
        "### Top-1 on the 4,096 test inputs, % (mean [95% CI] over seeds); dense minus the case, points, paired by seed\n\n"
        + accuracy_table(runs),
        "### Time to the target top-1 (the suite's 0.5)\n\n"
        "Steps: the mean over seeds of the first step at which top-1 reached the target (linear between "
        "evaluations); seconds: those steps at the step time without updates plus the updates made by "
        "then at their measured cost, with a 95% interval over seeds and timing; speedups paired by "
        "seed. The timed segments are the first seed's (`mode: both` times one seed unless "
        "`timing.per_seed`), case by case, not interleaved.\n\n" + target_table(runs),
        END,
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="*", type=Path)
    parser.add_argument("--readme", type=Path, default=HERE / "README.md")
    args = parser.parse_args(argv)
    return make_readme(args.run_dirs, HERE, args.readme, generated, "CPU ranking workload")


if __name__ == "__main__":
    raise SystemExit(main())
