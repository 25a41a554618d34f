"""The committed ranking workload's README is what its script makes from the committed run folders,
and the README's statements about the ranking are the data's."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from dstbench.report.generated_readme import run_folders

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "reports" / "cpu_accuracy"


def _script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_cpu_accuracy_readme", WORKLOAD / "make_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _runs() -> list[Path]:
    return run_folders([], WORKLOAD / "runs")


@pytest.mark.skipif(not (WORKLOAD / "runs").is_dir(), reason="no committed runs of suites/cpu_accuracy.yaml")
def test_generated_tables_match_the_committed_runs() -> None:
    script = _script()
    runs = _runs()
    block = script.generated(runs)
    readme = (WORKLOAD / "README.md").read_text(encoding="utf-8")
    committed = readme[readme.index(script.BEGIN) : readme.index(script.END) + len(script.END)]
    assert block == committed  # rerun `python reports/cpu_accuracy/make_readme.py` after new runs
    frames = [script.load(run) for run in runs]
    assert [label for label, _ in frames] == ["seeds 0, 1, 2", "seeds 3, 4, 5"]
    for _, frame in frames:  # every case over three seeds
        assert len(frame) == 12 and set(frame["seeds"]) == {3}


def test_the_ranking_rules_on_constructed_seeds() -> None:
    import pandas as pd

    from dstbench.results.ranking import rank_cases

    script = _script()

    def seeds(top1: dict[str, list[float]]) -> pd.DataFrame:
        return pd.DataFrame([{"case_id": case, "method": case.split("@")[0], "kind": "dense" if case.startswith("dense") else "masked",
                              "density": float(case.split("@")[1]), "seed": i, "status": "ok", "top1": v}
                             for case, values in top1.items() for i, v in enumerate(values)])

    # dense far ahead of both at every seed; rigl and static within a point of each other.
    first = rank_cases(seeds({"dense@1": [0.70, 0.74, 0.72], "rigl@0.1": [0.60, 0.645, 0.61], "static@0.1": [0.605, 0.64, 0.62]}), 0.1)
    second = rank_cases(seeds({"dense@1": [0.70, 0.74, 0.72], "rigl@0.1": [0.50, 0.64, 0.62], "static@0.1": [0.60, 0.64, 0.62]}), 0.1)
    assert script.ranked_text(first) == "dense (a) > static (b) > rigl (b)"
    both, rest = script.repeated([first, second])
    assert both == [("dense", "static")] and set(rest) == {("dense", "rigl"), ("static", "rigl")}  # rigl's spread in the second
    frame = pd.DataFrame({"method": ["dense", "rigl", "static"], "density": [1.0, 0.1, 0.1], "top1_drop_ci_low": [float("nan"), 0.05, -0.01]})
    assert script.dense_leads(frame) == (["rigl"], ["static"])


def _flat(path: Path) -> str:
    import re

    return re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))


@pytest.mark.skipif(not (WORKLOAD / "runs").is_dir(), reason="no committed runs of suites/cpu_accuracy.yaml")
def test_the_figures_the_readmes_quote_are_the_committed_runs() -> None:
    import dstbench

    script = _script()
    runs = _runs()
    frames = [dstbench.load_run(run).frame(all_columns=True).set_index("case_id") for run in runs]
    texts = {name: _flat(path) for name, path in {
        "workload": WORKLOAD / "README.md", "readme": ROOT / "README.md", "results": ROOT / "docs" / "results.md"}.items()}

    at = [f[(f["density"] == 0.1) | (f["density"] >= 1.0)].sort_values("top1", ascending=False)["method"].tolist() for f in frames]
    assert at[0][:5] == at[1][:5] and set(at[0][5:]) == set(at[1][5:]) == {"static", "barter"}  # the two last swap
    means = " > ".join(at[0][:5])
    assert f"order of mean top-1 is {means}, then static and barter" in texts["workload"]
    assert f"({means}, then static and barter" in texts["readme"]
    for f in frames:
        assert script.dense_leads(f.reset_index())[1] == []  # dense beyond every interval at 0.1
    # What both seed sets separate, quoted from the rankings themselves.
    ranked = [script.rankings(run)[0.1] for run in runs]
    both, rest = script.repeated(ranked)
    separated = ", ".join(f"{a} > {b}" for a, b in both[:-1]) + f" and {both[-1][0]} > {both[-1][1]}"
    assert f"both seed sets separate only {separated}" in texts["workload"] and f"both separate only {separated}" in texts["readme"]
    assert f"both seed sets separate only {separated}" in texts["results"]

    def paired(index: int, higher: str, lower: str) -> str:
        pairs = ranked[index].attrs["pairs"].set_index(["higher", "lower"])
        row = pairs.loc[(higher, lower)]
        return f"{row['difference'] * 100:+.1f} [{row['ci_low'] * 100:+.1f}, {row['ci_high'] * 100:+.1f}]"

    for higher, lower in (("rigl@0.1", "set@0.1"), ("set@0.1", "barter@0.1"), ("rigl@0.1", "barter@0.1"),
                          ("small_dense@0.1", "rigl@0.1"), ("barter_new@0.1", "barter@0.1")):
        assert f"{paired(0, higher, lower)} and {paired(1, higher, lower)}" in texts["workload"], (higher, lower)
    assert ("rigl@0.1", "barter@0.1") in script.separated_pairs_of(ranked[0]) and ("rigl@0.1", "barter@0.1") not in script.separated_pairs_of(ranked[1])
    steps = [script.steps_vs_rigl(run)["barter@0.1"] for run in runs]
    assert f"{steps[0]} and {steps[1]} steps paired" in texts["workload"]

    def pct(f, case: str, column: str = "top1") -> str:  # type: ignore[no-untyped-def]
        return f"{f.loc[case, column] * 100:.1f}"

    drops = [f"{pct(f, 'rigl@0.1', 'top1_drop')} [{pct(f, 'rigl@0.1', 'top1_drop_ci_low')}, {pct(f, 'rigl@0.1', 'top1_drop_ci_high')}]"
             for f in frames]
    assert f"{drops[0]} and {drops[1]} points" in texts["readme"] and f"{drops[0]} and {drops[1]} points" in texts["workload"]
    gaps = [f"{float(pct(f, 'rigl@0.1')) - float(pct(f, 'barter@0.1')):.1f}" for f in frames]
    assert f"{gaps[0]} and {gaps[1]} points below" in texts["readme"]
    assert f"ends {gaps[0]} and {gaps[1]} points below RigL ({pct(frames[0], 'barter@0.1')} vs {pct(frames[0], 'rigl@0.1')}, " \
           f"{pct(frames[1], 'barter@0.1')} vs {pct(frames[1], 'rigl@0.1')})" in texts["workload"]
    for case in ("dense@1", "small_dense@0.1", "rigl@0.1", "set@0.1", "barter_new@0.1", "barter@0.1", "static@0.1"):
        cells = [f"{pct(f, case)} [{pct(f, case, 'top1_ci_low')}, {pct(f, case, 'top1_ci_high')}]" for f in frames]
        assert f"| {cells[0]} | {cells[1]} |" in texts["results"], case

    steps_ms = [[f"{f.loc[c, 'step_ms_without_updates']:.1f}" for c in ("barter@0.1", "rigl@0.1")] for f in frames]
    assert f"{steps_ms[0][0]} and {steps_ms[1][0]} ms against RigL's {steps_ms[0][1]} and {steps_ms[1][1]} ms" in texts["workload"]
    masked = [[f.loc[[f"{m}@{d}" for m in ("rigl", "set", "static")], "step_ms_without_updates"] for d in ("0.5", "0.1")] for f in frames]
    ranges = [[f"{m.min():.1f} to {m.max():.1f} ms" for m in run] for run in masked]
    assert f"{ranges[0][0].removesuffix(' ms')} ms at 0.5 and {ranges[0][1]} at 0.1 in the first, " \
           f"{ranges[1][0]} and {ranges[1][1]} in the second" in texts["workload"]
    spreads = [max(m.max() / m.min() for m in run) for run in masked]
    assert f"within {math.ceil((spreads[0] - 1) * 100)}% in the first run and {math.ceil((spreads[1] - 1) * 100)}% in the" in texts["workload"]

    def speedup(f, case: str) -> str:  # type: ignore[no-untyped-def]
        c = "time_to_target_speedup"
        return f"{f.loc[case, c]:.2f}x [{f.loc[case, c + '_ci_low']:.2f}, {f.loc[case, c + '_ci_high']:.2f}]"

    for case in ("small_dense@0.1", "barter@0.1", "barter_new@0.1"):
        assert f"{speedup(frames[0], case)} and {speedup(frames[1], case)}" in texts["workload"], case
    small = [f"{f.loc['small_dense@0.1', 'time_to_target_speedup']:.2f}x" for f in frames]
    assert f"small_dense {small[0]} and {small[1]} vs RigL" in texts["readme"]
    # The agreement the README quotes is the generated table's.
    from dstbench.results.agreement import agreement, log_z

    for column, quoted in (("time_to_target_speedup", "vs RigL"), ("time_to_target_speedup_vs_dense", "vs dense")):
        zs = [log_z(*(tuple(f.loc[case, [column, column + "_ci_low", column + "_ci_high"]]) for f in frames))
              for case in frames[0].index if frames[0].loc[case, column] != 1.0]
        result = agreement(zs)
        assert result.holds() is True and f"{result.chi2:.1f} on {result.cases}" in texts["workload"], quoted
