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
    return script.study_figures(STUDY / "runs", STUDY / "runs-band5")


@pytest.mark.slow
def test_the_committed_study_is_the_runs(script: Any, study: dict[str, Any]) -> None:
    assert study == json.loads((STUDY / "study.json").read_text())
    assert study["trials"] == 50 and all(study["table"][c][s]["trials"] == 10 for c in study["table"] for s in study["table"][c])
    narrow = study["narrow"]
    assert narrow["threshold"] == 5.0 and narrow["trials"] == 30 and set(narrow["table"]) == {"aa", "plus5", "plus15"}
    assert script.readme(study) in (STUDY / "README.md").read_text()


def count(figures: dict[str, Any], verdict: str = "regression") -> str:
    return f"{figures[verdict]} of {figures['trials']}"


@pytest.mark.slow
def test_the_quoted_figures_are_the_study(study: dict[str, Any]) -> None:
    table, narrow, sessions = study["table"], study["narrow"]["table"], study["sessions"]
    readme, results, guide = flat(STUDY / "README.md"), flat(ROOT / "docs" / "results.md"), flat(ROOT / "docs" / "guides" / "ci-gates.md")
    interleaving = flat(ROOT / "docs" / "concepts" / "interleaving.md")
    states = ("plain", "decide_1x", "decide_3x")
    # No false alarm at the default band: A/A and +5%, in every state.
    assert all(table[c][s]["regression"] == 0 for c in ("aa", "plus5") for s in states)
    assert all(narrow[c][s]["regression"] == 0 for c in ("aa", "plus5") for s in states)
    assert "No A/A pair and no +5% slowdown (inside the 10% band) was called a regression, in any state: 0 of 10 [0.00, 0.31]" in readme
    p15, p25 = table["plus15"], table["plus25"]
    assert (f"A +15% slowdown was called a regression in {count(p15['decide_1x'])} trials with `--decide` at the default "
            f"budget ({count(p15['decide_3x'])} at 3x; {count(p15['plain'])} by `compare` alone), +25% in "
            f"{count(p25['decide_1x']).replace(' of 10', '')} of 10 ({count(p25['decide_3x'])} at 3x; {count(p25['plain'])} alone)") in readme
    assert (f"+15% was called a regression in {count(p15['decide_1x'])} trials with `--decide` ({count(p15['plain'])} without), "
            f"+25% in {count(p25['decide_1x'])} ({count(p25['decide_3x'])} at 3x the budget, {count(p25['plain'])} without)") in results
    assert (f"a +15% slowdown was called one in {count(p15['decide_1x'])} trials with `--decide` at the default budget "
            f"(the power at 15%), +25% in {count(p25['decide_1x'])}") in guide
    n15 = narrow["plus15"]
    assert (f"a +15% slowdown was called a regression in {count(n15['plain'])} trials by `compare` alone, "
            f"{count(n15['decide_1x'])} [{n15['decide_1x']['regression_ci95'][0]:.2f}, {n15['decide_1x']['regression_ci95'][1]:.2f}] "
            f"with `--decide` at the default budget and {count(n15['decide_3x'])} [{n15['decide_3x']['regression_ci95'][0]:.2f}, "
            f"{n15['decide_3x']['regression_ci95'][1]:.2f}] at 3x") in readme
    assert (f"+15% was called a regression in {count(n15['plain'])} trials alone, {count(n15['decide_1x'])} with `--decide` "
            f"and {count(n15['decide_3x'])} at 3x its budget") in results
    assert f"+15% was called a regression in {count(n15['decide_1x'])} trials at the default budget and {count(n15['decide_3x'])} at 3x" in guide
    assert max(f["decide_3x"]["regression"] for f in (n15, p15)) < 9  # "no budget measured reaches 90%"
    # Where the spread between sessions shows.
    runs = sessions["runs"]
    low, high = sorted([runs["rigl"]["sd_run"], runs["set"]["sd_run"]])
    span = f"{low:.3f}-{high:.3f}"
    for text in (readme, results, guide, interleaving):
        assert span in text
    assert f"added over own {sessions['added_right_after']['rigl']['ratio']:.3f}" in readme
    seen = sorted(g["sd"] for g in sessions["gate"])
    assert f"sd {seen[-2]:.3f} and {seen[-1]:.3f} for two baselines, 0 for the other two" in readme and seen[:2] == [0.0, 0.0]
