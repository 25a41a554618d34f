"""`dstbench compare`: a time change is a regression only when significantly beyond the threshold
(Holm-adjusted over the cases), unchanged only when its interval lies inside the band, a contended
side is inconclusive, memory is exact. The rule itself: tests/gates/test_equivalence.py."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from dstbench.cli import main
from dstbench.gates.compare import Comparison, case_basis, compare_runs
from dstbench.gates.sides import load_side
from dstbench.gates.comparison_text import render
from dstbench.results.intervals import BetweenProcesses, holm, interval, paired_units, summarize
from tests.gates.synthetic import BASE_MS, CPU_ENV, GPU_ENV, line, scaled, write_run


def _pair(tmp_path: Path, base_lines: list, cur_lines: list) -> tuple[str, str]:
    return (str(write_run(tmp_path / "base", base_lines)), str(write_run(tmp_path / "cur", cur_lines)))


def _compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["compare", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _runs(tmp_path: Path, base_lines: list, cur_lines: list, **settings: Any) -> Comparison:
    base, cur = _pair(tmp_path, base_lines, cur_lines)
    return compare_runs(load_side(base), load_side(cur), **settings)


def _time(comparison: Comparison, case: str):
    return next(c.time for c in comparison.cases if c.case == case)


NOISY_MS = [92.0, 108.0, 97.0, 104.0, 99.0, 111.0, 90.0, 103.0, 95.0, 101.0]
NOISY_SLOW = [x * s for x, s in zip(NOISY_MS, [1.8, 0.9, 1.9, 0.8, 1.7, 1.0, 1.9, 0.95, 1.6, 0.85])]


def _shuffled(samples: list[float], factor: float) -> list[float]:
    """Each sample `factor` slower, in another order: the two sets overlap as noise does."""
    return scaled(samples[5:] + samples[:5], factor)


# Tagged lines: one interleaved group, rounds 0..9, timed by two process sets of five rounds each.
PROCESS = [0] * 5 + [1] * 5
# Round-to-round jitter in logs (a few tenths of a percent: tight rounds).
J1 = [0.0, 0.004, -0.003, 0.002, -0.004, 0.003, -0.002, 0.001, -0.001, 0.0025]
J2 = [0.002, -0.001, 0.003, -0.004, 0.0, -0.002, 0.004, -0.003, 0.001, 0.0]
J3 = [-0.003, 0.001, 0.0, 0.004, -0.002, 0.002, -0.004, 0.003, 0.0015, -0.001]
J4 = J2[::-1]


def jittered(level: float, jitter: list[float], offsets: tuple[float, float] = (0.0, 0.0)) -> list[float]:
    """`level` ms per round, with the round's jitter and its process set's offset (in logs)."""
    return [level * math.exp(j + offsets[p]) for j, p in zip(jitter, PROCESS)]


def tagged(method: str, density: float, ms: list[float], group: str = "g0", **fields: Any) -> dict[str, Any]:
    return line(
        method, density, segment_ms=[round(x, 6) for x in ms], segment_group=[group] * len(ms),
        segment_round=list(range(len(ms))), segment_process=PROCESS[: len(ms)], **fields,
    )


def starved(*rounds: int, count: int = 10) -> dict[str, Any]:
    """A noise record with these segments starved, and the case-level flag left False."""
    return {"starved": [i in rounds for i in range(count)], "contended": False, "starved_segments": len(rounds)}


# --- time, absolute basis (untagged lines: one unit each) --------------------------------------------


def test_30_percent_slower_regresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, segment_ms=scaled(BASE_MS, 1.3))])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 1
    assert "REGRESSION: time" in out and "1.300x" in out and "1 regressed" in out
    # Untagged lines are one unit per side: the report says process offsets were not seen.
    assert "process offsets unseen" in out
    verdict = _time(compare_runs(load_side(base), load_side(cur)), "rigl@0.1")
    assert verdict.basis == "absolute" and verdict.ci_low > 1.1
    assert verdict.covers == "1 process x 10 rounds, within one process | 1 process x 10 rounds, within one process"


def test_2_percent_slower_with_overlapping_samples_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    current = _shuffled(NOISY_MS, 1.02)
    assert min(current) < max(NOISY_MS)
    base, cur = _pair(tmp_path, [line("rigl", 0.1, segment_ms=NOISY_MS)], [line("rigl", 0.1, segment_ms=current)])
    # Its 90% interval [0.95, 1.09] lies inside a 10% band: unchanged.
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0 and "0 regressed" in out and "0 inconclusive" in out
    verdict = _time(compare_runs(load_side(base), load_side(cur)), "rigl@0.1")
    assert verdict.verdict == "unchanged" and 0.9 < verdict.ci_low < 1.0 < verdict.ci_high < 1.1
    # Not inside a 5% band, nor shown beyond it: inconclusive, with how many samples would decide.
    code, out, _ = _compare(capsys, base, cur, "--time-threshold", "5")
    assert code == 0 and "1.020x" in out and "1 inconclusive" in out and "the samples would decide it" in out
    # Past a 1% threshold: the overlap makes the difference insignificant, so not a regression.
    code, out, _ = _compare(capsys, base, cur, "--time-threshold", "1")
    assert code == 0 and "1.020x" in out and "1 inconclusive" in out


def test_ratio_past_threshold_without_significance_is_inconclusive(tmp_path: Path) -> None:
    # Median 10% higher, but the samples are so noisy that the runs cannot be told apart.
    base = [80.0, 100.0, 140.0, 90.0, 160.0, 70.0]
    cur = [115.0, 75.0, 150.0, 95.0, 170.0, 85.0]
    verdict = _time(_runs(tmp_path, [line("rigl", 0.1, segment_ms=base)], [line("rigl", 0.1, segment_ms=cur)],
                          time_threshold=5), "rigl@0.1")
    assert verdict.ratio > 1.05 and verdict.p_value > 0.05
    assert verdict.ci_low < 1.0 < verdict.ci_high
    assert verdict.verdict == "inconclusive" and "reaches past +/-5%" in verdict.why


def test_three_verdicts_on_synthetic_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its interval inside the band: unchanged; significantly beyond it: regression; neither:
    inconclusive, shown and counted, exit 0 (1 under --strict)."""
    comparison = _runs(
        tmp_path,
        [line("rigl", 0.1, segment_ms=NOISY_MS), line("set", 0.1), line("mest", 0.1)],
        [line("rigl", 0.1, segment_ms=NOISY_SLOW), line("set", 0.1, segment_ms=scaled(BASE_MS, 1.3)),
         line("mest", 0.1, segment_ms=_shuffled(BASE_MS, 1.02))],
    )
    assert _time(comparison, "mest@0.1").verdict == "unchanged"
    assert _time(comparison, "set@0.1").verdict == "regression"
    noisy = _time(comparison, "rigl@0.1")
    assert noisy.ratio > 1.1 and noisy.p_value >= 0.05 and noisy.verdict == "inconclusive"
    base, cur = str(tmp_path / "base"), str(tmp_path / "cur")
    code, out, _ = _compare(capsys, base, cur)
    assert code == 1  # set regressed
    assert "INCONCLUSIVE: time (its 90% interval reaches past +/-10%" in out
    assert "3 cases compared: 1 regressed, 0 improved, 1 inconclusive" in out
    assert "current very noisy" in out  # the noisy side is named in the notes
    base, cur = _pair(tmp_path / "2", [line("rigl", 0.1, segment_ms=NOISY_MS)], [line("rigl", 0.1, segment_ms=NOISY_SLOW)])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0 and "0 regressed, 0 improved, 1 inconclusive" in out
    code, out, _ = _compare(capsys, base, cur, "--strict")
    assert code == 1 and "(--strict: a failure)" in out and "rigl@0.1 (time inconclusive, --strict)" in out


def test_significant_change_under_threshold_passes_and_over_it_regresses(tmp_path: Path) -> None:
    lines = [line("rigl", 0.1)], [line("rigl", 0.1, segment_ms=scaled(BASE_MS, 1.05))]
    under = _time(_runs(tmp_path / "10", *lines, time_threshold=10), "rigl@0.1")
    assert under.ci_low > 1.0 and under.ratio == pytest.approx(1.05) and under.verdict == "unchanged"
    assert _time(_runs(tmp_path / "3", *lines, time_threshold=3), "rigl@0.1").verdict == "regression"


def test_faster_run_is_reported_as_improvement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, segment_ms=scaled(BASE_MS, 0.7))])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0
    assert "improved: time" in out and "1 improved" in out


def test_too_few_samples_are_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One segment a side has no spread: twice as slow, but no interval, so no verdict either way.
    base, cur = _pair(tmp_path, [line("rigl", 0.1, segment_ms=[100.0])], [line("rigl", 0.1, segment_ms=[200.0])])
    verdict = _time(compare_runs(load_side(base), load_side(cur)), "rigl@0.1")
    assert verdict.verdict == "inconclusive" and verdict.why == "too few samples for an interval"
    assert math.isnan(verdict.ratio) and math.isnan(verdict.p_raw)
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0 and "INCONCLUSIVE: time (too few samples for an interval)" in out
    assert "Holm-adjusted over 0 cases" in out  # no test was made
    assert _compare(capsys, base, cur, "--strict")[0] == 1


# --- time, relative basis (tagged lines: rounds paired with the run's dense) -------------------------


def _shifted_runs() -> tuple[list, list]:
    """The current run 8% slower for dense and rigl alike, round by round (a machine shift)."""
    base = [tagged("dense", 1.0, jittered(100, J1)), tagged("rigl", 0.1, jittered(80, J2))]
    cur = [tagged("dense", 1.0, jittered(108, J3)), tagged("rigl", 0.1, jittered(80 * 1.08, J1))]
    return base, cur


def test_relative_basis_cancels_a_machine_shift_and_gates_the_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rigl's time relative to dense is unchanged; dense, judged on its own times, is 8% slower, as
    every case is: a shift every case shares, a failure unless --accept-machine-shift."""
    base, cur = _pair(tmp_path, *_shifted_runs())
    comparison = compare_runs(load_side(base), load_side(cur), time_threshold=5)
    rigl, dense = _time(comparison, "rigl@0.1"), _time(comparison, "dense@1")
    assert rigl.basis == "relative" and rigl.verdict == "unchanged" and rigl.ratio == pytest.approx(1.0, abs=0.005)
    assert rigl.covers == "2 processes x 5 rounds | 2 processes x 5 rounds"
    assert dense.basis == "absolute" and dense.reference and dense.verdict == "regression"
    assert dense.ratio == pytest.approx(1.08, abs=0.005)
    assert rigl.baseline_ms == pytest.approx(80, rel=0.01) and rigl.current_ms == pytest.approx(86.4, rel=0.01)
    (shift,) = comparison.shifts
    assert shift.shared and shift.case_ratios["rigl@0.1"] == pytest.approx(1.08, abs=0.005)
    code, out, _ = _compare(capsys, base, cur, "--time-threshold", "5")
    assert code == 1 and "1 regressed" in out and "FAIL: dense@1 (time)" in out
    assert "TIME REFERENCE: every case 1.08x to 1.08x slower on its own times, dense included (dense@1 1.08" in out
    assert "a machine shift or a change to the common training step" in out
    assert "process offsets unseen" not in out  # both runs have two process sets per case
    code, out, _ = _compare(capsys, base, cur, "--time-threshold", "5", "--accept-machine-shift")
    assert code == 0 and "0 regressed" in out and "accepted (--accept-machine-shift)" in out
    assert "ok (a shift of every case, accepted: --accept-machine-shift)" in out
    # The same runs judged on their own times: the shift is a regression of every case.
    comparison = compare_runs(load_side(base), load_side(cur), time_threshold=5, time_basis="absolute")
    for case in ("rigl@0.1", "dense@1"):
        verdict = _time(comparison, case)
        assert verdict.basis == "absolute" and verdict.verdict == "regression"
        assert verdict.ratio == pytest.approx(1.08, abs=0.005)
    code, out, _ = _compare(capsys, base, cur, "--time-threshold", "5", "--time-basis", "absolute")
    assert code == 1 and "2 regressed" in out


def test_a_side_timed_in_one_process_set_decides_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """rigl 30% slower, dense unchanged: with two process sets per case a regression; with every
    case timed by one process set (an A/A of one run's two sets looks like this), the interval
    holds the within-process spread only, and the verdict is inconclusive, naming timing.processes."""
    def runs(process: list[int]) -> tuple[list, list]:
        def one(method: str, density: float, ms: list[float]) -> dict[str, Any]:
            return {**tagged(method, density, ms), "segment_process": process}
        base = [one("dense", 1.0, jittered(100, J1)), one("rigl", 0.1, jittered(80, J2))]
        cur = [one("dense", 1.0, jittered(100, J3)), one("rigl", 0.1, jittered(80 * 1.3, J4))]
        return base, cur

    assert _time(_runs(tmp_path / "two", *runs(PROCESS)), "rigl@0.1").verdict == "regression"
    base, cur = _pair(tmp_path / "one", *runs([0] * 10))
    rigl = _time(compare_runs(load_side(base), load_side(cur)), "rigl@0.1")
    assert rigl.verdict == "inconclusive" and "timing.processes >= 2" in rigl.why and rigl.ratio == pytest.approx(1.3, abs=0.01)
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0 and "0 regressed" in out and "REGRESSION" not in out


def test_relative_basis_still_sees_a_slowdown_of_the_case_alone(tmp_path: Path) -> None:
    base, _ = _shifted_runs()
    cur = [tagged("dense", 1.0, jittered(100, J3)), tagged("rigl", 0.1, jittered(80 * 1.08, J1))]
    rigl = _time(_runs(tmp_path, base, cur, time_threshold=5), "rigl@0.1")
    assert rigl.basis == "relative" and rigl.verdict == "regression" and rigl.ratio == pytest.approx(1.08, abs=0.005)


def test_case_basis_under_auto(tmp_path: Path) -> None:
    base, cur = _pair(tmp_path, *_shifted_runs())
    baseline, current = load_side(base), load_side(cur)
    keys = {v["method"]: k for k, v in baseline.cases.items()}
    assert case_basis(baseline, current, keys["rigl"], "auto") == "relative"
    assert case_basis(baseline, current, keys["dense"], "auto") == "relative"  # dense: the reference
    assert case_basis(baseline, current, keys["rigl"], "absolute") == "absolute"
    # Without a dense in one of the runs, a case is judged on its own times.
    _, cur = _pair(tmp_path / "nodense", [], [tagged("rigl", 0.1, jittered(80, J1))])
    assert case_basis(baseline, load_side(cur), keys["rigl"], "auto") == "absolute"


def _offset_runs(offset: float, shift: float) -> list[dict[str, Any]]:
    """Dense and four cases; each case's rounds relative to dense at 0.8 * `shift`, the second
    process set's `offset` (in logs) slower than the first's."""
    dense = jittered(100, J1)
    lines = [tagged("dense", 1.0, dense)]
    for method, jitter in zip(("rigl", "set", "mest", "snip"), (J1, J2, J3, J4)):
        relative = jittered(0.8 * shift, jitter, (0.0, offset))
        lines.append(tagged(method, 0.1, [d * r for d, r in zip(dense, relative)]))
    return lines


def test_process_offsets_widen_the_interval(tmp_path: Path) -> None:
    """A 4% change is not significant when the baseline's process sets differ by 4% (seen in
    every case, so pooled over the run); the same change with no offsets and tight rounds is."""
    # Both baselines are 0.8 * e^0.02 relative to dense (the mean of the two sets' medians).
    current = _offset_runs(0.0, math.exp(0.02) * 1.04)
    offsets = _runs(tmp_path / "offsets", _offset_runs(0.04, 1.0), current, time_threshold=3)
    tight = _runs(tmp_path / "tight", _offset_runs(0.0, math.exp(0.02)), current, time_threshold=3)
    for case in ("rigl@0.1", "set@0.1", "mest@0.1", "snip@0.1"):
        wide, narrow = _time(offsets, case), _time(tight, case)
        assert wide.ratio == pytest.approx(1.04, abs=0.002) and narrow.ratio == pytest.approx(1.04, abs=0.002)
        assert wide.p_raw > 0.05 and wide.ci_low < 1.0 < wide.ci_high
        assert wide.verdict == "inconclusive"
        assert narrow.p_value < 0.001 and narrow.ci_low > 1.03 and narrow.verdict == "regression"
    assert not offsets.regressed and len(tight.regressed) == 4
    # Judged within the processes alone, the offset baseline's rounds are tight: the between-process
    # part is what widens the interval.
    baseline = load_side(tmp_path / "offsets" / "base")
    lines = {v["method"]: v for v in baseline.cases.values()}
    summary = summarize(paired_units(lines["rigl"], lines["dense"]))
    within = interval(summary, BetweenProcesses())
    assert within.high / within.low < 1.02 and within.covers.endswith("within one process")


# --- contention ----------------------------------------------------------------------------------------


def test_a_slowdown_timed_under_contention_is_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 3x slower and significant, but the current side was starved: the machine, not the code.
    contended = {"contended": True, "starved_segments": 10}
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, segment_ms=scaled(BASE_MS, 3.0), noise=contended)])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0 and "0 regressed" in out and "1 inconclusive" in out
    assert "current contended (10 segments starved)" in out and "timed under contention" in out
    code, _, _ = _compare(capsys, base, cur, "--strict")
    assert code == 1
    # Memory is exact and still gates a contended case.
    _, cur2 = _pair(tmp_path / "m", [line("rigl", 0.1)], [line("rigl", 0.1, state_bytes=2_000_000, noise=contended)])
    code, out, _ = _compare(capsys, base, cur2)
    assert code == 1 and "REGRESSION" in out


def test_a_quarter_of_the_rounds_starved_is_inconclusive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """3 of 10 baseline segments starved (the case-level flag False): a real 12% slowdown is
    inconclusive, never a regression; 2 of 10 are not contention, and the slowdown regresses."""
    base, cur = _pair(tmp_path, [line("rigl", 0.1, noise=starved(0, 1, 2))], [line("rigl", 0.1, segment_ms=scaled(BASE_MS, 1.12))])
    verdict = _time(compare_runs(load_side(base), load_side(cur)), "rigl@0.1")
    assert verdict.ratio > 1.1 and verdict.p_raw < 0.01  # the numbers alone would say regression
    assert verdict.verdict == "inconclusive" and "contention" in verdict.why
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0 and "0 regressed, 0 improved, 1 inconclusive" in out
    assert "INCONCLUSIVE: time (timed under contention: the change is not attributed)" in out
    assert _compare(capsys, base, cur, "--strict")[0] == 1
    base, cur = _pair(tmp_path / "2", [line("rigl", 0.1, noise=starved(8, 9))], [line("rigl", 0.1, segment_ms=scaled(BASE_MS, 1.12))])
    assert _time(compare_runs(load_side(base), load_side(cur)), "rigl@0.1").verdict == "regression"
    assert _compare(capsys, base, cur)[0] == 1


def test_a_contended_side_without_change_is_inconclusive_not_unchanged(tmp_path: Path) -> None:
    verdict = _time(_runs(tmp_path, [line("rigl", 0.1, noise=starved(0, 1, 2))], [line("rigl", 0.1)]), "rigl@0.1")
    assert verdict.ratio == pytest.approx(1.0, abs=0.02)
    assert verdict.verdict == "inconclusive" and verdict.why
    # The same on the current side.
    verdict = _time(_runs(tmp_path / "cur", [line("rigl", 0.1)], [line("rigl", 0.1, noise=starved(3, 5, 7))]), "rigl@0.1")
    assert verdict.verdict == "inconclusive"


def test_starved_rounds_of_the_case_and_its_dense_add_up(tmp_path: Path) -> None:
    """Relative basis: 2 rounds starved in dense and 2 others in the case are 4 of the 10 rounds
    paired, contended though neither line is on its own; starved in the same round, 1 of 10 is not."""
    cur = [tagged("dense", 1.0, jittered(100, J3)), tagged("rigl", 0.1, jittered(80 * 1.12, J1))]
    apart = [tagged("dense", 1.0, jittered(100, J1), noise=starved(0, 1)),
             tagged("rigl", 0.1, jittered(80, J2), noise=starved(2, 3))]
    verdict = _time(_runs(tmp_path / "apart", apart, cur), "rigl@0.1")
    assert verdict.basis == "relative" and verdict.ratio > 1.1
    assert verdict.verdict == "inconclusive" and "contention" in verdict.why
    shared = [tagged("dense", 1.0, jittered(100, J1), noise=starved(0)),
              tagged("rigl", 0.1, jittered(80, J2), noise=starved(0))]
    assert _time(_runs(tmp_path / "shared", shared, cur), "rigl@0.1").verdict == "regression"


def test_contended_within_one_group_is_inconclusive(tmp_path: Path) -> None:
    # Two groups of ten rounds; 3 starved in one of them: 15% of all, but 30% of that group.
    def two_groups(ms: list[float], flags: list[bool]) -> dict[str, Any]:
        return line(
            "rigl", 0.1, segment_ms=ms + ms, segment_group=["g0"] * 10 + ["g1"] * 10,
            segment_round=list(range(10)) * 2, segment_process=PROCESS * 2,
            noise={"starved": flags, "contended": False, "starved_segments": sum(flags)},
        )
    slow = scaled(BASE_MS, 1.12)
    clean = [False] * 20
    in_one = [i in (0, 1, 2) for i in range(20)]
    spread = [i in (0, 1, 12) for i in range(20)]
    assert _time(_runs(tmp_path / "one", [two_groups(BASE_MS, in_one)], [two_groups(slow, clean)]), "rigl@0.1").verdict == "inconclusive"
    assert _time(_runs(tmp_path / "spread", [two_groups(BASE_MS, spread)], [two_groups(slow, clean)]), "rigl@0.1").verdict == "regression"


# --- the family of tests: Holm --------------------------------------------------------------------------


def test_holm_adjusts_in_input_order() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([]) == []
    assert holm([0.02]) == pytest.approx([0.02])
    assert holm([0.5, 0.4, 0.001]) == pytest.approx([0.8, 0.8, 0.003])  # capped at 1, monotone
    p = [0.3, 0.001, 0.04, 0.02, 0.9, 0.011]
    adjusted = holm(p)
    assert all(a >= raw for a, raw in zip(adjusted, p)) and max(adjusted) <= 1.0
    order = sorted(range(len(p)), key=p.__getitem__)
    assert [adjusted[i] for i in order] == sorted(adjusted)  # the ranks of the raw p-values kept
    assert holm([0.6, 0.7]) == [1.0, 1.0]


def _noisy_case(method: str, factor: float) -> tuple[dict, dict]:
    return line(method, 0.1, segment_ms=NOISY_MS), line(method, 0.1, segment_ms=_shuffled(NOISY_MS, factor))


def test_holm_over_the_cases_keeps_a_lone_small_p_from_regressing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 13% slowdown with raw p about 0.035 (against 1.05) regresses alone at a 5% threshold;
    among 16 cases (15 of them unchanged) its adjusted p is 16 times that: inconclusive."""
    base, cur = _noisy_case("rigl", 1.13)
    alone = _time(_runs(tmp_path / "alone", [base], [cur], time_threshold=5), "rigl@0.1")
    assert 0.02 < alone.p_raw < 0.05 and alone.p_value == alone.p_raw and alone.verdict == "regression"
    others = [line(f"m{i:02d}", 0.1) for i in range(15)]
    many = _runs(tmp_path / "many", [base, *others], [cur, *others], time_threshold=5)
    verdict = _time(many, "rigl@0.1")
    assert verdict.p_raw == pytest.approx(alone.p_raw)
    assert verdict.p_value == pytest.approx(min(1.0, 16 * alone.p_raw)) and verdict.p_value >= 0.05
    assert verdict.verdict == "inconclusive" and not many.regressed
    assert "lies beyond +/-5% but not after Holm over the cases" in verdict.why
    assert many.settings["tests"] == 16
    assert all(_time(many, f"m{i:02d}@0.1").verdict == "unchanged" for i in range(15))
    code, out, _ = _compare(capsys, str(tmp_path / "many" / "base"), str(tmp_path / "many" / "cur"), "--time-threshold", "5")
    assert code == 0 and "Holm-adjusted over 16 cases" in out and "1 inconclusive" in out


# --- the report ------------------------------------------------------------------------------------------


def test_gates_line_names_the_basis_and_the_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, *_shifted_runs())
    baseline, current = load_side(base), load_side(cur)
    text = render(compare_runs(baseline, current))
    assert ("gates: time (relative to each run's dense where both have it, dense on its own times, else absolute, "
            "across processes): changed when beyond +/-10% at one-sided p < 0.05, Holm-adjusted over 2 cases; unchanged "
            "when the 90% interval lies inside +/-10% (two one-sided tests); memory +/-1%") in text
    text = render(compare_runs(baseline, current, time_basis="absolute", time_threshold=5, alpha=0.01))
    assert "gates: time (absolute, across processes): changed when beyond +/-5% at one-sided p < 0.01, Holm-adjusted over 2 cases" in text
    assert "unchanged when the 98% interval lies inside +/-5%" in text and "change [98% CI]" in text
    text = render(compare_runs(baseline, current, time_basis="relative"))
    assert "gates: time (relative to each run's dense, dense on its own times, across processes): changed when beyond +/-10%" in text
    code, out, _ = _compare(capsys, base, cur, "--time-basis", "absolute", "--time-threshold", "5")
    assert "time (absolute, across processes): changed when beyond +/-5% at one-sided p < 0.05, Holm-adjusted over 2 cases" in out
    # Memory alone: no time gate in the line.
    text = render(compare_runs(baseline, current, memory_only=True))
    assert "gates: memory +/-1%" in text and "Holm" not in text


# --- memory ----------------------------------------------------------------------------------------------


def test_memory_5_percent_higher_regresses_at_2_percent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("barter", 0.1, state_bytes=1_000_000)], [line("barter", 0.1, state_bytes=1_050_000)])
    code, out, _ = _compare(capsys, base, cur, "--memory-threshold", "2", "--memory-only")
    assert code == 1
    assert "REGRESSION: state" in out and "+5.00%" in out
    assert "time (median" not in out  # --memory-only leaves time out
    code, out, _ = _compare(capsys, base, cur, "--memory-threshold", "6")
    assert code == 0


@pytest.mark.parametrize("field", ["activation_bytes", "peak_memory_bytes"])
def test_other_memory_figures_are_gated(field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {"peak_memory_bytes": 2_000_000, "activation_bytes": 500_000}
    after = {**before, field: int(before[field] * 1.05)}
    base, cur = _pair(tmp_path, [line("rigl", 0.1, env=GPU_ENV, **before)], [line("rigl", 0.1, env=GPU_ENV, **after)])
    code, out, _ = _compare(capsys, base, cur, "--memory-threshold", "2")
    assert code == 1
    assert f"REGRESSION: {field.split('_')[0]}" in out


def test_memory_is_exact_at_zero_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1, activation_bytes=500_000)], [line("rigl", 0.1, activation_bytes=500_001)])
    assert _compare(capsys, base, cur, "--memory-threshold", "0", "--memory-only")[0] == 1
    assert _compare(capsys, base, cur, "--memory-only")[0] == 0  # the default 1% tolerates one byte


def test_memory_measured_on_one_side_only_is_noted(tmp_path: Path) -> None:
    comparison = _runs(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, activation_bytes=None)])
    case = comparison.cases[0]
    assert "activation bytes measured on one side only" in case.notes
    assert [m.metric for m in case.memory] == ["state"]


# --- statuses, one-sided cases, notes --------------------------------------------------------------------


def test_run_compared_with_itself_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [tagged("dense", 1.0, jittered(100, J1)), tagged("rigl", 0.1, jittered(80, J2)), line("barter", 0.1, status="oom")]
    run = str(write_run(tmp_path / "run", lines))
    code, out, err = _compare(capsys, run, run, "--strict", "--memory-threshold", "0")
    assert code == 0, out + err
    assert "3 cases compared: 0 regressed, 0 improved, 0 inconclusive" in out
    assert "not compared (oom -> oom)" in out
    assert _time(compare_runs(load_side(run), load_side(run)), "rigl@0.1").p_raw == pytest.approx(1.0)


def test_untagged_run_compared_with_itself_passes_under_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Lines written before interleaving (no group or round tags), dense among them.
    run = str(write_run(tmp_path / "run", [line("dense", 1.0), line("rigl", 0.1), line("barter", 0.1, status="oom")]))
    code, out, err = _compare(capsys, run, run, "--strict", "--memory-threshold", "0")
    assert code == 0, out + err
    assert "3 cases compared: 0 regressed, 0 improved, 0 inconclusive" in out


def test_case_that_now_fails_regresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, status="oom")])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 1 and "REGRESSION: status oom" in out
    code, out, _ = _compare(capsys, cur, base)
    assert code == 0 and "improved: status oom -> ok" in out


def test_cases_on_one_side_are_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(
        tmp_path, [line("rigl", 0.1), line("set", 0.5)], [line("rigl", 0.1), line("barter", 0.1), line("rigl", 0.5)]
    )
    code, out, _ = _compare(capsys, base, cur)
    assert code == 1 and "FAIL: set@0.5 (missing from the current run)" in out
    assert "MISSING from the current run (a failure; --allow-missing accepts it): set@0.5" in out
    assert "only in current (not compared): barter@0.1" in out and "rigl@0.5" in out
    code, out, _ = _compare(capsys, base, cur, "--allow-missing")
    assert code == 0 and "only in baseline (allowed: --allow-missing): set@0.5" in out
    # Extra cases in the current run fail nothing.
    assert _compare(capsys, cur, cur)[0] == 0
    code, out, _ = _compare(capsys, *_pair(tmp_path / "extra", [line("rigl", 0.1)], [line("rigl", 0.1), line("set", 0.5)]))
    assert code == 0 and "only in current (not compared): set@0.5" in out


def test_changed_method_parameters_are_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1, params={"alpha": 0.3})], [line("rigl", 0.1, params={"alpha": 0.5})])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0 and "method parameters differ" in out
    same = _runs(tmp_path / "same", [line("rigl", 0.1, params={"alpha": 0.3})], [line("rigl", 0.1, params={"alpha": 0.3})])
    assert "method parameters differ" not in same.cases[0].notes


def test_mismatched_environments_warn_and_fail_with_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = {**CPU_ENV, "torch": "2.5.0"}
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, env=other)])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0
    assert "WARNING: torch version differs: baseline 2.14.1, current 2.5.0" in out
    code, out, _ = _compare(capsys, base, cur, "--strict")
    assert code == 2
    assert "ERROR: torch version differs" in out


def test_what_moves_cpu_times_is_an_environment_difference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Another host, thread count or OpenMP setting: named (and an error under --strict); another CPU
    is one line, not two (on a CPU the device is the CPU)."""
    here = {**CPU_ENV, "hostname": "vm", "threads": 2, "OMP_NUM_THREADS": None, "OMP_WAIT_POLICY": None}
    there = {**here, "hostname": "runner-7", "threads": 1, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    base, cur = _pair(tmp_path, [line("rigl", 0.1, env=here)], [line("rigl", 0.1, env=there)])
    differences = compare_runs(load_side(base), load_side(cur)).env_differences
    assert differences == [
        "host differs: baseline vm, current runner-7", "intra-op threads differs: baseline 2, current 1",
        "OMP_NUM_THREADS differs: baseline None, current 1", "OMP_WAIT_POLICY differs: baseline None, current PASSIVE",
    ]
    assert _compare(capsys, base, cur, "--strict")[0] == 2
    other_cpu = {**here, "cpu_model": "Other CPU", "device_name": "Other CPU"}
    base, cur = _pair(tmp_path / "cpu", [line("rigl", 0.1, env=here)], [line("rigl", 0.1, env=other_cpu)])
    assert compare_runs(load_side(base), load_side(cur)).env_differences == [
        "GPU/CPU model differs: baseline Test CPU, current Other CPU"]


def test_different_device_is_detected(tmp_path: Path) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, env=GPU_ENV)])
    differences = compare_runs(load_side(base), load_side(cur)).env_differences
    assert any(d.startswith("device differs: baseline cpu, current cuda") for d in differences)
    assert any(d.startswith("GPU/CPU model differs") for d in differences)


def test_markdown_is_written_for_a_ci_comment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, segment_ms=scaled(BASE_MS, 1.3))])
    md = tmp_path / "comment" / "compare.md"
    code, _, _ = _compare(capsys, base, cur, "--markdown", str(md))
    text = md.read_text()
    assert code == 1
    assert text.startswith("## dstbench compare")
    assert "- gates: time (" in text and "Holm-adjusted over 1 cases" in text
    assert "| case " in text and "|---" in text.replace(" ", "").replace(":", "")
    assert "REGRESSION: time" in text
    # The verdict a pull request reads first, as the exit code gives it.
    assert text.rstrip().endswith("**Verdict: FAIL: rigl@0.1 (time)**")
    same = tmp_path / "same.md"
    assert _compare(capsys, base, base, "--markdown", str(same))[0] == 0
    assert same.read_text().rstrip().endswith("**Verdict: PASS: no regression in 1 cases**")


@pytest.mark.parametrize("broken", ["missing_dir", "missing_results", "missing_run_json", "empty_results"])
def test_unusable_input_exits_2(broken: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = str(write_run(tmp_path / "good", [line("rigl", 0.1)]))
    bad = write_run(tmp_path / "bad", [line("rigl", 0.1)])
    if broken == "missing_dir":
        bad = tmp_path / "nowhere"
    elif broken == "missing_results":
        (bad / "results.jsonl").unlink()
    elif broken == "missing_run_json":
        (bad / "run.json").unlink()
    else:
        (bad / "results.jsonl").write_text("")
    code, out, err = _compare(capsys, good, str(bad))
    assert code == 2 and out == ""
    assert str(bad) in err


def test_no_matching_case_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, suite_hash="fedcba9876543210")])
    code, _, err = _compare(capsys, base, cur)
    assert code == 2
    assert "no case matches" in err and "fedcba9876543210" in err and "new baseline" in err


def test_bad_threshold_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1)])
    assert _compare(capsys, base, cur, "--alpha", "1.5")[0] == 2
    assert _compare(capsys, base, cur, "--time-threshold", "-1")[0] == 2
