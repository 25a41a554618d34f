"""The power study's figures (reports/studies/power/study.json, its README's generated table and
the figures the README, docs/results.md and the CI-gates guide quote) are what the study script
computes from the committed runs with today's `compare`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.scripts.study_scripts import ROOT, flat, load_study_script

STUDY = ROOT / "reports" / "studies" / "power"


@pytest.fixture(scope="module")
def script() -> Any:
    return load_study_script("power")


@pytest.fixture(scope="module")
def study(script: Any) -> dict[str, Any]:
    return script.study_figures(STUDY / "runs")


@pytest.mark.slow
def test_the_committed_study_is_the_runs(script: Any, study: dict[str, Any]) -> None:
    assert study == json.loads((STUDY / "study.json").read_text())
    assert study["trials"] == 50 and all(study["table"][c][s]["trials"] == 10 for c in study["table"] for s in study["table"][c])
    assert script.readme(study) in (STUDY / "README.md").read_text()


@pytest.mark.slow
def test_the_quoted_figures_are_the_study(study: dict[str, Any]) -> None:
    ratios, table = study["set_over_dense"], study["table"]
    readme, results, guide = flat(STUDY / "README.md"), flat(ROOT / "docs" / "results.md"), flat(ROOT / "docs" / "guides" / "ci-gates.md")
    own, added = ratios["baselines_own_sets"], ratios["baselines_added_sets"]
    assert own["median"] == ratios["aa_runs_sets"]["median"]
    assert (f"{own['median']:.3f} in the baselines' own {own['sets']} sets and in the A/A runs' {ratios['aa_runs_sets']['sets']} "
            f"sets, but {added['median']:.3f} in the {added['sets']} sets added") in readme
    for text in (results, guide):
        assert f"{added['median']:.3f}" in text and f"{own['median']:.3f}" in text
    aa = table["aa"]
    assert (aa["plain"]["regression"], aa["decide_1x"]["regression"], aa["decide_3x"]["regression"]) == (1, 2, 3)
    assert "A/A pairs were called a regression in 1 of 10 trials by `compare` and 2 of 10 with `--decide` (3 of 10 at 3x" in results
    assert "2 of 10 A/A pairs were called a regression (3 of 10 at 3x the budget)" in guide
    assert sorted({table["plus5"][s]["regression"] for s in ("plain", "decide_1x", "decide_3x")}) == [2, 3]
    assert table["plus15"]["decide_1x"]["regression"] == 10 and table["aa"]["plain"]["inconclusive"] == 8
    assert table["plus15"]["plain"]["inconclusive"] == 7
