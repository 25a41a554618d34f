"""`dstbench compare` by equivalence: unchanged only when the change's interval lies inside the
+/-threshold band, a regression only when the change is significantly beyond it, dense gated on
its own times, a missing case fails, runs timed under other protocols are refused.

The first part tests the rule on constructed changes (each fails if the verdict is taken from the
point estimate, or tested against 1 instead of the band's edge); the second doctors copies of a
committed quiet run of the gating suite (3 process sets x 10 rounds per case)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import yaml

import dstbench
from dstbench.cli import main
from dstbench.gates.compare import compare_runs
from dstbench.gates.sides import CompareInputError, load_side
from dstbench.gates.time_rule import TimeVerdict, band, beyond_p, decide
from dstbench.results.intervals import LogChange
from tests.gates.test_compare import J1, J2, J3, J4, jittered, tagged

QUIET_RUN = Path(__file__).parents[2] / "reports/studies/intervals/runs/gate/cpu_gate-20261203-230244"


def verdict_of(ratio: float, se: float, df: float = 20.0, threshold: float = 10.0, alpha: float = 0.05) -> TimeVerdict:
    """The verdict of one case (no Holm: one test) whose change is `ratio` with log standard error `se`."""
    change = LogChange(math.log(ratio), se, df)
    low, high = change.interval(1 - 2 * alpha)
    p = beyond_p(change, threshold)
    verdict = TimeVerdict(100.0, 100.0 * ratio, change.ratio, p, "", ci_low=low, ci_high=high, p_raw=p, change=change)
    decide(verdict, threshold, alpha)
    return verdict


# --- the rule on constructed changes ------------------------------------------------------------------


def test_no_change_with_a_wide_interval_is_inconclusive_not_unchanged() -> None:
    """Rounds spread +-50% around no change: 1.000x [0.52, 1.92] must not read unchanged (the point
    estimate is inside the band; its interval is not)."""
    verdict = verdict_of(1.0, 0.31)
    assert verdict.ci_low < 0.6 and verdict.ci_high > 1.6
    assert verdict.verdict == "inconclusive"
    assert "reaches past +/-10%" in verdict.why and "the samples would decide it" in verdict.why


def test_a_change_inside_the_band_measured_tightly_is_unchanged() -> None:
    # +8%, tight: [1.07, 1.09] lies inside +-10%: unchanged, no regression (as before this rule).
    verdict = verdict_of(1.08, 0.004)
    assert 1.07 < verdict.ci_low and verdict.ci_high < 1.09
    assert verdict.verdict == "unchanged"


def test_a_change_inside_the_band_with_a_wide_interval_is_inconclusive() -> None:
    # +8% with [1.02, 1.14]: significantly above 1, below the threshold by its point estimate, but
    # the interval reaches past 1.1: a test against 1 or the point estimate would say unchanged.
    verdict = verdict_of(1.08, 0.027)
    assert verdict.ci_low > 1.0 and verdict.ci_high > 1.1
    assert verdict.verdict == "inconclusive"


def test_12_percent_with_a_wide_interval_is_inconclusive() -> None:
    # +12% measured at [0.94, 1.33]: not unchanged, and not shown beyond the band either.
    assert verdict_of(1.12, 0.08).verdict == "inconclusive"
    # +9% point estimate of a real +12% change with a wide interval: never unchanged.
    assert verdict_of(1.09, 0.06).verdict == "inconclusive"


def test_beyond_the_threshold_but_not_beyond_it_significantly_is_inconclusive() -> None:
    """+12% [1.06, 1.19]: significantly above 1 and above 1.1 by its estimate, so the rule tested
    against 1 called it a regression; against 1.1 it is not shown: inconclusive."""
    verdict = verdict_of(1.12, 0.028)
    assert verdict.ci_low > 1.0 and verdict.ratio > 1.1 and verdict.ci_low < 1.1
    assert verdict.verdict == "inconclusive" and verdict.p_value > 0.05


def test_20_percent_tight_is_a_regression_and_minus_20_an_improvement() -> None:
    slower, faster = verdict_of(1.2, 0.01), verdict_of(0.8, 0.01)
    assert slower.verdict == "regression" and slower.ci_low > 1.1 and slower.p_value < 1e-6
    assert faster.verdict == "improvement" and faster.ci_high < 0.9


def test_the_test_is_against_the_band_edge() -> None:
    # At the edge itself the evidence is even: p 0.5 (against 1.1, not 1); further out it falls.
    assert beyond_p(LogChange(math.log(1.1), 0.02, 20.0), 10.0) == pytest.approx(0.5)
    assert beyond_p(LogChange(math.log(1.2), 0.02, 20.0), 10.0) < beyond_p(LogChange(math.log(1.15), 0.02, 20.0), 10.0) < 0.05
    assert beyond_p(LogChange(math.log(0.85), 0.02, 20.0), 10.0) < 0.05  # the lower edge, 0.9
    assert band(10.0) == (0.9, 1.1) and band(150.0) == (0.0, 2.5)


@pytest.mark.parametrize("seed", range(3))
def test_the_interval_rules_are_one_sided_tests(seed: int) -> None:
    """The 90% interval lies inside the band exactly when both one-sided tests (below 1 + t, above
    1 - t) reject at 0.05 (TOST); beyond 1 + t exactly when the test against 1 + t rejects."""
    rng = np.random.default_rng(seed)
    for _ in range(200):
        change = LogChange(float(rng.normal(0, 0.08)), float(rng.uniform(0.002, 0.08)), float(rng.uniform(3, 60)))
        low, high = change.interval(0.90)
        tost = change.p_below(1.1) < 0.05 and change.p_above(0.9) < 0.05
        assert (0.9 <= low and high <= 1.1) == tost
        assert (low > 1.1) == (change.log_ratio >= 0 and beyond_p(change, 10.0) < 0.05)


def test_what_would_decide_names_the_samples_needed() -> None:
    """The factor it prints: the interval at that many times the samples (se / sqrt(factor)) decides."""
    verdict = verdict_of(1.04, 0.05)
    assert verdict.verdict == "inconclusive"
    factor = float(verdict.why.split("about ")[1].split("x the samples")[0].replace(",", ""))
    assert 1 < factor < 20
    assert verdict_of(1.04, 0.05 / math.sqrt(factor * 1.1)).verdict == "unchanged"
    assert verdict_of(1.04, 0.05 / math.sqrt(factor * 0.9)).verdict == "inconclusive"


# --- doctored copies of a quiet run ------------------------------------------------------------------


def doctored(tmp_path: Path, name: str, edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> str:
    """A copy of the quiet run whose result lines `edit` changed."""
    target = tmp_path / name
    shutil.copytree(QUIET_RUN, target)
    lines = [json.loads(x) for x in (target / "results.jsonl").read_text().splitlines() if x.strip()]
    (target / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in edit(lines)))
    return str(target)


def scale(factors: dict[str, Any]) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """Each named method's segments times its factor (a number, or one factor per segment)."""
    def edit(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for line in lines:
            factor = factors.get(line["method"], factors.get("*"))
            if factor is not None:
                per = factor if isinstance(factor, list) else [factor] * len(line["segment_ms"])
                line["segment_ms"] = [ms * f for ms, f in zip(line["segment_ms"], per)]
                line["median_ms"] = float(np.median(line["segment_ms"]))
        return lines
    return edit


def run_compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["compare", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_quiet_run_against_itself_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_compare(capsys, str(QUIET_RUN), str(QUIET_RUN))
    assert code == 0 and "0 regressed" in out


def test_every_case_50_percent_slower_dense_included_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slower = doctored(tmp_path, "slower", scale({"*": 1.5}))
    comparison = compare_runs(load_side(QUIET_RUN), load_side(slower))
    dense = next(c.time for c in comparison.cases if c.case == "dense@1")
    assert dense.reference and dense.basis == "absolute" and dense.verdict == "regression"
    assert dense.ratio == pytest.approx(1.5, rel=1e-6)
    assert all(c.time.verdict == "unchanged" for c in comparison.cases if c.case != "dense@1")
    code, out, _ = run_compare(capsys, str(QUIET_RUN), slower)
    assert code == 1 and "FAIL: dense@1 (time)" in out
    assert "TIME REFERENCE: every case 1.50x to 1.50x slower on its own times, dense included (dense@1 1.500x [" in out
    assert "a machine shift or a change to the common training step" in out
    code, out, _ = run_compare(capsys, str(QUIET_RUN), slower, "--accept-machine-shift")
    assert code == 0 and "accepted (--accept-machine-shift)" in out
    api = dstbench.compare(QUIET_RUN, slower)
    assert not api.passed and api.shifts[0].startswith("every case 1.50x to 1.50x slower on its own times, dense included")
    frame = api.frame()
    assert frame.loc[(frame["case_id"] == "dense@1") & (frame["metric"] == "time"), "basis"].item() == "absolute (reference)"


def test_dense_alone_slower_fails_even_when_shifts_are_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Dense 30% slower alone turns every other case's relative time into an improvement: the
    report says it is dense's change, and no flag accepts it."""
    dense_slower = doctored(tmp_path, "dense", scale({"dense": 1.3}))
    comparison = compare_runs(load_side(QUIET_RUN), load_side(dense_slower), accept_machine_shift=True)
    (shift,) = comparison.shifts
    assert not shift.shared and set(shift.left_behind) == {"set@0.5", "rigl@0.5", "barter@0.5"}
    assert comparison.regressed[0].case == "dense@1" and len(comparison.improved) == 3
    code, out, _ = run_compare(capsys, str(QUIET_RUN), dense_slower, "--accept-machine-shift")
    assert code == 1 and "FAIL: dense@1 (time)" in out
    assert "did not move on their own times (" in out and "dense's own time changed, not the machine" in out


def test_cases_whose_relative_change_is_inconclusive_do_not_make_dense_alone_a_machine_shift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: dense alone 1.15x slower, the others at 1.00x and 1.01x on their own times
    (inside a 5% band), so relative to dense they read about 0.87x, which need not be decided: the
    cases' own times say the machine did not move, and --accept-machine-shift does not turn
    dense's regression into a shift."""
    shifted = doctored(tmp_path, "dense15", scale({"dense": 1.15, "set": 1.01}))
    comparison = compare_runs(load_side(QUIET_RUN), load_side(shifted), accept_machine_shift=True, time_threshold=5)
    (shift,) = comparison.shifts
    assert not shift.shared and not shift.accepted and "did not move on their own times" in shift.text()
    assert shift.case_ratios["set@0.5"] == pytest.approx(1.01, abs=0.005)
    assert comparison.regressed[0].case == "dense@1"
    code, out, _ = run_compare(capsys, str(QUIET_RUN), shifted, "--accept-machine-shift", "--time-threshold", "5")
    assert code == 1 and "FAIL: dense@1 (time)" in out and "shift accepted" not in out


def test_a_shift_some_cases_share_names_who_did_not_move(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every case 1.5x slower but barter, which stayed as it was: not every case moved, so it is not
    read as a machine shift (a change to the step the full-size methods share would look the same),
    and the flag does not accept it; barter's relative improvement stands."""
    mixed = doctored(tmp_path, "mixed", scale({"dense": 1.5, "set": 1.5, "rigl": 1.5}))
    comparison = compare_runs(load_side(QUIET_RUN), load_side(mixed))
    (shift,) = comparison.shifts
    assert shift.shared and shift.moved_with == ["rigl@0.5", "set@0.5"] and shift.left_behind == ["barter@0.5"]
    code, out, _ = run_compare(capsys, str(QUIET_RUN), mixed)
    assert code == 1 and "and rigl@0.5 1.50x, set@0.5 1.50x with it on their own times" in out
    assert "barter@0.5 1.00x did not move: not every case moved" in out
    code, out, _ = run_compare(capsys, str(QUIET_RUN), mixed, "--accept-machine-shift")
    assert code == 1 and "1 improved" in out and "FAIL: dense@1 (time)" in out


def test_a_case_removed_from_the_current_run_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fewer = doctored(tmp_path, "fewer", lambda lines: [x for x in lines if x["method"] != "barter"])
    code, out, _ = run_compare(capsys, str(QUIET_RUN), fewer)
    assert code == 1 and "barter@0.5 (missing from the current run)" in out
    assert run_compare(capsys, str(QUIET_RUN), fewer, "--allow-missing")[0] == 0
    comparison = compare_runs(load_side(QUIET_RUN), load_side(fewer))
    assert [k.case.case_id for k in comparison.missing] == ["barter@0.5"]
    api = dstbench.compare(QUIET_RUN, fewer)
    assert api.missing == ["barter@0.5"] and not api.passed and api.exit_code == 1
    assert dstbench.compare(QUIET_RUN, fewer, allow_missing=True).passed
    fewest = doctored(tmp_path, "fewest", lambda lines: [x for x in lines if x["method"] in ("dense", "set")])
    code, out, _ = run_compare(capsys, str(QUIET_RUN), fewest)
    assert code == 1 and "FAIL: 2 cases missing from the current run (barter@0.5, rigl@0.5)" in out


def test_rounds_spread_50_percent_around_no_change_are_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spread = [1.5 if i % 2 else 1 / 1.5 for i in range(30)]
    noisy = doctored(tmp_path, "noisy", scale({"rigl": spread}))
    comparison = compare_runs(load_side(QUIET_RUN), load_side(noisy))
    rigl = next(c.time for c in comparison.cases if c.case == "rigl@0.5")
    assert 0.9 < rigl.ratio < 1.1  # no change by the point estimate
    assert rigl.verdict == "inconclusive" and (rigl.ci_low < 0.9 or rigl.ci_high > 1.1)
    code, out, _ = run_compare(capsys, str(QUIET_RUN), noisy)
    assert code == 0 and "1 inconclusive" in out and "INCONCLUSIVE: time (its 90% interval reaches past" in out


def test_20_percent_slower_regresses_and_8_percent_does_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slower = doctored(tmp_path, "20", scale({"set": 1.2}))
    code, out, _ = run_compare(capsys, str(QUIET_RUN), slower, "--time-threshold", "10")
    assert code == 1 and "FAIL: set@0.5 (time)" in out
    slightly = doctored(tmp_path, "8", scale({"set": 1.08}))
    code, out, _ = run_compare(capsys, str(QUIET_RUN), slightly, "--time-threshold", "10")
    assert code == 0 and "0 regressed" in out


def test_tight_and_wide_changes_on_tagged_rounds(tmp_path: Path) -> None:
    """Synthetic tagged runs (2 process sets x 5 rounds, jitter of tenths of a percent): +20%
    regresses, +8% is unchanged; the same +12% with rounds spread widely is inconclusive."""
    from tests.gates.synthetic import write_run

    def runs(factor: float, spread: float) -> tuple[str, str]:
        noise = [1 + spread * (1 if i % 2 else -1) for i in range(10)]
        base = [tagged("dense", 1.0, jittered(100, J1)), tagged("rigl", 0.1, jittered(80, J2))]
        cur = [tagged("dense", 1.0, jittered(100, J3)),
               tagged("rigl", 0.1, [x * n for x, n in zip(jittered(80 * factor, J4), noise)])]
        name = f"{factor}-{spread}"
        return str(write_run(tmp_path / name / "base", base)), str(write_run(tmp_path / name / "cur", cur))

    def rigl(factor: float, spread: float) -> TimeVerdict:
        comparison = compare_runs(*(load_side(p) for p in runs(factor, spread)), time_threshold=10)
        return next(c.time for c in comparison.cases if c.case == "rigl@0.1")

    assert rigl(1.2, 0.0).verdict == "regression"
    assert rigl(1.08, 0.0).verdict == "unchanged"
    wide = rigl(1.12, 0.3)
    assert wide.verdict == "inconclusive" and wide.ci_low < 1.1


def test_other_timing_protocols_are_refused_or_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same lines, recorded as timed by one process set: refused (exit 2, naming what
    differs), or with --allow-protocol-change every time verdict inconclusive."""
    one_process = doctored(tmp_path, "one", lambda lines: lines)
    suite_file = Path(one_process) / "suite.yaml"
    suite = yaml.safe_load(suite_file.read_text())
    suite["timing"]["processes"] = 1
    suite_file.write_text(yaml.safe_dump(suite, sort_keys=False))
    code, out, err = run_compare(capsys, str(QUIET_RUN), one_process)
    assert code == 2 and out == ""
    assert "timed under different protocols (timing.processes: baseline 3, current 1)" in err
    with pytest.raises(CompareInputError, match="timing.processes"):
        compare_runs(load_side(QUIET_RUN), load_side(one_process))
    comparison = compare_runs(load_side(QUIET_RUN), load_side(one_process), allow_protocol_change=True)
    assert all(c.time.verdict == "inconclusive" and "different protocols" in c.time.why for c in comparison.cases)
    code, out, _ = run_compare(capsys, str(QUIET_RUN), one_process, "--allow-protocol-change")
    assert code == 0 and "4 inconclusive" in out and "WARNING: timing.processes: baseline 3, current 1" in out
    assert run_compare(capsys, str(QUIET_RUN), one_process, "--allow-protocol-change", "--strict")[0] == 1
    # Memory alone does not depend on how time was sampled.
    assert run_compare(capsys, str(QUIET_RUN), one_process, "--memory-only")[0] == 0
