"""The hand-over study's figures (reports/studies/hand_over/study.json, quoted by its README and
docs/concepts/interleaving.md) are what the study script computes from the committed runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.scripts.study_scripts import ROOT, flat, load_study_script

STUDY = ROOT / "reports" / "studies" / "hand_over"


@pytest.fixture(scope="module")
def study() -> dict[str, Any]:
    return load_study_script("hand_over").study_figures(STUDY / "runs")


def test_the_committed_study_json_is_the_runs(study: dict[str, Any]) -> None:
    assert study == json.loads((STUDY / "study.json").read_text())
    assert {study[c]["runs"] for c in ("alone", "immediate", "parked")} == {5}


def test_the_quoted_figures_are_the_study(study: dict[str, Any]) -> None:
    readme, guide = flat(STUDY / "README.md"), flat(ROOT / "docs" / "concepts" / "interleaving.md")
    p90 = {(c, case): sorted(study[c]["cases"][case]["wait_p90"])[2] for c in ("alone", "immediate", "parked")
           for case in ("dense@1", "rigl@0.5")}
    for (condition, case), value in p90.items():
        row = f"| {condition} | {case} | {value:.4f} |"
        assert row in readme, row
    assert f"| alone | {p90['alone', 'dense@1']:.4f} | {p90['alone', 'rigl@0.5']:.4f} |" in guide
    assert f"| interleaved, `immediate` | {p90['immediate', 'dense@1']:.4f} | {p90['immediate', 'rigl@0.5']:.4f} |" in guide
    assert f"| interleaved, `parked` (default) | {p90['parked', 'dense@1']:.4f} | {p90['parked', 'rigl@0.5']:.4f} |" in guide
    gaps = study["versus_alone"]
    assert gaps["parked dense@1"]["within_goal"] and gaps["parked rigl@0.5"]["within_goal"]
    assert not gaps["immediate dense@1"]["within_goal"]
    quoted = (f"+{gaps['immediate dense@1']['wait_p90_gap']:.3f} (dense) and +{gaps['immediate rigl@0.5']['wait_p90_gap']:.3f} (RigL) "
              f"with the immediate hand-over")
    assert quoted in readme, quoted
    assert f"+{gaps['parked dense@1']['wait_p90_gap']:.3f} and +{gaps['parked rigl@0.5']['wait_p90_gap']:.3f} parked" in readme
    dense = (f"was {p90['immediate', 'dense@1']:.3f} interleaved with RigL against {p90['alone', 'dense@1']:.3f} timed alone, "
             f"and its segments took {gaps['immediate dense@1']['segment_ms_vs_alone']:.2f}x their time alone")
    assert dense in guide, dense
    cost = study["cost"]
    low, high = cost["parked_vs_hot_ci95"]
    assert f"| parked | {cost['parked_ms']:.2f} | {cost['parked_vs_hot']:.3f}x [{low:.3f}, {high:.3f}] |" in readme
    assert f"{cost['parked_vs_hot']:.3f}x [{low:.3f}, {high:.3f}]" in guide
    assert f"({study['hand_over_share_of_wall']:.1%})" in readme and f"{study['hand_over_share_of_wall']:.1%} to the study's wall time" in guide
