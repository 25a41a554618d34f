"""Write the generated part of `reports/cpu_accuracy/README.md` from the run folders next to it.

    python reports/cpu_accuracy/make_readme.py [RUN_DIR ...]     # default: every folder in runs/

Each folder is one run of `suites/cpu_accuracy.yaml` over its own seeds (0-2, and 3-5 by
`--set 'seeds=[3,4,5]'`), its cases pooled over those seeds by `dstbench.load_run(...).frame()`
(`dstbench.results.pooling.pool_seeds`): top-1 as the mean with a 95% Student-t interval, the drop
against dense paired by seed, time to target and its speedups as `dstbench.results.target_time`
gives them, and each density's ranking with its letters (`Run.ranking`: paired t-tests, Holm over
the pairs). The seed sets are disjoint, so the two rankings are two independent looks at one
question: a difference "repeats" only where both separate it. Everything between the two GENERATED
markers is rewritten; the text around them is kept.
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


def rankings(run_dir: Path) -> dict[float, pd.DataFrame]:
    """The run's ranking at each density (`Run.ranking`), dense in each."""
    import dstbench

    run = dstbench.load_run(run_dir)
    densities = sorted({float(d) for d in run.frame()["density"] if float(d) < 1.0}, reverse=True)
    return {density: run.ranking(density) for density in densities}


def letters_of(ranked: dict[float, pd.DataFrame]) -> dict[str, str]:
    """Each case's letters; dense's at every density, `a (0.5), a (0.1)`."""
    out: dict[str, list[str]] = {}
    for density, ranking in ranked.items():
        for case, letters in zip(ranking["case_id"], ranking["letters"]):
            out.setdefault(case, []).append(f"{letters} ({density:g})" if case.startswith("dense@") else letters)
    return {case: ", ".join(values) for case, values in out.items()}


def _pct(value: float, signed: bool = True) -> str:
    return f"{value * 100:{'+' if signed else ''}.1f}"


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


def accuracy_table(runs: list[tuple[str, pd.DataFrame]], ranked: list[dict[float, pd.DataFrame]]) -> str:
    """Top-1 (mean [95% CI], %), its group letters at its density, and the drop against dense
    (paired by seed, points) per case and seed set."""
    headers, rows = ["case"], []
    for label, _ in runs:
        headers += [f"top-1, {label}", "group", f"dense minus case, {label}"]
    letters = [letters_of(r) for r in ranked]
    for method, density in _cases(runs[0][1]):
        case = f"{method}@{density:g}"
        cells = [case]
        for (_, frame), own in zip(runs, letters):
            row = _row(frame, method, density)
            n = "" if row is None else f" (n={int(row['seeds'])})"
            drop = "—" if method == "dense" else _cell(row, "top1_drop", signed=True)
            cells += [_cell(row, "top1") + n, own.get(case, "—"), drop]
        rows.append(cells)
    return _markdown(headers, rows, ["left"] + ["right", "left", "right"] * len(runs))


def pairs_table(runs: list[tuple[str, pd.DataFrame]], ranked: list[dict[float, pd.DataFrame]], density: float = RANKED_DENSITY) -> str:
    """Every pair at `density` (and dense): the higher mean minus the lower, paired by seed, with its
    95% interval and Holm-adjusted p, per seed set, and whether each separates it."""
    headers = ["pair (by the first set's means)"]
    for label, _ in runs:
        headers += [f"difference, points, {label}", "Holm p"]
    headers.append("separated by")
    first = ranked[0][density].attrs["pairs"]
    rows = []
    for _, pair in first.iterrows():
        cells, by = [f"{pair['higher']} - {pair['lower']}"], []
        for (label, _), own in zip(runs, ranked):
            table = own[density].attrs["pairs"]
            match = table[(table["higher"] == pair["higher"]) & (table["lower"] == pair["lower"])]
            sign = 1.0
            if match.empty:  # the other set ordered the two the other way
                match, sign = table[(table["higher"] == pair["lower"]) & (table["lower"] == pair["higher"])], -1.0
            row = match.iloc[0]
            low, high = sorted((sign * row["ci_low"], sign * row["ci_high"]))
            cells += [f"{_pct(sign * row['difference'])} [{_pct(low)}, {_pct(high)}]", f"{row['p_holm']:.3f}"]
            if row["separated"]:
                by.append(label.removeprefix("seeds "))
        cells.append(" and ".join(by) if by else "neither")
        rows.append(cells)
    return _markdown(headers, rows, ["left"] + ["right"] * (len(headers) - 2) + ["left"])


def steps_vs_rigl(run_dir: Path) -> dict[str, str]:
    """Each case's steps to target minus RigL's at its density (dense: at 0.1), paired by seed,
    with its 95% interval: '+52 [-34, +137]'."""
    import dstbench

    from dstbench.results.ranking import paired_test

    per_seed = dstbench.load_run(run_dir).frame(per_seed=True)
    steps = {case: dict(zip(rows["seed"], rows["steps_to_target"].astype(float))) for case, rows in per_seed.groupby("case_id")}
    out = {}
    for case, own in steps.items():
        method, density = case.split("@")
        rigl = steps.get(f"rigl@{float(density) if method != 'dense' else RANKED_DENSITY:g}")
        if rigl is None or method == "rigl":
            continue
        test = paired_test(own, rigl)
        out[case] = f"{test['difference']:+.0f} [{test['ci_low']:+.0f}, {test['ci_high']:+.0f}]"
    return out


def target_table(runs: list[tuple[str, pd.DataFrame]], run_dirs: list[Path]) -> str:
    """Steps and seconds to the suite's target and the speedups to it, per case and seed set."""
    headers = ["case", "seeds", "reached", "steps to target", "minus rigl's, paired [95% CI]", "seconds to target [95% CI]",
               "speedup to target vs rigl", "vs dense"]
    rows = []
    for (label, frame), run_dir in zip(runs, run_dirs):
        against = steps_vs_rigl(run_dir)
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
                against.get(f"{method}@{density:g}", "—"),
                _seconds(row),
                "—" if method == "rigl" else _cell(row, "time_to_target_speedup", scale=1.0, digits=2, unit="x"),
                "—" if method == "dense" else _cell(row, "time_to_target_speedup_vs_dense", scale=1.0, digits=2, unit="x"),
            ])
    return _markdown(headers, rows, ["left", "left"] + ["right"] * (len(headers) - 2))


SPEEDUPS = (("time_to_target_speedup", "vs rigl"), ("time_to_target_speedup_vs_dense", "vs dense"))


def _ratio(row: pd.Series | None, column: str) -> tuple[float, float, float]:
    if row is None:
        return (math.nan, math.nan, math.nan)
    return tuple(float(row.get(f"{column}{part}", math.nan)) for part in ("", "_ci_low", "_ci_high"))  # type: ignore[return-value]


def agreement_table(runs: list[tuple[str, pd.DataFrame]]) -> tuple[str, list[str]]:
    """Per case, each seed set's speedup to target (vs rigl, vs dense) with its interval and the z of
    the two (`dstbench.results.agreement`); and per comparison, the chi-square test over the cases."""
    from dstbench.results.agreement import agreement, log_z

    (first_label, first), (second_label, second) = runs[:2]
    headers, rows, zs = ["case"], [], {column: [] for column, _ in SPEEDUPS}
    for column, name in SPEEDUPS:
        headers += [f"{name}, {first_label}", f"{name}, {second_label}", "z"]
    for method, density in _cases(first):
        cells = [f"{method}@{density:g}"]
        for column, _ in SPEEDUPS:
            a, b = _ratio(_row(first, method, density), column), _ratio(_row(second, method, density), column)
            z = log_z(a, b) if a[0] != 1.0 else math.nan  # the reference against itself: no comparison
            zs[column].append(z)
            shown = [_cell(row, column, scale=1.0, digits=2, unit="x") if math.isfinite(v[0]) and v[0] != 1.0 else "—"
                     for row, v in ((_row(first, method, density), a), (_row(second, method, density), b))]
            cells += shown + ["—" if not math.isfinite(z) else f"{z:+.2f}"]
        rows.append(cells)
    verdicts = [f"- Speedup to target {name}: {agreement(zs[column]).text()}." for column, name in SPEEDUPS]
    return _markdown(headers, rows, ["left"] + ["right"] * (len(headers) - 1)), verdicts


def ranked_text(ranking: pd.DataFrame) -> str:
    """'dense (a) > small_dense (b) > ...': methods by mean top-1 with their letters."""
    return " > ".join(f"{case.split('@')[0]} ({letters})" for case, letters in zip(ranking["case_id"], ranking["letters"]))


def dense_leads(frame: pd.DataFrame, density: float = RANKED_DENSITY) -> tuple[list[str], list[str]]:
    """(methods at `density` that dense leads beyond the paired drop's 95% interval, the others)."""
    at = frame[((frame["density"] - density).abs() < 1e-9)]
    beyond = [r["method"] for _, r in at.iterrows() if float(r["top1_drop_ci_low"]) > 0]
    return beyond, [m for m in at["method"] if m not in beyond]


def separated_pairs_of(ranking: pd.DataFrame) -> set[tuple[str, str]]:
    """The (higher, lower) case pairs one seed set separates (`dstbench.results.ranking`)."""
    from dstbench.results.ranking import separated_pairs

    return separated_pairs(ranking)


def repeated(ranked: list[pd.DataFrame]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(pairs every seed set separates in the same direction, the pairs it does not), by method,
    higher first, in the first set's order."""
    method = lambda case: case.split("@")[0]  # noqa: E731
    separated = [{(method(a), method(b)) for a, b in separated_pairs_of(r)} for r in ranked]
    pairs = [(method(a), method(b)) for a, b in zip(ranked[0].attrs["pairs"]["higher"], ranked[0].attrs["pairs"]["lower"])]
    both = [p for p in pairs if all(p in s for s in separated)]
    return both, [p for p in pairs if p not in both]


def findings(runs: list[tuple[str, pd.DataFrame]], ranked: list[dict[float, pd.DataFrame]]) -> str:
    lines = []
    for (label, frame), own in zip(runs, ranked):
        beyond, within = dense_leads(frame)
        lead = ("dense leads every sparse method beyond the 95% interval of its drop paired by seed" if not within else
                f"dense leads {', '.join(beyond) or 'none'} beyond the interval, not {', '.join(within)}")
        lines.append(f"- {label}: at density {RANKED_DENSITY:g}, by mean top-1 with its groups: "
                     f"{ranked_text(own[RANKED_DENSITY])}; {lead}.")
    if len(ranked) == 2:
        both, rest = repeated([own[RANKED_DENSITY] for own in ranked])
        text = "; ".join(f"{a} > {b}" for a, b in both) or "none"
        lines.append(
            f"- What both seed sets separate at density {RANKED_DENSITY:g} (paired t-test, Holm over the "
            f"{len(both) + len(rest)} pairs, alpha 0.05, the same direction in each): {text}. The other "
            f"{len(rest)} pairs are not separated by at least one set, whatever their order of means."
        )
    return "\n".join(lines)


def sweep_tables(runs: list[tuple[str, pd.DataFrame]], run_dirs: list[Path]) -> str:
    """Each seed set's time to target across targets (the report's table, `dstbench.report.target_sweep`)."""
    import dstbench
    from dstbench.report.target_sweep import target_sweep_table

    parts = []
    for (label, _), run_dir in zip(runs, run_dirs):
        table = target_sweep_table(dstbench.load_run(run_dir).folder().frame())
        if table is not None:
            parts.append(f"{label}: {table.note}\n\n" + _markdown(table.headers, table.rows, table.column_align()))
    return "\n\n".join(parts)


def generated(run_dirs: list[Path]) -> str:
    runs = [load(run) for run in run_dirs]
    ranked = [rankings(run) for run in run_dirs]

    def shown(run: Path) -> str:
        return str(run.relative_to(HERE)) if run.is_relative_to(HERE) else str(run)

    listing = "\n".join(f"- `{shown(run)}` ({label})" for run, (label, _) in zip(run_dirs, runs))
    parts = [
        BEGIN,
        f"From:\n\n{listing}",
        "### What the two seed sets say\n\n" + findings(runs, ranked),
        "### Top-1 on the 4,096 test inputs, % (mean [95% CI] over seeds); dense minus the case, points, paired by seed\n\n"
        "Group: two cases at one density (dense with each) share a letter exactly when their top-1 difference paired by "
        "seed is not significant (paired t-test, Holm over every pair at that density, alpha 0.05).\n\n"
        + accuracy_table(runs, ranked),
        f"### Every pair at density {RANKED_DENSITY:g}: the difference of top-1 paired by seed [95% CI]\n\n"
        + pairs_table(runs, ranked),
        "### Time to the target top-1 (the suite's 0.5)\n\n"
        "Steps: the mean over seeds of the first step at which top-1 reached the target (linear between "
        "evaluations); seconds: those steps at the step time without updates plus the updates made by "
        "then at their measured cost, with a 95% interval over seeds and timing; a seed that failed or "
        "missed the target makes the case a miss. The timed segments are the first seed's (`mode: both` "
        "times one seed unless `timing.per_seed`), each density's cases with dense in interleaved rounds "
        "over 2 sets of fresh processes, apart from training; a speedup prices the other case's steps at "
        "the two cases' paired step-time ratio, its seeds paired. Steps minus RigL's: paired by seed at "
        "the case's density (dense against RigL at 0.1), evaluations 128 steps apart.\n\n" + target_table(runs, run_dirs),
        "### Time to target across targets\n\n"
        "The same curves timed to lower targets (no retraining): per case its mean time to each over its seeds with "
        "its rank there (#1 fastest; a case any seed of which missed shares the last rank, with the share of its seeds "
        "that reached), and its speedup to it against rigl at its density, seeds paired.\n\n" + sweep_tables(runs, run_dirs),
    ]
    if len(runs) >= 2:
        table, verdicts = agreement_table(runs)
        parts.append(
            "### Do the two seed sets agree on the speedups to target?\n\n"
            "The same suite on disjoint seeds, each run timing its own cases: where the intervals are right, "
            "z = (log s1 - log s2) / sqrt(se1^2 + se2^2), se read from each 95% interval on the log scale, is "
            "about standard normal, and the sum of z^2 over the cases follows a chi-square with as many degrees "
            "of freedom (`dstbench.results.agreement`; the intervals hold where its p > 0.05 over at least 8 "
            "cases). The speedups vs rigl and vs dense share each case's own time, so they are two tests, "
            "not independent ones.\n\n" + "\n".join(verdicts) + "\n\n" + table
        )
    return "\n\n".join(parts + [END])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="*", type=Path)
    parser.add_argument("--readme", type=Path, default=HERE / "README.md")
    args = parser.parse_args(argv)
    return make_readme(args.run_dirs, HERE, args.readme, generated, "CPU ranking workload")


if __name__ == "__main__":
    raise SystemExit(main())
