"""Suite expectations (`expect:`), checked at the end of `dstbench run` and by `dstbench check`.

    expect:
      - {metric: speedup, method: barter, vs: rigl, density: 0.1, min: 3.0}
      - {metric: density_achieved, method: "*", tolerance: 0.01}

`method` is a glob over method labels; `density` narrows to one density (default: all). Relative
metrics compare each matching case with `vs` at the same density (a dense `vs` at 1.0). A failed
expectation says which case and by how much. A speedup expectation may bound an end of its 95%
interval instead of the estimate (`bound: ci_low` or `ci_high`): `min` with `ci_low` holds when the
whole interval clears it, `max` with `ci_high` when the whole interval stays under it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from pathlib import Path

import numpy as np
import pandas as pd

from dstbench.cases import case_id
from dstbench.config import Expectation, SuiteConfig
from dstbench.fmt import present
from dstbench.report.derive import derive, reference_row

DERIVED = {"speedup", "memory_reduction", "state_ratio", "activation_ratio", "topology_share"}
# Metrics measured against another method; `topology_share` is derived but is the case's own.
RELATIVE = {"speedup", "memory_reduction", "state_ratio", "activation_ratio", "top1_drop"}
DEFAULT_DENSITY_TOLERANCE = 0.01
# The derived column each `bound` of a speedup expectation reads.
BOUND_COLUMNS = {"value": "speedup", "ci_low": "speedup_ci_low", "ci_high": "speedup_ci_high"}


@dataclasses.dataclass
class Outcome:
    expectation: Expectation
    case: str
    value: float | None
    passed: bool
    message: str


def comparison_method(exp: Expectation, suite_reference: str) -> str:
    """The method a relative metric is measured against: `vs`, else dense for top1_drop (the
    accuracy cost of sparsity), else the suite's reference."""
    if exp.vs:
        return exp.vs
    return "dense" if exp.metric == "top1_drop" else suite_reference


def _bounds_message(exp: Expectation, value: float) -> tuple[bool, str]:
    if exp.min is not None and value < exp.min:
        return False, f"{value:.4g} < min {exp.min:g} (short by {exp.min - value:.4g})"
    if exp.max is not None and value > exp.max:
        return False, f"{value:.4g} > max {exp.max:g} (over by {value - exp.max:.4g})"
    limits = [f">= {exp.min:g}" if exp.min is not None else "", f"<= {exp.max:g}" if exp.max is not None else ""]
    return True, f"{value:.4g} {' and '.join(x for x in limits if x)}".strip()


def _value(
    exp: Expectation, vs: str, row: pd.Series, derived: pd.DataFrame, frame: pd.DataFrame
) -> tuple[float | None, str]:
    if exp.metric in DERIVED:
        value = derived.loc[row.name, BOUND_COLUMNS[exp.bound] if exp.metric == "speedup" else exp.metric]
        if present(value):
            return float(value), ""
        if exp.metric == "topology_share":
            return None, "no segment samples"
        ref = reference_row(frame, vs, float(row["density"]), row.get("run"))
        if ref is None:
            return None, f"no ok {vs} case at density {row['density']:g} to compare with"
        if exp.metric == "memory_reduction":
            basis = derived.loc[row.name, "memory_basis"]
            return None, f"memory measured differently ({basis} here) or not at all in the {vs} case"
        return None, f"{exp.metric} not measured"
    if exp.metric == "top1":
        return (None, "no top1 in result") if not present(row.get("top1")) else (float(row["top1"]), "")
    if exp.metric == "top1_drop":
        ref = reference_row(frame, vs, float(row["density"]), row.get("run"))
        if ref is None or not present(row.get("top1")) or not present(ref.get("top1")):
            return None, f"top1 missing for the method or for {vs}"
        return float(ref["top1"]) - float(row["top1"]), ""
    raise AssertionError(exp.metric)


def _reference_attempted(frame: pd.DataFrame, vs: str, density: float) -> bool:
    """Whether `vs` was run (with any status) where a case at `density` would be compared."""
    rows = frame[frame["method"] == vs]
    if rows.empty:
        return False
    if (rows["kind"] == "dense").all():
        return True
    return bool(np.isclose(rows["density"].astype(float), density).any())


def _matching_rows(exp: Expectation, vs: str, frame: pd.DataFrame) -> pd.DataFrame:
    if len(frame) == 0:
        return frame
    rows = frame[[fnmatch.fnmatchcase(str(m), exp.method) for m in frame["method"]]]
    if exp.density is not None and len(rows):
        rows = rows[np.isclose(rows["density"].astype(float), exp.density)]
    if exp.metric in RELATIVE and len(rows):
        rows = rows[rows["method"] != vs]  # a method is not gated against itself
        if exp.is_glob:
            # A pattern covers the cases that have a comparison partner: `"*"` vs rigl leaves out
            # dense@1, where rigl never runs. A case named outright still fails without one.
            rows = rows[[_reference_attempted(frame, vs, float(d)) for d in rows["density"]]]
    return rows


def _density_outcome(exp: Expectation, case: str, row: pd.Series) -> Outcome:
    achieved = row.get("density_achieved")
    if not present(achieved):
        return Outcome(exp, case, None, False, "density_achieved not recorded")
    achieved = float(achieved)
    tolerance = exp.tolerance if exp.tolerance is not None else DEFAULT_DENSITY_TOLERANCE
    error = abs(achieved - float(row["density"]))
    passed = error <= tolerance + 1e-12
    message = f"achieved {achieved:.4f}, target {row['density']:g}, |error| {error:.4f} {'<=' if passed else '>'} {tolerance:g}"
    if passed and (exp.min is not None or exp.max is not None):
        passed, bounds = _bounds_message(exp, achieved)
        message += f"; {bounds}"
    return Outcome(exp, case, achieved, passed, message)


def check_expectations(suite: SuiteConfig, frame: pd.DataFrame) -> list[Outcome]:
    """One outcome per (expectation, matching case); an expectation that matches nothing fails."""
    outcomes: list[Outcome] = []
    for exp in suite.expect:
        # Validation made sure every metric but density_achieved has a bound (config.py).
        vs = comparison_method(exp, suite.reference)
        rows = _matching_rows(exp, vs, frame)
        if len(rows) == 0:
            where = f" at density {exp.density:g}" if exp.density is not None else ""
            outcomes.append(Outcome(exp, exp.method, None, False, f"no case matches {exp.method!r}{where}"))
            continue
        derived = derive(frame, vs) if exp.metric in DERIVED else frame
        for _, row in rows.iterrows():
            case = case_id(row["method"], row["density"])
            if row["status"] != "ok":
                outcomes.append(Outcome(exp, case, None, False, f"case status is {row['status']}"))
                continue
            if exp.metric == "density_achieved":
                outcomes.append(_density_outcome(exp, case, row))
                continue
            value, why = _value(exp, vs, row, derived, frame)
            if value is None or math.isnan(value):
                outcomes.append(Outcome(exp, case, None, False, why))
                continue
            passed, message = _bounds_message(exp, value)
            outcomes.append(Outcome(exp, case, value, passed, message))
    return outcomes


def describe(outcome: Outcome, reference: str) -> str:
    """`PASS|FAIL  metric case [vs method]: value and bounds (and by how much it missed)`."""
    exp = outcome.expectation
    vs = f" vs {comparison_method(exp, reference)}" if exp.metric in RELATIVE else ""
    bound = f" ({exp.bound.replace('_', ' ')} of its 95% CI)" if exp.bound != "value" else ""
    return f"{'PASS' if outcome.passed else 'FAIL'}  {exp.metric}{bound} {outcome.case}{vs}: {outcome.message}"


def check_run(run_dir: str | Path) -> tuple[SuiteConfig, list[Outcome]]:
    """Expectations of the suite stored in `run_dir`, against its results."""
    from dstbench.config import load_suite
    from dstbench.report.derive import load_frame
    from dstbench.rundir import SUITE_FILE

    suite = load_suite(Path(run_dir) / SUITE_FILE)
    return suite, check_expectations(suite, load_frame([run_dir]))
