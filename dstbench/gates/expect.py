"""Suite expectations (`expect:`), checked at the end of `dstbench run` and by `dstbench check`.

    expect:
      - {metric: speedup, method: barter, vs: rigl, density: 0.1, min: 3.0}
      - {metric: density_achieved, method: "*", tolerance: 0.01}
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from pathlib import Path

import numpy as np
import pandas as pd

from dstbench.config import Expectation, SuiteConfig
from dstbench.report.derive import derive, reference_row

DERIVED = {"speedup", "memory_reduction", "state_ratio", "activation_ratio", "topology_share"}
DEFAULT_DENSITY_TOLERANCE = 0.01


@dataclasses.dataclass
class Outcome:
    expectation: Expectation
    case: str
    value: float | None
    passed: bool
    message: str


def _bounds_message(exp: Expectation, value: float) -> tuple[bool, str]:
    if exp.min is not None and value < exp.min:
        return False, f"{value:.4g} < min {exp.min:g} (short by {exp.min - value:.4g})"
    if exp.max is not None and value > exp.max:
        return False, f"{value:.4g} > max {exp.max:g} (over by {value - exp.max:.4g})"
    limits = [f">= {exp.min:g}" if exp.min is not None else "", f"<= {exp.max:g}" if exp.max is not None else ""]
    return True, f"{value:.4g} {' and '.join(x for x in limits if x)}".strip()


def _value(exp: Expectation, row: pd.Series, derived: pd.DataFrame, frame: pd.DataFrame) -> tuple[float | None, str]:
    if exp.metric in DERIVED:
        value = derived.loc[row.name, exp.metric]
        return (None, "reference case missing or failed") if pd.isna(value) else (float(value), "")
    if exp.metric == "top1":
        return (None, "no top1 in result") if pd.isna(row.get("top1")) else (float(row["top1"]), "")
    if exp.metric == "top1_drop":
        ref = reference_row(frame, exp.vs or "dense", float(row["density"]), row.get("run"))
        if ref is None or pd.isna(row.get("top1")) or pd.isna(ref.get("top1")):
            return None, "top1 missing for the method or its reference"
        return float(ref["top1"]) - float(row["top1"]), ""
    raise AssertionError(exp.metric)


def check_expectations(suite: SuiteConfig, frame: pd.DataFrame) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for exp in suite.expect:
        vs = exp.vs or suite.reference
        rows = frame[[fnmatch.fnmatchcase(str(m), exp.method) for m in frame["method"]]] if len(frame) else frame
        if exp.density is not None and len(rows):
            rows = rows[np.isclose(rows["density"].astype(float), exp.density)]
        if exp.metric != "density_achieved" and len(rows):
            rows = rows[rows["method"] != vs]  # a method is not gated against itself
        if len(rows) == 0:
            outcomes.append(Outcome(exp, exp.method, None, False, "no case matches"))
            continue
        derived = derive(frame, vs) if exp.metric in DERIVED else frame
        for index, row in rows.iterrows():
            case = f"{row['method']}@{row['density']:g}"
            if row["status"] != "ok":
                outcomes.append(Outcome(exp, case, None, False, f"case status is {row['status']}"))
                continue
            if exp.metric == "density_achieved":
                tolerance = exp.tolerance if exp.tolerance is not None else DEFAULT_DENSITY_TOLERANCE
                error = abs(float(row["density_achieved"]) - float(row["density"]))
                passed = error <= tolerance + 1e-12
                message = f"achieved {row['density_achieved']:.4f}, target {row['density']:g}, |error| {error:.4f} {'<=' if passed else '>'} {tolerance:g}"
                outcomes.append(Outcome(exp, case, float(row["density_achieved"]), passed, message))
                continue
            value, why = _value(exp, row, derived, frame)
            if value is None or math.isnan(value):
                outcomes.append(Outcome(exp, case, None, False, why))
                continue
            passed, message = _bounds_message(exp, value)
            outcomes.append(Outcome(exp, case, value, passed, message))
    return outcomes


def describe(outcome: Outcome, reference: str) -> str:
    exp = outcome.expectation
    vs = f" vs {exp.vs or reference}" if exp.metric in DERIVED or exp.metric == "top1_drop" else ""
    return f"{'PASS' if outcome.passed else 'FAIL'}  {exp.metric} {outcome.case}{vs}: {outcome.message}"


def check_run(run_dir: str | Path) -> tuple[SuiteConfig, list[Outcome]]:
    """Expectations of the suite stored in `run_dir`, against its results."""
    from dstbench.config import load_suite
    from dstbench.report.derive import load_frame
    from dstbench.run import SUITE_FILE

    suite = load_suite(Path(run_dir) / SUITE_FILE)
    return suite, check_expectations(suite, load_frame([run_dir]))
