"""The Python API (`dstbench.run_suite`, `load_run`, `compare`, `load_suite`) on a real micro run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import dstbench
from dstbench.results.run_files import RunDirError
from dstbench.suite.loading import SuiteError
from tests.conftest import micro_suite
from tests.execution.launchers.fault_methods import PLUGIN

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "micro.yaml"
    suite = micro_suite(
        methods=["dense", "rigl", "small_dense"], densities=[0.5], reference="rigl",
        expect=[{"metric": "density_achieved", "method": "*", "tolerance": 0.01},
                {"metric": "state_ratio", "method": "small_dense", "vs": "rigl", "max": 0.0001}],  # fails on purpose
    )
    path.write_text(yaml.safe_dump(suite), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run(suite_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dstbench.Run:
    return dstbench.run_suite(suite_file, out=tmp_path_factory.mktemp("runs"), overrides={"timing.segments": 4})


def test_import_dstbench_stays_light() -> None:
    # The API loads on first use: importing the package imports neither torch nor pandas.
    code = "import sys, dstbench; print('torch' in sys.modules, 'pandas' in sys.modules, callable(dstbench.load_run))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout.split()
    assert out == ["False", "False", "True"]


def test_run_suite_returns_the_run_with_its_overrides_recorded(run: dstbench.Run) -> None:
    assert isinstance(run, dstbench.Run) and (run.path / "results.jsonl").is_file()
    assert run.meta["overrides"] == {"timing.segments": 4}
    assert run.suite.timing.segments == 4
    assert {line["case_id"] for line in run.lines()} == {"dense@1", "rigl@0.5", "small_dense@0.5"}


def test_frame_has_one_row_per_case_with_speedups_intervals_and_memory(run: dstbench.Run) -> None:
    frame = run.frame()
    assert sorted(frame["case_id"]) == ["dense@1", "rigl@0.5", "small_dense@0.5"]
    for column in ("method", "density", "density_achieved", "status", "median_ms", "speedup", "speedup_ci_low",
                   "speedup_ci_high", "memory_bytes", "memory_reduction", "contended", "implausible", "density_off_target"):
        assert column in frame.columns, column
    small = frame.set_index("case_id").loc["small_dense@0.5"]
    assert small["status"] == "ok" and small["speedup_ci_low"] <= small["speedup"] <= small["speedup_ci_high"]
    assert small["memory_reduction"] > 0  # fewer bytes than full-size RigL: measured, not assumed
    assert frame.set_index("case_id").loc["rigl@0.5", "speedup"] == pytest.approx(1.0)
    # Another reference gives other ratios; every line field is there on request.
    assert run.frame("dense").set_index("case_id").loc["dense@1", "speedup"] == pytest.approx(1.0)
    assert "segment_ms" in run.frame(all_columns=True).columns
    with pytest.raises(ValueError, match="not among the methods"):
        run.frame("nope")


def test_segments_one_row_per_timed_segment(run: dstbench.Run) -> None:
    segments = run.segments()
    lines = {line["case_id"]: line for line in run.lines()}
    assert len(segments) == sum(len(line["segment_ms"]) for line in lines.values())
    first = segments[segments["case_id"] == "rigl@0.5"].iloc[0]
    assert first["ms"] == lines["rigl@0.5"]["segment_ms"][0]
    assert first["group"] == lines["rigl@0.5"]["segment_group"][0]
    assert {"round", "process", "slot", "cpu_share"} <= set(segments.columns)


def test_check_is_the_verdict_of_dstbench_check(run: dstbench.Run, capsys: pytest.CaptureFixture[str]) -> None:
    verdict = run.check()
    assert not verdict.passed and verdict.exit_code == 1  # the state_ratio expectation fails
    assert [o.expectation.metric for o in verdict.failed_expectations] == ["state_ratio"]
    assert verdict.failed_cases == [] and not verdict.foreign_lines and verdict.coverage.complete
    from dstbench.cli import main

    assert main(["check", str(run.path)]) == verdict.exit_code


def test_report_writes_html_and_markdown_and_returns_the_text(run: dstbench.Run, tmp_path: Path) -> None:
    text = run.report(html=tmp_path / "r.html", markdown=tmp_path / "r.md")
    assert "small_dense" in text and (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert "small_dense" in (tmp_path / "r.md").read_text()
    with pytest.raises(ValueError, match="run folder"):
        run.report(html=run.path / "report.html")  # never inside the run


def test_compare_a_run_with_itself_passes_and_frames_every_metric(run: dstbench.Run) -> None:
    comparison = dstbench.compare(run, run.path, memory_only=True)
    assert comparison.passed and comparison.exit_code == 0
    frame = comparison.frame()
    assert set(frame["case_id"]) == {"dense@1", "rigl@0.5", "small_dense@0.5"}
    assert {"status", "state", "activation"} <= set(frame["metric"])
    assert set(frame["verdict"]) == {"unchanged"}
    assert "dense@1" in comparison.text()


def test_compare_finds_a_memory_regression(run: dstbench.Run, tmp_path: Path) -> None:
    changed = tmp_path / "changed"
    changed.mkdir()
    for name in ("run.json", "suite.yaml"):
        (changed / name).write_bytes((run.path / name).read_bytes())
    lines = [json.loads(x) for x in (run.path / "results.jsonl").read_text().splitlines()]
    for line in lines:
        if line["case_id"] == "rigl@0.5":
            line["state_bytes"] = int(line["state_bytes"] * 1.5)
    (changed / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    comparison = dstbench.compare(run, changed, memory_only=True)
    assert not comparison.passed
    regressed = comparison.frame().query("verdict == 'regression'")
    assert list(regressed["case_id"]) == ["rigl@0.5"] and list(regressed["metric"]) == ["state"]
    assert regressed["change"].iloc[0] == pytest.approx(0.5, abs=1e-6)


def test_load_errors_are_raised_not_exit_codes(tmp_path: Path, suite_file: Path) -> None:
    with pytest.raises(RunDirError):
        dstbench.load_run(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(micro_suite(methods=["no_such_method"])))
    with pytest.raises(SuiteError, match="no_such_method"):
        dstbench.load_suite(bad)
    assert dstbench.load_suite(suite_file, overrides={"model.depth": 1}).model.depth == 1
    with pytest.raises(SuiteError):
        dstbench.run_suite(bad, out=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_a_run_whose_every_case_failed_raises_run_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "failing.yaml"
    suite.write_text(yaml.safe_dump(micro_suite(plugins=[PLUGIN], methods=["fault_error"])))
    with pytest.raises(dstbench.RunFailed, match=r"fault_error@0\.5 \(error: ValueError: injected failure") as raised:
        dstbench.run_suite(suite, out=tmp_path / "runs", progress=False)
    assert list(raised.value.failed) == ["fault_error@0.5"]
    assert [line["status"] for line in raised.value.run.lines()] == ["error"]  # the line is kept
    printed = capsys.readouterr()
    assert printed.out == "" and "case 1/1" not in printed.err  # progress=False: nothing on either stream
    with pytest.warns(UserWarning, match=r"fault_error@0\.5"):
        run = dstbench.run_suite(suite, out=tmp_path / "kept", raise_on_failure=False, progress=False)
    assert not run.check().passed


def test_a_run_where_some_cases_failed_returns_and_warns_naming_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "mixed.yaml"
    suite.write_text(yaml.safe_dump(micro_suite(plugins=[PLUGIN], methods=["dense", "fault_error"])))
    with pytest.warns(UserWarning, match=r"1 case\(s\) .* failed: fault_error@0\.5 \(error: ValueError"):
        run = dstbench.run_suite(suite, out=tmp_path / "runs")
    assert not run.check().passed and {line["status"] for line in run.lines()} == {"ok", "error"}
    printed = capsys.readouterr()
    assert printed.out == "" and "case 1/2" in printed.err  # progress on stderr, nothing on stdout
