"""The gate study's A/A and power figures (reports/studies/intervals/study.json, quoted by its README,
docs/results.md and docs/guides/ci-gates.md) are what today's `dstbench compare` says about the
committed runs: recomputed here with the study script's own functions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.scripts.study_scripts import ROOT, flat, load_study_script

RUNS = ROOT / "reports" / "studies" / "intervals" / "runs"
STUDY = json.loads((ROOT / "reports" / "studies" / "intervals" / "study.json").read_text())


@pytest.fixture(scope="module")
def study_script() -> Any:
    return load_study_script("intervals")


@pytest.fixture(scope="module")
def figures(study_script: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    out.update(study_script.gate_figures(RUNS, "after", "planted", ""))
    out.update(study_script.gate_figures(RUNS, "gate", "gate-planted", "gate_"))
    out.update(study_script.gate_figures(RUNS, "gate", "gate-planted", "gate5_", threshold=5.0))
    return out


def test_the_committed_study_json_is_todays_compare(figures: dict[str, Any]) -> None:
    for key in ("aa", "power", "gate_aa", "gate_power", "gate5_aa", "gate5_power"):
        assert figures[key] == STUDY[key], key


def test_the_quoted_figures_are_the_study_json(figures: dict[str, Any]) -> None:
    aa, power = figures["aa"], figures["power"]
    gate_aa, gate_power, gate5_aa, gate5_power = (figures[k] for k in ("gate_aa", "gate_power", "gate5_aa", "gate5_power"))
    assert (aa["pairs"], aa["false"], aa["inconclusive"], aa["gated"], power["caught"]) == (12, 0, 186, 192, 0)
    assert (gate_aa["false"], gate_aa["unchanged"], gate_aa["gated"], gate_power["caught"]) == (0, 24, 48, 0)
    assert all("dense@1" in pair["inconclusive"] for pair in gate_aa["detail"])
    assert (gate5_aa["false"], gate5_aa["unchanged"], gate5_power["caught"], gate5_power["only_planted"]) == (0, 0, 3, 2)
    ci_gates, results, readme = flat("docs/guides/ci-gates.md"), flat("docs/results.md"), flat("reports/studies/intervals/README.md")
    assert "186 of 192 case verdicts inconclusive" in ci_gates and "186 of 192 case verdicts inconclusive" in results
    assert "24 of 48 verdicts unchanged" in ci_gates and "24 of 48 verdicts unchanged" in results
    assert "caught in 0 of 3 trials" in ci_gates and "caught in 3 of 3 trials (Holm-adjusted p 0.00091-0.0096)" in ci_gates
    assert "| power at +-5%: trials in which the planted case read `regression` | 3 of 3 |" in readme
    assert "| power at +-10%: trials in which the planted case read `regression` | 0 of 3 |" in readme
    assert "24 / 24 of 48" in readme and "6 unchanged and 186 inconclusive" in readme


def test_the_planted_cases_figures_are_the_runs(study_script: Any) -> None:
    """The quoted changes and adjusted p-values of set@0.5 in the three gate power trials."""
    from dstbench.gates.compare import compare_runs
    from dstbench.gates.sides import load_side

    quiet, planted = study_script.runs_in(RUNS / "gate"), study_script.runs_in(RUNS / "gate-planted")
    quoted = flat("reports/studies/intervals/README.md")
    for threshold, label in ((10.0, "against 1.10"), (5.0, "against 1.05")):
        ps = []
        for i, run in enumerate(planted):
            comparison = compare_runs(load_side(quiet[i % len(quiet)]), load_side(run), time_threshold=threshold)
            t = next(c.time for c in comparison.cases if c.case == "set@0.5")
            assert f"{t.ratio:.3f}x [{t.ci_low:.3f}, {t.ci_high:.3f}]" in quoted
            ps.append(f"{t.p_value:.2g}")
        assert f"{label}: {', '.join(ps)}" in quoted, (label, ps)
