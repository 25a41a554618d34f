"""Suite expectations (`expect:`), checked at the end of `dstbench run` and by `dstbench check`.

    expect:
      - {metric: speedup, method: barter, vs: rigl, density: 0.1, min: 3.0}
      - {metric: density_achieved, method: "*", tolerance: 0.01}

`metric` is a built-in metric or a registered tracker's numeric field (`dstbench.results.gate_metrics`),
gated line by line on the value its declaration shows (`ResultField.shown`: energy per step).

`method` is a glob over method labels; `density` narrows to one density (default: all). Relative
metrics compare each matching case with `vs` at the same density (a dense `vs` at 1.0). A failed
expectation says which case and by how much. A speedup expectation may bound an end of its 95%
interval instead of the estimate (`bound: ci_low` or `ci_high`): `min` with `ci_low` holds when the
whole interval clears it, `max` with `ci_high` when the whole interval stays under it.

Each outcome is PASS, FAIL or SKIPPED. With the run's coverage (`dstbench.results.coverage`) a case the run
was not asked for (`--only`, `--density`) is SKIPPED, and so is a case whose `vs` was not asked for;
a case that was asked for but has no result line (an interrupted run) FAILS. Reports read a run's
expectations with `stored_expectations`, which needs neither torch nor the suite's data or plugins.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from dstbench.suite.cases import Case, line_case_id
from dstbench.suite.schema import SuiteConfig
from dstbench.suite.schema_sections import METRICS, Expectation
from dstbench.measure.trackers.base import ResultField
from dstbench.results.gate_metrics import declared_metric, unknown_metrics, unknown_text
from dstbench.results.coverage import Coverage, run_coverage
from dstbench.util.text import present
from dstbench.results.derive import DENSITY_TOLERANCE, derive
from dstbench.results.pooling import pool_seeds
from dstbench.results.replicates import same_point
from dstbench.results.speedup import reference_row
from dstbench.results.time_to_target import add_time_to_target

DERIVED = {"speedup", "memory_reduction", "state_ratio", "activation_ratio", "topology_share"}
# Metrics measured against another method; `topology_share` is derived but is the case's own.
RELATIVE = {"speedup", "memory_reduction", "state_ratio", "activation_ratio", "top1_drop", "time_to_target_speedup"}
# Gated on a case's mean over its seeds (`_pooled_outcomes`), not line by line.
POOLED = {"top1", "top1_drop", "target_reached", "time_to_target", "time_to_target_speedup"}
TIME_METRICS = {"time_to_target": "time_to_target_s", "time_to_target_speedup": "time_to_target_speedup"}
# The derived column each `bound` of a speedup expectation reads.
BOUND_COLUMNS = {"value": "speedup", "ci_low": "speedup_ci_low", "ci_high": "speedup_ci_high"}


@dataclasses.dataclass
class Outcome:
    expectation: Expectation
    case: str
    value: float | None
    passed: bool  # the gate holds: true for a PASS, and for a SKIPPED (nothing to gate)
    message: str
    skipped: bool = False  # the case (or the one it compares with) was not selected for the run

    @property
    def verdict(self) -> str:
        return "SKIPPED" if self.skipped else "PASS" if self.passed else "FAIL"

    @property
    def failed(self) -> bool:
        return not self.passed


def _skipped(exp: Expectation, case: str, message: str) -> Outcome:
    return Outcome(exp, case, None, True, message, skipped=True)


def bounds_text(exp: Expectation) -> str:
    """The expectation's bound as a reader wants it: '>= 3', '<= 0.1', '|error| <= 0.01'."""
    parts = [f">= {exp.min:g}" if exp.min is not None else "", f"<= {exp.max:g}" if exp.max is not None else ""]
    if exp.metric == "density_achieved":
        tolerance = exp.tolerance if exp.tolerance is not None else DENSITY_TOLERANCE
        parts.insert(0, f"|achieved - target| <= {tolerance:g}")
    return " and ".join(p for p in parts if p)


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
        ref = reference_row(same_point(frame, row), vs, float(row["density"]), row.get("run"))
        if ref is None:
            return None, f"no ok {vs} case at density {row['density']:g} to compare with"
        if exp.metric == "memory_reduction":
            basis = derived.loc[row.name, "memory_basis"]
            return None, f"memory measured differently ({basis} here) or not at all in the {vs} case"
        speedup = derived.loc[row.name, "speedup"] if exp.metric == "speedup" else None
        if exp.bound != "value" and present(speedup):
            return None, f"speedup {float(speedup):.3g} has no 95% interval (fewer than 6 paired rounds, or a single segment)"
        return None, f"{exp.metric} not measured"
    raise AssertionError(exp.metric)  # top1 and top1_drop: `_pooled_outcomes`


def _reference_attempted(frame: pd.DataFrame, vs: str, density: float) -> bool:
    """Whether `vs` was run (with any status) where a case at `density` would be compared."""
    rows = frame[frame["method"] == vs]
    if rows.empty:
        return False
    if (rows["kind"] == "dense").all():
        return True
    return bool(np.isclose(rows["density"].astype(float), density).any())


def _planned_partner(coverage: Coverage, vs: str, density: float) -> Case | None:
    """The planned case of `vs` that a case at `density` compares with (a dense one at 1.0)."""
    for case in coverage.planned:
        if case.method == vs and (case.kind == "dense" or np.isclose(case.density, density)):
            return case
    return None


def _matches(exp: Expectation, method: str, density: float) -> bool:
    if not fnmatch.fnmatchcase(str(method), exp.method):
        return False
    return exp.density is None or bool(np.isclose(float(density), exp.density))


def _matching_rows(exp: Expectation, vs: str, frame: pd.DataFrame, coverage: Coverage | None = None) -> pd.DataFrame:
    if len(frame) == 0:
        return frame
    rows = frame[[_matches(exp, m, d) for m, d in zip(frame["method"], frame["density"])]]
    if exp.metric in RELATIVE and len(rows):
        rows = rows[rows["method"] != vs]  # a method is not gated against itself
        if exp.is_glob:
            # A pattern covers the cases that have a comparison partner: `"*"` vs rigl leaves out
            # dense@1, where rigl never runs. A case named outright still fails without one.
            if coverage is not None:
                keep = [_planned_partner(coverage, vs, float(d)) is not None or _reference_attempted(frame, vs, float(d))
                        for d in rows["density"]]
            else:
                keep = [_reference_attempted(frame, vs, float(d)) for d in rows["density"]]
            rows = rows[keep]
    return rows


def _absent_cases(exp: Expectation, vs: str, frame: pd.DataFrame, coverage: Coverage | None) -> list[Case]:
    """Planned cases the expectation covers that have no result line."""
    if coverage is None:
        return []
    present_ids = {line_case_id(row) for _, row in frame.iterrows()} if len(frame) else set()
    absent = []
    seen: set[str] = set()  # with `seeds:` a case is planned once per seed; it is gated once
    for case in coverage.planned:
        if case.case_id in present_ids or case.case_id in seen or not _matches(exp, case.method, case.density):
            continue
        seen.add(case.case_id)
        if exp.metric in RELATIVE:
            if case.method == vs:
                continue
            if exp.is_glob and _planned_partner(coverage, vs, case.density) is None:
                continue
        absent.append(case)
    return absent


def _absent_outcome(exp: Expectation, case: Case, coverage: Coverage) -> Outcome:
    if case.key in coverage.unselected:
        return _skipped(exp, case.case_id, "not selected for this run (--only / --density)")
    if not coverage.recorded:
        return _skipped(exp, case.case_id, "no result line, and this run folder's run.json does not record whether it was selected")
    return Outcome(exp, case.case_id, None, False, f"not run: the run has no result for {case.case_id} ({coverage.summary()})")


def _partner_skipped(exp: Expectation, vs: str, density: float, coverage: Coverage | None) -> str | None:
    """Why a relative metric cannot be taken because its `vs` case was left out of the run."""
    if coverage is None or exp.metric not in RELATIVE:
        return None
    partner = _planned_partner(coverage, vs, density)
    if partner is not None and partner.key in coverage.unselected:
        return f"{partner.case_id}, which it compares with, was not selected for this run"
    return None


def _density_outcome(exp: Expectation, case: str, row: pd.Series) -> Outcome:
    achieved = row.get("density_achieved")
    if not present(achieved):
        return Outcome(exp, case, None, False, "density_achieved not recorded")
    achieved = float(achieved)
    tolerance = exp.tolerance if exp.tolerance is not None else DENSITY_TOLERANCE
    error = abs(achieved - float(row["density"]))
    passed = error <= tolerance + 1e-12
    message = f"achieved {achieved:.4f}, target {row['density']:g}, |error| {error:.4f} {'<=' if passed else '>'} {tolerance:g}"
    if passed and (exp.min is not None or exp.max is not None):
        passed, bounds = _bounds_message(exp, achieved)
        message += f"; {bounds}"
    return Outcome(exp, case, achieved, passed, message)


def _pooled_outcomes(
    exp: Expectation, vs: str, rows: pd.DataFrame, frame: pd.DataFrame, coverage: Coverage | None, reference: str,
    derived_for: Callable[[str], pd.DataFrame],
) -> list[Outcome]:
    """A `top1`, `top1_drop`, `target_reached` or time-to-target expectation, one outcome per case
    over its seeds (a suite's `seeds:`, `dstbench.results.pooling`): the mean is gated and its 95%
    interval printed beside it (`target_reached`: the fraction of seeds whose curve reached the
    target, and how many of how many); a case any of whose seeds failed fails. With one seed, the
    case's own figure."""
    rows = rows if "run" in rows else rows.assign(run="")
    if exp.metric in TIME_METRICS:  # the speedup to target is against `vs`
        frame = derived_for(vs) if "run" in frame else derive(frame.assign(run=""), vs)
    elif "run" not in frame:
        frame = frame.assign(run="")
    if exp.metric == "target_reached" and "target_reached" not in frame:
        frame = add_time_to_target(frame if "reference" in frame else frame.assign(reference=reference))
    pooled = pool_seeds(frame, baseline=vs).set_index(["run", "case_id"], drop=False)
    outcomes = []
    # A failed seed is a miss for the target metrics (dstbench.results.time_to_target), judged
    # with the others; every other metric fails on it.
    target_metric = exp.metric == "target_reached" or exp.metric in TIME_METRICS
    for (run, case), lines in rows.groupby(["run", "case_id"], sort=False):
        failed = lines[lines["status"] != "ok"]
        seed = f" (seed {failed.iloc[0]['seed']:.0f})" if not failed.empty and "seed" in lines and lines["seed"].nunique() > 1 else ""
        if not failed.empty and not target_metric:
            outcomes.append(Outcome(exp, case, None, False, f"case status is {failed.iloc[0]['status']}{seed}"))
            continue
        row = pooled.loc[(run, case)]
        if not failed.empty:
            outcome = (_target_outcome(exp, case, row) if exp.metric == "target_reached" else _time_outcome(exp, case, row, vs))
            note = f"; {len(failed)} seed{'s' if len(failed) > 1 else ''} failed, counted as not reached: status {failed.iloc[0]['status']}{seed}"
            outcomes.append(dataclasses.replace(outcome, message=outcome.message + note))
            continue
        if exp.metric in TIME_METRICS:
            outcome = _time_outcome(exp, case, row, vs)
            reason = None if outcome.passed else _partner_skipped(exp, vs, float(lines.iloc[0]["density"]), coverage)
            outcomes.append(_skipped(exp, case, reason) if reason and outcome.value is None else outcome)
            continue
        if exp.metric == "target_reached":
            outcomes.append(_target_outcome(exp, case, row))
            continue
        drop = exp.metric == "top1_drop"
        value = row["top1_drop"] if drop else row["top1"]
        low, high = (row["top1_drop_ci_low"], row["top1_drop_ci_high"]) if drop else (row["top1_ci_low"], row["top1_ci_high"])
        n = int(row["top1_drop_seeds"] if drop else row["seeds"])
        if not present(value):
            reason = _partner_skipped(exp, vs, float(lines.iloc[0]["density"]), coverage)
            why = f"top1 missing for the method or for {vs}" if drop else "no top1 in result"
            outcomes.append(_skipped(exp, case, reason) if reason else Outcome(exp, case, None, False, why))
            continue
        passed, message = _bounds_message(exp, float(value))
        if n > 1:
            message += f" (mean of {n} seeds, 95% CI [{float(low):.4g}, {float(high):.4g}])"
        outcomes.append(Outcome(exp, case, float(value), passed, message))
    return outcomes


def _target_outcome(exp: Expectation, case: str, row: pd.Series) -> Outcome:
    """`target_reached`: the fraction of the case's seeds whose curve reached the target."""
    seeds = int(row.get("target_seeds") or 0)
    if not seeds:
        return Outcome(exp, case, None, False, f"no accuracy curve to time to a target ({row.get('target_basis') or 'no target'})")
    value = float(row["target_reached"])
    passed, message = _bounds_message(exp, value)
    return Outcome(exp, case, value, passed, f"{message} ({round(value * seeds)} of {seeds} seeds reached {row.get('target_basis')})")


def _time_outcome(exp: Expectation, case: str, row: pd.Series, vs: str) -> Outcome:
    """`time_to_target` (seconds) or `time_to_target_speedup` (against `vs`), over the case's seeds,
    its 95% interval and what it rests on beside it; a case that did not reach the target fails."""
    value = row.get(TIME_METRICS[exp.metric] if exp.bound == "value" else f"{exp.metric}_{exp.bound}")
    if not present(value):
        seeds = int(row.get("target_seeds") or 0)
        if seeds and float(row.get("target_reached")) < 1:
            why = f"not reached ({round(float(row['target_reached']) * seeds)} of {seeds} seeds reached {row.get('target_basis')})"
        else:
            why = row.get("time_to_target_basis") or ("no accuracy curve to time to a target" if not seeds else "")
            if not why and exp.metric == "time_to_target_speedup":
                why = f"{vs} has no time to target to compare with (not reached, or not timed)"
        return Outcome(exp, case, None, False, why or f"{exp.metric} not measured")
    passed, message = _bounds_message(exp, float(value))
    unit = " s" if exp.metric == "time_to_target" else "x"
    low, high = row.get(f"{exp.metric}_ci_low"), row.get(f"{exp.metric}_ci_high")
    interval = f"95% CI [{float(low):.4g}, {float(high):.4g}]{unit}" if present(low) and present(high) else "no interval"
    rests_on = row.get("time_to_target_speedup_basis" if exp.metric == "time_to_target_speedup" else "time_to_target_covers")
    return Outcome(exp, case, float(value), passed, f"{message} ({interval}; {rests_on or ''})")


def check_expectations(suite: SuiteConfig, frame: pd.DataFrame, coverage: Coverage | None = None) -> list[Outcome]:
    """One outcome per (expectation, matching case); an expectation that matches nothing fails.
    `coverage` (the run's cases) turns cases left out of the run into SKIPPED outcomes."""
    return evaluate(list(suite.expect), suite.reference, frame, coverage)


def evaluate(
    expect: list[Expectation], reference: str, frame: pd.DataFrame, coverage: Coverage | None = None,
    derived_for: Callable[[str], pd.DataFrame] | None = None,
) -> list[Outcome]:
    """`check_expectations` from the expectations and the reference alone. `derived_for(vs)`: the
    frame derived against `vs` (a run's `RunFolder.derived`, computed once); by default derived
    here, once per `vs`."""
    cache: dict[str, pd.DataFrame] = {}

    def derived_of(vs: str) -> pd.DataFrame:
        if vs not in cache:
            cache[vs] = derived_for(vs) if derived_for is not None else derive(frame, vs)
        return cache[vs]

    outcomes: list[Outcome] = []
    for exp in expect:
        # Validation made sure every metric but density_achieved has a bound (config.py).
        declared = declared_metric(exp.metric) if exp.metric not in METRICS else None
        if exp.metric not in METRICS and declared is None:
            outcomes.append(Outcome(exp, exp.method, None, False, unknown_text([exp.metric])))
            continue
        vs = comparison_method(exp, reference)
        rows = _matching_rows(exp, vs, frame, coverage)
        absent = _absent_cases(exp, vs, frame, coverage)
        if len(rows) == 0 and not absent:
            where = f" at density {exp.density:g}" if exp.density is not None else ""
            outcomes.append(Outcome(exp, exp.method, None, False, f"no case matches {exp.method!r}{where}"))
            continue
        derived = derived_of(vs) if exp.metric in DERIVED and len(rows) else frame
        if exp.metric in POOLED and len(rows):
            outcomes += _pooled_outcomes(exp, vs, rows, frame, coverage, reference, derived_of)
            rows = rows.iloc[0:0]
        for _, row in rows.iterrows():
            case = line_case_id(row)
            if row["status"] != "ok":
                outcomes.append(Outcome(exp, case, None, False, f"case status is {row['status']}"))
                continue
            if exp.metric == "density_achieved":
                outcomes.append(_density_outcome(exp, case, row))
                continue
            if exp.metric == "topology_share" and not row.get("topology_updates"):
                # A share of 0 would be no update timed, not a cheap one: nothing to gate.
                outcomes.append(_skipped(exp, case, "not measured: no topology update fell inside a timed segment"))
                continue
            if declared is not None:
                outcomes.append(_declared_outcome(exp, declared, case, row))
                continue
            value, why = _value(exp, vs, row, derived, frame)
            if value is None or math.isnan(value):
                reason = _partner_skipped(exp, vs, float(row["density"]), coverage)
                outcomes.append(_skipped(exp, case, reason) if reason else Outcome(exp, case, None, False, why))
                continue
            passed, message = _bounds_message(exp, value)
            outcomes.append(Outcome(exp, case, value, passed, message))
        outcomes += [_absent_outcome(exp, case, coverage) for case in absent if coverage is not None]
    return outcomes


def _declared_outcome(exp: Expectation, spec: ResultField, case: str, row: pd.Series) -> Outcome:
    """A tracker's field, gated on the value its declaration shows, with its unit and direction."""
    value = spec.shown(row.get(spec.name))
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or math.isnan(float(value)):
        return Outcome(exp, case, None, False, f"{spec.name} {value if isinstance(value, str) else 'not recorded'}")
    passed, message = _bounds_message(exp, float(value))
    said = ", ".join(x for x in (spec.shown_unit or "", f"{spec.better} is better" if spec.better else "") if x)
    return Outcome(exp, case, float(value), passed, message + (f" ({said})" if said else ""))


def describe(outcome: Outcome, reference: str) -> str:
    """`PASS|FAIL|SKIPPED  metric case [vs method]: value and bounds (and by how much it missed)`."""
    exp = outcome.expectation
    vs = f" vs {comparison_method(exp, reference)}" if exp.metric in RELATIVE else ""
    bound = f" ({exp.bound.replace('_', ' ')} of its 95% CI)" if exp.bound != "value" else ""
    return f"{outcome.verdict}  {exp.metric}{bound} {outcome.case}{vs}: {outcome.message}"


def summary(outcomes: list[Outcome]) -> str:
    """'1 of 3 expectations failed' / 'all 3 expectations passed', with the skipped ones counted."""
    failed = sum(o.failed for o in outcomes)
    skipped = sum(o.skipped for o in outcomes)
    judged = len(outcomes) - skipped
    text = f"{failed} of {judged} expectations failed" if failed else f"all {judged} expectations passed"
    return text + (f" ({skipped} skipped)" if skipped else "")


def check_run(
    run_dir: str | Path, frame: pd.DataFrame | None = None, coverage: Coverage | None = None
) -> tuple[SuiteConfig, list[Outcome]]:
    """Expectations of the suite stored in `run_dir`, against its results and its coverage (read
    here unless the caller has them: through `RunFolder.open`, whose derived frames are reused)."""
    from dstbench.results.run_folder import RunFolder

    folder = RunFolder.open(run_dir)
    suite = folder.suite()
    derived_for = folder.derived if frame is None or frame is folder.loaded() else None
    frame = folder.loaded() if frame is None else frame
    coverage = run_coverage(run_dir) if coverage is None else coverage
    return suite, evaluate(list(suite.expect), suite.reference, frame, coverage, derived_for)


def stored_expectations(run_dir: str | Path) -> tuple[list[Expectation], str] | None:
    """The `expect:` list and `reference` of a run folder's stored suite, read without validating
    the rest of it (no torch, no data, no plugins: a report on another machine can still show
    them); None when the stored suite is missing or unreadable."""
    from pydantic import ValidationError

    from dstbench.results.run_folder import RunFolder

    data = RunFolder.open(run_dir).suite_data()  # {} when missing or unreadable
    if not data:
        return None
    try:
        expect = [Expectation.model_validate(item) for item in (data.get("expect") or [])]
        return expect, str(data.get("reference") or "")
    except (AttributeError, TypeError, ValidationError):
        return None


def run_outcomes(run_dir: str | Path, frame: pd.DataFrame | None = None) -> tuple[str, list[Outcome]] | None:
    """The reference and the outcomes of a run folder's expectations, for reports (see
    `stored_expectations`); None without a readable stored suite."""
    from dstbench.results.run_folder import RunFolder

    stored = stored_expectations(run_dir)
    if stored is None:
        return None
    expect, reference = stored
    folder = RunFolder.open(run_dir)
    if unknown_metrics(expect):
        try:
            folder.suite()  # imports the run's plugins, whose trackers may declare the metric
        except Exception:  # noqa: BLE001 - the outcome then says the metric is unknown
            pass
    derived_for = folder.derived if frame is None or frame is folder.loaded() else None
    frame = folder.loaded() if frame is None else frame
    return reference, evaluate(expect, reference, frame, run_coverage(run_dir), derived_for)
