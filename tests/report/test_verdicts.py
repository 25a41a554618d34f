"""What a report says about a run's verdicts: its expectations (PASS, FAIL, SKIPPED) and whether all
the cases it was asked for are there ("2 of 3 cases"), on the page, in Markdown and in a site."""

from __future__ import annotations

from pathlib import Path

import pytest

from dstbench.results.coverage import record_cases, run_coverage
from dstbench.suite.cases import Case
from dstbench.results.derive import derive, load_frame
from dstbench.report.html import build_page, render_html, render_markdown
from dstbench.report.publish import publish
from tests.report.conftest import synthetic_lines, write_run

SUITE = {"name": "synthetic", "reference": "rigl", "densities": [0.5, 0.1],
         "methods": ["dense", "rigl", "barter"],
         "expect": [{"metric": "speedup", "method": "barter", "vs": "rigl", "min": 1.3},
                    {"metric": "density_achieved", "method": "*", "tolerance": 0.01}]}
PLANNED = [Case("dense", "dense", "dense", 1.0)] + [Case(m, m, k, d) for d in (0.5, 0.1) for m, k in (("rigl", "masked"), ("barter", "compact"))]


def _run(tmp_path: Path, name: str, drop: set[str], selected: list[str]) -> Path:
    lines = [line for line in synthetic_lines() if line.status == "ok" and line.case_id not in drop]
    run = write_run(tmp_path, name, lines, suite=SUITE)
    record_cases(run, PLANNED, selected)
    return run


@pytest.mark.slow
def test_an_incomplete_run_is_flagged_everywhere(tmp_path: Path) -> None:
    every = [p.case_id for p in PLANNED]
    run = _run(tmp_path, "stopped", {"barter@0.1", "rigl@0.1"}, every)
    coverage = run_coverage(run)
    assert coverage is not None and coverage.missing == ["rigl@0.1", "barter@0.1"]
    assert coverage.summary() == "3 of 5 cases (2 not run: rigl@0.1, barter@0.1)"

    page = build_page(derive(load_frame([run]), "rigl"), [run], images=False)
    assert page.incomplete
    html = render_html(page)
    assert "<strong>incomplete run</strong>: 3 of 5 cases (2 not run: rigl@0.1, barter@0.1)" in html
    assert "**Incomplete run**: 3 of 5 cases (2 not run: rigl@0.1, barter@0.1)" in render_markdown(page)

    index = publish([run], tmp_path / "site").read_text(encoding="utf-8")
    assert "<strong>incomplete</strong>: 3 of 5 cases" in index


def test_expectations_reach_the_page_with_their_verdicts(tmp_path: Path) -> None:
    # --density 0.5: the 0.1 cases were never asked for.
    run = _run(tmp_path, "half", {"barter@0.1", "rigl@0.1"}, ["dense@1", "rigl@0.5", "barter@0.5"])
    page = build_page(derive(load_frame([run]), "rigl"), [run], images=False)
    assert not page.incomplete
    assert page.expectations == {"PASS": 4, "FAIL": 0, "SKIPPED": 3}
    [section] = [s for s in page.sections if s.key == "expectations"]
    rows = {(r[0], r[1], r[2]): r for r in section.table.rows}
    # barter@0.5 against rigl@0.5: 110 / 80 ms.
    assert rows[("PASS", "speedup", "barter@0.5")][3:6] == ["rigl", "1.375", ">= 1.3"]
    assert ("SKIPPED", "speedup", "barter@0.1") in rows
    # One gate's passing cases share a row, with the range of their values; so do its skipped ones.
    assert rows[("PASS", "density_achieved", "3 cases: dense@1, rigl@0.5, barter@0.5")][5] != ""
    assert ("SKIPPED", "density_achieved", "2 cases: rigl@0.1, barter@0.1") in rows
    assert len(section.table.rows) == 4 and section.table.row_classes.count("skipped") == 2
    markdown = render_markdown(page)
    assert "**Expectations:** 4 of 4 passed, 3 skipped" in markdown and "## Expectations" in markdown
    assert "Selection: 3 of 3 cases; 2 more in the suite, not selected" in markdown
    html = render_html(page)
    assert '<a href="#expectations">none failed, 3 skipped</a>' in html
