"""The report's verdicts: each expectation of each run's suite (`expect:`) with its value, bound and
PASS / FAIL / SKIPPED, and how complete each run is. Read from the run folders' stored suites
without validating them (`results.expectations.run_outcomes`), so a report needs neither the data
nor the plugins the suite named."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from dstbench.results.coverage import Coverage, run_coverage
from dstbench.util.text import DASH
from dstbench.results.expectations import RELATIVE, Outcome, bounds_text, comparison_method, run_outcomes
from dstbench.report.sections import Table, register_table
from dstbench.report.tables import run_label

ROW_CLASS = {"PASS": "", "FAIL": "failed", "SKIPPED": "skipped"}


@dataclasses.dataclass
class RunVerdicts:
    """One run folder's expectation outcomes and coverage."""

    run: str
    reference: str
    outcomes: list[Outcome]
    coverage: Coverage | None


def run_verdicts(derived: pd.DataFrame) -> list[RunVerdicts]:
    """Per run of the report, in report order; runs without a stored suite are left out."""
    if "run" not in derived or derived.empty:
        return []
    found = []
    for run in pd.unique(derived["run"]):
        outcomes = run_outcomes(str(run))
        if outcomes is not None:
            reference, listed = outcomes
            found.append(RunVerdicts(str(run), reference, listed, run_coverage(str(run))))
    return found


def counts(verdicts: list[RunVerdicts]) -> dict[str, int]:
    """How many outcomes PASS, FAIL and are SKIPPED over every run."""
    out = {"PASS": 0, "FAIL": 0, "SKIPPED": 0}
    for run in verdicts:
        for outcome in run.outcomes:
            out[outcome.verdict] += 1
    return out


def _value(outcome: Outcome) -> str:
    return DASH if outcome.value is None else f"{outcome.value:.4g}"


def _cases_text(cases: list[str]) -> str:
    """'rigl@0.1', or '16 cases: a, b, c, d, e, ...'."""
    if len(cases) == 1:
        return cases[0]
    shown = ", ".join(cases[:5]) + (", ..." if len(cases) > 5 else "")
    return f"{len(cases)} cases: {shown}"


def _values_text(outcomes: list[Outcome]) -> str:
    """One value, or the range of several ('0.098 to 0.1')."""
    values = [o.value for o in outcomes if o.value is not None]
    if not values:
        return DASH
    low, high = min(values), max(values)
    return f"{low:.4g}" if f"{low:.4g}" == f"{high:.4g}" else f"{low:.4g} to {high:.4g}"


def collapsed(outcomes: list[Outcome]) -> list[list[Outcome]]:
    """The outcomes as table rows: each failure a row of its own; the passing (and the skipped)
    cases of one expectation together in one row, so 16 identical PASS rows read as one."""
    rows: list[list[Outcome]] = []
    grouped: dict[tuple[int, str], list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.verdict == "FAIL":
            rows.append([outcome])
            continue
        key = (id(outcome.expectation), outcome.verdict)
        if key not in grouped:
            grouped[key] = []
            rows.append(grouped[key])
        grouped[key].append(outcome)
    # Failures first: they are what a reader opens the table for.
    return sorted(rows, key=lambda row: row[0].verdict != "FAIL")


@register_table("expectations", "Expectations", order=5)
def expectations_table(derived: pd.DataFrame) -> Table | None:
    verdicts = run_verdicts(derived)
    rows, classes = [], []
    several = len(verdicts) > 1
    for run in verdicts:
        for group in collapsed(run.outcomes):
            first = group[0]
            exp = first.expectation
            vs = comparison_method(exp, run.reference) if exp.metric in RELATIVE else DASH
            rows.append(
                ([run_label(run.run, [v.run for v in verdicts])] if several else [])
                + [first.verdict, exp.metric, _cases_text([o.case for o in group]), vs, _values_text(group),
                   bounds_text(exp), first.message if len(group) == 1 else ""]
            )
            classes.append(ROW_CLASS[first.verdict])
    if not rows:
        return None
    tally = counts(verdicts)
    return Table(
        (["run"] if several else []) + ["verdict", "metric", "case", "vs", "value", "bound", "detail"],
        rows,
        align=(["left"] if several else []) + ["left", "left", "left", "left", "right", "left", "left"],
        note=(
            f"The suite's expect: gates: {tally['PASS']} passed, {tally['FAIL']} failed, {tally['SKIPPED']} skipped. "
            "Each failure has a row of its own, first; the cases one gate passed (or skipped) share a row, with "
            "the range of their values. SKIPPED: the case, or the one it is compared with, was not selected for "
            "the run (--only, --density); a case that was selected but has no result fails."
        ),
        row_classes=classes,
    )


def coverage_notes(derived: pd.DataFrame) -> list[dict[str, Any]]:
    """For each run whose cases are not all there (or were not all selected): its label, its
    summary ('2 of 3 cases (1 not run: ...)') and whether it is incomplete."""
    notes = []
    if "run" not in derived or derived.empty:
        return notes
    for run in pd.unique(derived["run"]):
        coverage = run_coverage(str(run))
        if coverage is not None and (not coverage.complete or coverage.unselected):
            notes.append({"run": run_label(run, derived["run"].unique()), "summary": coverage.summary(), "incomplete": not coverage.complete})
    return notes
