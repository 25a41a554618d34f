"""The committed ranking workload's README is what its script makes from the committed run folders,
and the README's statements about the ranking are the data's."""

from __future__ import annotations

import importlib.util
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
        assert len(frame) == 11 and set(frame["seeds"]) == {3}


def test_the_ranking_rules_on_a_constructed_frame() -> None:
    import pandas as pd

    script = _script()
    frame = pd.DataFrame({
        "method": ["dense", "rigl", "static", "rigl"], "density": [1.0, 0.1, 0.1, 0.5],
        "top1": [0.66, 0.58, 0.60, 0.65], "top1_drop_ci_low": [float("nan"), 0.05, -0.01, 0.0],
    })
    assert script.ranking(frame) == ["dense", "static", "rigl"]
    assert script.dense_leads(frame) == (["rigl"], ["static"])
    text = script.findings([("seeds 0, 1, 2", frame), ("seeds 3, 4, 5", frame.assign(top1=[0.66, 0.61, 0.60, 0.65]))])
    assert "dense leads rigl beyond the interval, not static" in text
    assert "is not the same on the two disjoint seed sets (positions differ for static, rigl)" in text


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

    order = [script.ranking(f.reset_index()) for f in frames]
    assert order[0] == order[1]
    ranked = " > ".join(order[0])
    assert ranked in texts["workload"] and ranked in texts["readme"]
    for f in frames:
        assert script.dense_leads(f.reset_index())[1] == []  # dense beyond every interval at 0.1

    def pct(f, case: str, column: str = "top1") -> str:  # type: ignore[no-untyped-def]
        return f"{f.loc[case, column] * 100:.1f}"

    drops = [f"{pct(f, 'rigl@0.1', 'top1_drop')} [{pct(f, 'rigl@0.1', 'top1_drop_ci_low')}, {pct(f, 'rigl@0.1', 'top1_drop_ci_high')}]"
             for f in frames]
    assert f"{drops[0]} and {drops[1]} points" in texts["readme"] and f"{drops[0]} and {drops[1]} points" in texts["workload"]
    gaps = [f"{float(pct(f, 'rigl@0.1')) - float(pct(f, 'barter@0.1')):.1f}" for f in frames]
    assert f"{gaps[0]} and {gaps[1]} points below" in texts["readme"]
    assert f"ends {gaps[0]} and {gaps[1]} points below RigL ({pct(frames[0], 'barter@0.1')} vs {pct(frames[0], 'rigl@0.1')}, " \
           f"{pct(frames[1], 'barter@0.1')} vs {pct(frames[1], 'rigl@0.1')})" in texts["workload"]
    for case in ("dense@1", "small_dense@0.1", "rigl@0.1", "set@0.1", "barter@0.1", "static@0.1"):
        cells = [f"{pct(f, case)} [{pct(f, case, 'top1_ci_low')}, {pct(f, case, 'top1_ci_high')}]" for f in frames]
        assert f"| {cells[0]} | {cells[1]} |" in texts["results"], case

    steps_ms = [[f"{f.loc[c, 'step_ms_without_updates']:.1f}" for c in ("barter@0.1", "rigl@0.1")] for f in frames]
    assert f"{steps_ms[0][0]} and {steps_ms[1][0]} ms against RigL's {steps_ms[0][1]} and {steps_ms[1][1]} ms" in texts["workload"]
    masked = [f.loc[[f"{m}@{d}" for m in ("rigl", "set", "static") for d in ("0.5", "0.1")], "step_ms_without_updates"] for f in frames]
    assert f"{masked[0].min():.1f} to {masked[0].max():.1f} ms per step in the first run and {masked[1].min():.1f} to " \
           f"{masked[1].max():.1f} ms in the second" in texts["workload"]
    drift = max(m.max() / m.min() for m in masked)
    assert f"below {drift:.1f}x (the largest ratio between two such step times, {masked[0].max():.1f} / {masked[0].min():.1f})" in texts["workload"]
    assert f"({drift:.1f}x between identical masked steps)" in texts["readme"]

    def speedup(f, case: str) -> str:  # type: ignore[no-untyped-def]
        c = "time_to_target_speedup"
        return f"{f.loc[case, c]:.2f}x [{f.loc[case, c + '_ci_low']:.2f}, {f.loc[case, c + '_ci_high']:.2f}]"

    for case in ("small_dense@0.1", "barter@0.1"):
        assert f"{speedup(frames[0], case)} and {speedup(frames[1], case)}" in texts["workload"], case
    small = [f"{f.loc['small_dense@0.1', 'time_to_target_speedup']:.2f}x" for f in frames]
    assert f"small_dense's {small[0]} and {small[1]} vs RigL" in texts["readme"]
    static = [f"{f.loc['static@0.1', 'time_to_target_s']:.1f} s [{f.loc['static@0.1', 'time_to_target_ci_low']:.1f}, "
              f"{f.loc['static@0.1', 'time_to_target_ci_high']:.1f}]" for f in frames]
    assert f"took {static[0]} to the target in one run and {static[1]} in the other" in texts["workload"]
