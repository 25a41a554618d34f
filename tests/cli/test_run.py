"""`dstbench run` and `dstbench check` from the command line: run folders, exit codes, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dstbench.cli import main
from dstbench.results.record import iter_results
from tests.conftest import micro_suite
from tests.faults.processes import start_with_sigint
from tests.execution.launchers.fault_methods import PLUGIN

ROOT = Path(__file__).resolve().parents[2]


def write_suite(tmp_path: Path, **overrides) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(micro_suite(**overrides)))
    return path


def only_run_dir(out: Path) -> Path:
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


@pytest.mark.slow
def test_run_writes_a_run_folder_and_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = write_suite(tmp_path, plugins=[PLUGIN], methods=["dense", "fault_error"], densities=[0.5])
    # A failed case fails the run (CI must not pass it), and says how many failed.
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 1
    run_dir = only_run_dir(tmp_path / "runs")
    lines = list(iter_results(run_dir))
    assert [(line["case_id"], line["status"]) for line in lines] == [("dense@1", "ok"), ("fault_error@0.5", "error")]
    assert yaml.safe_load((run_dir / "suite.yaml").read_text())["timing"]["segments"] == 3
    assert json.loads((run_dir / "run.json").read_text())["suite_hash"] == lines[0]["suite_hash"]
    captured = capsys.readouterr()
    assert "speedup vs dense" in captured.out and "fault_error" in captured.out and "error" in captured.out
    assert "1 of 2 cases failed: fault_error@0.5 (error)" in captured.err


def test_malformed_suite_exits_2_names_the_key_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = write_suite(tmp_path, timing={"segments": 0})
    out = tmp_path / "runs"
    assert main(["run", str(suite), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(suite) in err and "timing.segments" in err
    assert not out.exists()


def test_only_must_name_suite_methods(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", str(write_suite(tmp_path)), "--out", str(tmp_path / "r"), "--only", "rigl"]) == 2
    assert "--only" in capsys.readouterr().err


def test_failed_expectation_exits_1_and_says_by_how_much(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    expect = [{"metric": "density_achieved", "method": "*", "tolerance": 0.01}, {"metric": "top1", "method": "dense", "min": 0.5}]
    suite = write_suite(tmp_path, expect=expect)
    html = tmp_path / "report.html"
    assert main(["run", str(suite), "--out", str(tmp_path / "runs"), "--html", str(html)]) == 1
    err = capsys.readouterr().err
    assert "dense" in html.read_text()  # the report is written even though a gate failed
    assert "PASS  density_achieved dense@1" in err and "FAIL  top1 dense@1: no top1 in result" in err
    run_dir = only_run_dir(tmp_path / "runs")
    assert main(["check", str(run_dir)]) == 1
    assert main(["check", str(tmp_path / "nowhere")]) == 2


@pytest.mark.slow
def test_resume_after_a_kill_runs_only_the_missing_cases(tmp_path: Path) -> None:
    """Kill a real sequential `dstbench run` after its first case, resume it, and check nothing ran twice."""
    suite = write_suite(
        tmp_path,
        plugins=[PLUGIN],
        methods=["dense", {"name": "fault_hang", "label": "hang"}, {"name": "fault_error", "label": "last"}],
        densities=[0.5],
        launcher={"name": "subprocess", "timeout_s": 600},
        timing={**micro_suite()["timing"], "interleave": False},
    )
    out = tmp_path / "runs"
    hang_file = tmp_path / "hang"
    hang_file.touch()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DSTBENCH_FAULT_HANG_FILE": str(hang_file)}
    command = [sys.executable, "-m", "dstbench", "run", str(suite), "--out", str(out)]
    process = start_with_sigint(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait for the first case's line; the second case hangs
            if out.exists() and any(out.iterdir()) and list(iter_results(only_run_dir(out))):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the first case never finished")
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    assert process.returncode == 130
    run_dir = only_run_dir(out)
    first = list(iter_results(run_dir))
    assert [line["case_id"] for line in first] == ["dense@1"]

    # The same suite, resumed once the hanging case can finish: only the two missing cases run.
    hang_file.unlink()
    resumed = subprocess.run(command + ["--resume"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 1, resumed.stderr  # `last` fails on purpose
    assert "1 of 3 cases failed: last@0.5 (error)" in resumed.stderr
    lines = list(iter_results(run_dir))
    assert [line["case_id"] for line in lines] == ["dense@1", "hang@0.5", "last@0.5"]
    assert lines[0] == first[0]  # dense was not run again
