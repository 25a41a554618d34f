"""Suite expectations: each passes or fails with the case and by how much; `dstbench check` exits 1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dstbench.cli import main
from dstbench.results.expectations import check_expectations, describe
from dstbench.suite.loading import SuiteError, parse_suite
from tests.conftest import micro_suite
from tests.gates.synthetic import BASE_MS, line, scaled, write_run

# Labels of the one built-in method stand in for the methods being gated (only names matter here).
METHODS = [{"name": "dense"}] + [{"name": "dense", "label": m} for m in ("rigl", "barter", "set")]


def _suite(expect: list[dict[str, Any]], reference: str = "rigl") -> dict[str, Any]:
    return micro_suite(methods=METHODS, densities=[0.1, 0.5], reference=reference, expect=expect)


def _lines() -> list[dict[str, Any]]:
    """rigl at 100 ms, barter 4x faster with 20% of its memory, set as slow as rigl."""
    return [
        line("dense", 1.0, segment_ms=scaled(BASE_MS, 0.9), state_bytes=4_000_000, activation_bytes=1_000_000, top1=0.80),
        line("rigl", 0.1, state_bytes=4_000_000, activation_bytes=1_000_000, top1=0.70),
        line("barter", 0.1, segment_ms=scaled(BASE_MS, 0.25), state_bytes=800_000, activation_bytes=200_000,
             density_achieved=0.1005, top1=0.74, kind="compact"),
        line("set", 0.1, state_bytes=4_000_000, activation_bytes=1_000_000, density_achieved=0.13, top1=0.69),
    ]


def _check(expect: list[dict[str, Any]], lines: list[dict[str, Any]] | None = None, reference: str = "rigl") -> list:
    suite = parse_suite(_suite(expect, reference))
    frame = pd.DataFrame([{**x, "run": "r"} for x in (lines or _lines())])
    return check_expectations(suite, frame)


def _lines_of(outcomes: list) -> list[str]:
    return [describe(o, "rigl") for o in outcomes]


def test_speedup_passes_and_fails_by_how_much() -> None:
    [ok] = _check([{"metric": "speedup", "method": "barter", "vs": "rigl", "density": 0.1, "min": 3.0}])
    assert ok.passed and ok.value == pytest.approx(4.0)
    [bad] = _check([{"metric": "speedup", "method": "barter", "density": 0.1, "min": 5.0}])
    assert not bad.passed
    assert _lines_of([bad]) == ["FAIL  speedup barter@0.1 vs rigl: 4 < min 5 (short by 1)"]


def test_speedup_may_gate_on_an_end_of_its_interval() -> None:
    # barter's samples are rigl's / 4 with their spread: the interval is narrow around 4 but not a point.
    lines = _lines()
    lines[2]["segment_ms"] = scaled(BASE_MS[::-1], 0.25)
    [low] = _check([{"metric": "speedup", "method": "barter", "density": 0.1, "min": 3.99, "bound": "ci_low"}], lines)
    [point] = _check([{"metric": "speedup", "method": "barter", "density": 0.1, "min": 3.99}], lines)
    assert point.passed and not low.passed and low.value < point.value
    assert _lines_of([low])[0].startswith("FAIL  speedup (ci low of its 95% CI) barter@0.1 vs rigl: ")
    [high] = _check([{"metric": "speedup", "method": "barter", "density": 0.1, "max": 4.5, "bound": "ci_high"}], lines)
    assert high.passed and high.value > point.value
    with pytest.raises(SuiteError, match="expect.0.bound: only speedup"):
        parse_suite(_suite([{"metric": "state_ratio", "method": "barter", "max": 1, "bound": "ci_low"}]))


def test_memory_reduction_and_max_bound() -> None:
    [ok] = _check([{"metric": "memory_reduction", "method": "barter", "density": 0.1, "min": 0.75}])
    assert ok.passed and ok.value == pytest.approx(0.8)
    [bad] = _check([{"metric": "state_ratio", "method": "barter", "density": 0.1, "max": 0.1}])
    assert not bad.passed and "0.2 > max 0.1 (over by 0.1)" in bad.message


def test_density_achieved_tolerance_over_every_method() -> None:
    outcomes = _check([{"metric": "density_achieved", "method": "*", "tolerance": 0.01}])
    by_case = {o.case: o for o in outcomes}
    assert set(by_case) == {"dense@1", "rigl@0.1", "barter@0.1", "set@0.1"}  # the reference too
    assert by_case["barter@0.1"].passed
    assert not by_case["set@0.1"].passed
    assert by_case["set@0.1"].message == "achieved 0.1300, target 0.1, |error| 0.0300 > 0.01"


def test_wildcard_skips_cases_without_a_comparison_partner() -> None:
    outcomes = _check([{"metric": "speedup", "method": "*", "min": 0.5}])
    # rigl is the reference (not gated against itself); dense@1 has no rigl@1 to compare with.
    assert sorted(o.case for o in outcomes) == ["barter@0.1", "set@0.1"]
    assert all(o.passed for o in outcomes)


def test_named_case_without_reference_fails() -> None:
    [bad] = _check([{"metric": "speedup", "method": "dense", "min": 0.5}])
    assert not bad.passed and bad.message == "no ok rigl case at density 1 to compare with"


def test_top1_drop_is_against_dense_by_default() -> None:
    [drop] = _check([{"metric": "top1_drop", "method": "barter", "max": 0.05}])
    assert drop.value == pytest.approx(0.06)
    assert not drop.passed  # 0.80 - 0.74 = 0.06 > 0.05
    assert _lines_of([drop])[0].startswith("FAIL  top1_drop barter@0.1 vs dense: 0.06 > max 0.05")
    # top1 is absolute: the suite's reference is gated too.
    outcomes = _check([{"metric": "top1", "method": "*", "min": 0.7}])
    assert {o.case: o.passed for o in outcomes} == {"dense@1": True, "rigl@0.1": True, "barter@0.1": True, "set@0.1": False}


def test_failed_case_and_missing_case_fail() -> None:
    lines = _lines()
    lines[2] = line("barter", 0.1, status="oom")
    [oom] = _check([{"metric": "speedup", "method": "barter", "min": 3.0}], lines)
    assert not oom.passed and oom.message == "case status is oom"
    # A suite method and density that never ran (an interrupted run): nothing to gate is a failure.
    [nothing] = _check([{"metric": "speedup", "method": "barter", "density": 0.5, "min": 3.0}])
    assert not nothing.passed and nothing.message == "no case matches 'barter' at density 0.5"


@pytest.mark.parametrize(
    "expectation, key, fragment",
    [
        ({"metric": "speedup", "method": "chase", "min": 3.0}, "expect.0.method", "'chase' is not a method of the suite"),
        ({"metric": "speedup", "method": "barter", "vs": "rigl2", "min": 3.0}, "expect.0.vs", "'rigl2' is not a method"),
        ({"metric": "speedup", "method": "barter"}, "expect.0", "needs `min` and/or `max`"),
        ({"metric": "speedup", "method": "barter", "min": 3, "max": 2}, "expect.0", "min 3 is above max 2"),
        ({"metric": "speedup", "method": "barter", "min": 1, "tolerance": 0.1}, "expect.0.tolerance", "only for metric density_achieved"),
        ({"metric": "speedup", "method": "barter", "density": 0.3, "min": 1}, "expect.0.density", "no case at 0.3 (densities: 0.1, 0.5, 1)"),
        ({"metric": "density_achieved", "method": "*", "density": 1.5}, "expect.0.density", "outside (0, 1]"),
    ],
)
def test_expectations_are_validated_with_the_suite(expectation: dict[str, Any], key: str, fragment: str) -> None:
    with pytest.raises(SuiteError) as info:
        parse_suite(_suite([expectation]), "s.yaml")
    assert len(info.value.problems) == 1
    assert str(info.value).startswith(f"s.yaml: {key}: ") and fragment in str(info.value), str(info.value)


def test_globs_and_dense_at_1_are_valid_expectations() -> None:
    parse_suite(_suite([{"metric": "speedup", "method": "b*", "density": 0.1, "min": 1},
                        {"metric": "top1", "method": "dense", "density": 1.0, "min": 0.5},
                        {"metric": "density_achieved", "method": "*"}]))


def test_an_invalid_expectation_stops_the_run_before_any_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    suite = tmp_path / "s.yaml"
    suite.write_text(yaml.safe_dump(_suite([{"metric": "speedup", "method": "barter", "vs": "rgl", "min": 1}])))
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 2
    assert f"{suite}: expect.0.vs: 'rgl' is not a method of the suite" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_memory_reduction_on_different_bases_fails_with_reason() -> None:
    lines = _lines()
    lines[2] = {**lines[2], "peak_memory_bytes": 123}  # allocator peak here, byte counts for rigl
    [bad] = _check([{"metric": "memory_reduction", "method": "barter", "min": 0.5}], lines)
    assert not bad.passed and "memory measured differently" in bad.message


def _check_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], expect: list[dict[str, Any]]) -> tuple[int, str]:
    run = write_run(tmp_path / "run", _lines(), suite=_suite(expect))
    code = main(["check", str(run)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_dstbench_check_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = _check_cli(tmp_path, capsys, [{"metric": "speedup", "method": "barter", "density": 0.1, "min": 3.0}])
    assert code == 0
    assert "PASS  speedup barter@0.1 vs rigl: 4 >= 3" in output
    assert "WARNING" not in output


def test_dstbench_check_names_contended_cases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _lines()
    lines[1] = {**lines[1], "noise": {"contended": True, "starved_segments": 7},
                "warnings": ["contended: 7 of 10 segments starved"]}
    run = write_run(tmp_path / "run", lines, suite=_suite([{"metric": "speedup", "method": "barter", "min": 3.0, "density": 0.1}]))
    assert main(["check", str(run)]) == 0  # contention is named, not a failed gate
    captured = capsys.readouterr()
    assert "WARNING  rigl@0.1: contended: 7 of 10 segments starved" in captured.err
    assert "contended" in captured.out  # the table's flags column


def test_dstbench_check_fails_with_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = _check_cli(
        tmp_path, capsys,
        [{"metric": "speedup", "method": "barter", "density": 0.1, "min": 3.0},
         {"metric": "density_achieved", "method": "*", "tolerance": 0.01}],
    )
    assert code == 1
    assert "FAIL  density_achieved set@0.1: achieved 0.1300, target 0.1, |error| 0.0300 > 0.01" in output
    assert "1 of 5 expectations failed" in output


def test_dstbench_check_of_unusable_run_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "missing")]) == 2
    run = write_run(tmp_path / "run", _lines(), suite=_suite([]))
    # A method that is not installed here is no longer unusable (the record is trusted for what ran:
    # tests/suite/test_plugin_run_folders.py); a suite that cannot be valid is.
    (run / "suite.yaml").write_text("name: broken\nmethods: [dense]\ndensities: [1.5]\n")
    assert main(["check", str(run)]) == 2
    assert "density 1.5 is outside (0, 1]" in capsys.readouterr().err


# -- cases left out of a run (--only, --density) and runs that did not finish ----------------------
def _planned() -> list:
    from dstbench.suite.cases import Case

    return [Case("dense", "dense", "dense", 1.0)] + [
        Case(m, m, "masked", d) for d in (0.5, 0.1) for m in ("rigl", "barter", "set")
    ]


def _covered(expect: list[dict[str, Any]], selected: list[str], lines: list[dict[str, Any]] | None = None) -> list:
    from dstbench.results.coverage import Coverage

    lines = lines or _lines()
    suite = parse_suite(_suite(expect))
    frame = pd.DataFrame([{**x, "run": "r"} for x in lines])
    coverage = Coverage(_planned(), selected, [x["case_id"] for x in lines])
    return check_expectations(suite, frame, coverage)


AT_01 = ["dense@1", "rigl@0.1", "barter@0.1", "set@0.1"]  # --density 0.1


def test_cases_not_selected_are_skipped_not_failed() -> None:
    outcomes = _covered([{"metric": "density_achieved", "method": "*", "tolerance": 0.01}], AT_01)
    verdicts = {o.case: o.verdict for o in outcomes}
    assert verdicts == {"dense@1": "PASS", "rigl@0.1": "PASS", "barter@0.1": "PASS", "set@0.1": "FAIL",
                        "rigl@0.5": "SKIPPED", "barter@0.5": "SKIPPED", "set@0.5": "SKIPPED"}
    skipped = next(o for o in outcomes if o.case == "barter@0.5")
    assert skipped.passed and not skipped.failed  # a skipped gate never fails the run
    assert describe(skipped, "rigl") == "SKIPPED  density_achieved barter@0.5: not selected for this run (--only / --density)"
    # Named outright: still skipped, where without a record of the selection nothing matched (a failure).
    [named] = _covered([{"metric": "speedup", "method": "barter", "density": 0.5, "min": 3.0}], AT_01)
    assert named.verdict == "SKIPPED"


def test_a_case_whose_partner_was_not_selected_is_skipped() -> None:
    lines = [x for x in _lines() if x["method"] != "rigl"]  # --only dense barter set
    selected = ["dense@1", "barter@0.5", "set@0.5", "barter@0.1", "set@0.1"]
    [outcome] = _covered([{"metric": "speedup", "method": "barter", "vs": "rigl", "density": 0.1, "min": 3.0}], selected, lines)
    assert outcome.verdict == "SKIPPED"
    assert outcome.message == "rigl@0.1, which it compares with, was not selected for this run"


def test_a_selected_case_without_a_result_fails() -> None:
    lines = [x for x in _lines() if x["method"] != "barter"]  # the run stopped before barter@0.1
    [outcome] = _covered([{"metric": "speedup", "method": "barter", "density": 0.1, "min": 3.0}], AT_01, lines)
    assert outcome.verdict == "FAIL"
    assert outcome.message == "not run: the run has no result for barter@0.1 (3 of 4 cases (1 not run: barter@0.1); 3 more in the suite, not selected)"


def _recorded_run(tmp_path: Path, lines: list[dict[str, Any]], selected: list[str], expect: list[dict[str, Any]]) -> Path:
    from dstbench.results.coverage import record_cases

    run = write_run(tmp_path / "run", lines, suite=_suite(expect))
    record_cases(run, _planned(), selected)
    return run


def test_dstbench_check_skips_unselected_cases_and_flags_an_incomplete_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expect = [{"metric": "density_achieved", "method": "barter", "tolerance": 0.01}]
    run = _recorded_run(tmp_path, _lines(), AT_01, expect)
    assert main(["check", str(run)]) == 0
    output = "".join(capsys.readouterr())
    assert "PASS  density_achieved barter@0.1" in output and "SKIPPED  density_achieved barter@0.5" in output
    assert "all 1 expectations passed (1 skipped)" in output and "incomplete" not in output

    lines = [x for x in _lines() if x["method"] != "barter"]
    run = _recorded_run(tmp_path / "stopped", lines, AT_01, expect)
    assert main(["check", str(run)]) == 1
    output = "".join(capsys.readouterr())
    assert "incomplete run: 3 of 4 cases (1 not run: barter@0.1)" in output
    assert "FAIL  density_achieved barter@0.1: not run" in output


def test_topology_share_is_skipped_where_no_update_was_timed() -> None:
    lines = _lines()
    lines[2].update(topology_updates=2, topology_ms=8.0)
    [measured] = _check([{"metric": "topology_share", "method": "barter", "max": 0.05}], lines)
    assert measured.passed and not measured.skipped and measured.value > 0
    lines[2].update(topology_updates=0, topology_ms=0.0)  # no update fell in a timed segment: a share of 0 says nothing
    [unmeasured] = _check([{"metric": "topology_share", "method": "barter", "max": 0.05}], lines)
    assert unmeasured.skipped and unmeasured.value is None
    assert _lines_of([unmeasured]) == ["SKIPPED  topology_share barter@0.1: not measured: no topology update fell inside a timed segment"]
