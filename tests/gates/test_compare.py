"""`dstbench compare`: time needs a crossed threshold and a significant test, memory is exact."""

from __future__ import annotations

from pathlib import Path

import pytest

from dstbench.cli import main
from dstbench.gates.compare import compare_runs, compare_time, load_side, min_p_value
from tests.gates.synthetic import BASE_MS, CPU_ENV, GPU_ENV, line, scaled, write_run


def _pair(tmp_path: Path, base_lines: list, cur_lines: list) -> tuple[str, str]:
    return (str(write_run(tmp_path / "base", base_lines)), str(write_run(tmp_path / "cur", cur_lines)))


def _compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["compare", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_30_percent_slower_regresses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, segment_ms=scaled(BASE_MS, 1.3))])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 1
    assert "REGRESSION: time" in out and "1.300x" in out and "1 regressed" in out


NOISY_MS = [92.0, 108.0, 97.0, 104.0, 99.0, 111.0, 90.0, 103.0, 95.0, 101.0]


def test_2_percent_slower_with_overlapping_samples_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Each current sample is a baseline sample 2% slower, shuffled: the two sets overlap.
    current = scaled(NOISY_MS[5:] + NOISY_MS[:5], 1.02)
    assert min(current) < max(NOISY_MS)
    base, cur = _pair(tmp_path, [line("rigl", 0.1, segment_ms=NOISY_MS)], [line("rigl", 0.1, segment_ms=current)])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0 and "0 regressed" in out
    # Even past a 1% threshold: the overlap makes the difference insignificant.
    code, out, _ = _compare(capsys, base, cur, "--time-threshold", "1")
    assert code == 0 and "1.020x" in out


def test_ratio_past_threshold_without_significance_is_inconclusive() -> None:
    # Median 15% higher, but the samples are so noisy that the test cannot tell them apart.
    base = [80.0, 100.0, 140.0, 90.0, 160.0, 70.0]
    cur = [115.0, 75.0, 150.0, 95.0, 170.0, 85.0]
    verdict = compare_time(base, cur, threshold_pct=10, alpha=0.05)
    assert verdict.ratio > 1.1 and verdict.p_value > 0.05
    assert verdict.verdict == "inconclusive"


def test_three_verdicts_on_synthetic_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Within the threshold: unchanged; beyond it and significant: regression; beyond it and not
    significant: inconclusive, shown and counted, exit 0 (1 under --strict)."""
    noisy_slow = [x * s for x, s in zip(NOISY_MS, [1.8, 0.9, 1.9, 0.8, 1.7, 1.0, 1.9, 0.95, 1.6, 0.85])]
    assert compare_time(NOISY_MS, scaled(NOISY_MS[5:] + NOISY_MS[:5], 1.02), threshold_pct=10, alpha=0.05).verdict == "unchanged"
    assert compare_time(BASE_MS, scaled(BASE_MS, 1.3), threshold_pct=10, alpha=0.05).verdict == "regression"
    inconclusive = compare_time(NOISY_MS, noisy_slow, threshold_pct=10, alpha=0.05)
    assert inconclusive.ratio > 1.1 and inconclusive.p_value >= 0.05 and inconclusive.verdict == "inconclusive"
    base, cur = _pair(
        tmp_path,
        [line("rigl", 0.1, segment_ms=NOISY_MS), line("set", 0.1), line("mest", 0.1)],
        [line("rigl", 0.1, segment_ms=noisy_slow), line("set", 0.1, segment_ms=scaled(BASE_MS, 1.3)), line("mest", 0.1)],
    )
    code, out, _ = _compare(capsys, base, cur)
    assert code == 1  # set regressed
    assert "INCONCLUSIVE: time" in out and "1 regressed, 0 improved, 1 inconclusive" in out
    assert "current very noisy" in out  # the noisy side is named in the notes
    base, cur = _pair(tmp_path / "2", [line("rigl", 0.1, segment_ms=NOISY_MS)], [line("rigl", 0.1, segment_ms=noisy_slow)])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0 and "0 regressed, 0 improved, 1 inconclusive" in out
    code, out, _ = _compare(capsys, base, cur, "--strict")
    assert code == 1 and "(--strict: a failure)" in out


def test_significant_change_under_threshold_passes_and_over_it_regresses() -> None:
    slower = scaled(BASE_MS, 1.05)
    under = compare_time(BASE_MS, slower, threshold_pct=10, alpha=0.05)
    assert under.p_value < 0.05 and under.verdict == "unchanged"
    assert compare_time(BASE_MS, slower, threshold_pct=3, alpha=0.05).verdict == "regression"


def test_faster_run_is_reported_as_improvement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, segment_ms=scaled(BASE_MS, 0.7))])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0
    assert "improved: time" in out and "1 improved" in out


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


def test_too_few_samples_are_flagged_as_ungated() -> None:
    verdict = compare_time([100.0, 101.0, 99.0], [200.0, 201.0, 199.0], threshold_pct=10, alpha=0.05)
    assert min_p_value(3, 3) == pytest.approx(0.1)
    assert verdict.verdict == "inconclusive" and "cannot reach" in verdict.note


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


def test_run_compared_with_itself_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = str(write_run(tmp_path / "run", [line("dense", 1.0), line("rigl", 0.1), line("barter", 0.1, status="oom")]))
    code, out, err = _compare(capsys, run, run, "--strict", "--memory-threshold", "0")
    assert code == 0, out + err
    assert "3 cases compared: 0 regressed, 0 improved" in out
    assert "not compared (oom -> oom)" in out


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
    assert code == 0
    assert "only in baseline (not compared): set@0.5" in out
    assert "only in current (not compared): barter@0.1" in out and "rigl@0.5" in out


def test_mismatched_environments_warn_and_fail_with_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = {**CPU_ENV, "torch": "2.5.0"}
    base, cur = _pair(tmp_path, [line("rigl", 0.1)], [line("rigl", 0.1, env=other)])
    code, out, _ = _compare(capsys, base, cur)
    assert code == 0
    assert "WARNING: torch version differs: baseline 2.14.1, current 2.5.0" in out
    code, out, _ = _compare(capsys, base, cur, "--strict")
    assert code == 2
    assert "ERROR: torch version differs" in out


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
