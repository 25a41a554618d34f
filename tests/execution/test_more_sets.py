"""More process sets for some cases of a finished run (`dstbench run --resume RUN --more-processes N`):
they join the cases' lines as groups of their own, with the group's references, and run.json says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dstbench.cli import main
from dstbench.execution.orchestrator import run_suite
from dstbench.results.record import iter_results
from dstbench.suite.groups import base_key
from tests.conftest import micro_suite


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "suite.yaml"
    timing = {"warmup_steps": 2, "segment_steps": 2, "segments": 4, "processes": 2}
    path.write_text(yaml.safe_dump(micro_suite(methods=["dense", "set", "rigl"], densities=[0.5], reference="rigl", timing=timing)))
    return path


def test_more_processes_needs_a_run_folder_and_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _suite(tmp_path)
    assert main(["run", str(suite), "--more-processes", "2"]) == 2
    assert "--more-processes: needs --resume RUN_DIR" in capsys.readouterr().err
    assert main(["run", str(suite), "--resume", str(tmp_path), "--more-processes", "0"]) == 2
    assert "needs a count >= 1" in capsys.readouterr().err


@pytest.mark.slow
def test_added_sets_join_the_selected_cases_and_their_references(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _suite(tmp_path)
    run_dir = run_suite(suite, out=tmp_path / "runs")
    before = {line["case_id"]: line for line in iter_results(run_dir)}
    assert main(["run", str(suite), "--resume", str(run_dir), "--more-processes", "2", "--only", "set", "--out", str(tmp_path / "runs")]) == 0
    after = {line["case_id"]: line for line in iter_results(run_dir)}
    assert set(after) == {"dense@1", "set@0.5", "rigl@0.5"}  # the references came with set@0.5
    for case, line in after.items():
        added = [g for g in line["groups"] if g not in before[case]["groups"]]
        assert [base_key(g) for g in added] == ["d=0.5+set2", "d=0.5+set3"], case
        assert line["segment_ms"][: len(before[case]["segment_ms"])] == before[case]["segment_ms"]  # the run's samples stay
        assert sorted(set(line["segment_process"])) == [0, 1, 2, 3]
        assert len(line["segment_ms"]) == 2 * len(before[case]["segment_ms"])  # set k repeats the rounds of set k mod 2
    meta = json.loads((run_dir / "run.json").read_text())
    [entry] = meta["added_process_sets"]
    assert entry["cases"] == ["dense@1", "rigl@0.5", "set@0.5"] and len(entry["groups"]) == 2
    assert f"added 2 process set(s) to {run_dir}" in capsys.readouterr().err
    assert main(["check", str(run_dir)]) == 0


def test_a_runs_timing_wall_is_its_start_to_its_last_cases_end_before_any_added_set(tmp_path: Path) -> None:
    from dstbench.execution.more_sets import timing_wall_s
    from tests.gates.synthetic import line, write_run

    run_dir = write_run(tmp_path / "run", [
        line("dense", 1.0, started_at="2026-01-01T00:00:05+00:00", duration_s=20.0),
        line("set", 0.5, started_at="2026-01-01T00:00:10+00:00", duration_s=40.5),
    ])  # run.json: created 2026-01-01T00:00:00
    meta = json.loads((run_dir / "run.json").read_text())
    assert timing_wall_s(run_dir) == 50.5
    # A line merged with an added set ends after the addition: the run's own time leaves it out.
    added = {"added_process_sets": [{"at": "2026-01-01T00:00:40+00:00"}]}
    (run_dir / "run.json").write_text(json.dumps({**meta, **added}))
    assert timing_wall_s(run_dir) == 25.0
    (run_dir / "run.json").write_text(json.dumps({**meta, **added, "timing_wall_s": 50.5}))
    assert timing_wall_s(run_dir) == 50.5  # kept by the first addition
