"""Nothing lost, nothing twice: result lines that are always JSON, one writer per run folder,
readers that survive malformed lines, a full disk that costs one line and exit 74."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from dstbench.cli import main
from dstbench.results.record import CaseResult, append_result, iter_results
from dstbench.results.run_files import RunDirError, RunLock
from dstbench.util.files import LOCK_FILE, make_unique_dir, write_atomic
from dstbench.execution.orchestrator import new_run_dir
from tests.conftest import micro_suite
from tests.gates.synthetic import line, write_run
from tests.execution.launchers.fault_methods import PLUGIN


def write_suite(tmp_path: Path, **overrides) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(micro_suite(**overrides)))
    return path


def test_an_unserialisable_extra_is_a_warning_on_an_ok_line(tmp_path: Path) -> None:
    suite = write_suite(tmp_path, plugins=[PLUGIN], methods=["fault_extras"])
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 0  # in-process launcher
    [result] = list(iter_results(next((tmp_path / "runs").iterdir())))
    assert result["status"] == "ok" and result["method_extras"]["(1, 2)"] == "tuple key"
    assert result["method_extras"]["handle"].startswith("<object object")
    # One warning per unserialisable extra (the machine may add an outlier warning of its own).
    assert len([w for w in result["warnings"] if w.startswith("method_extras")]) == 4


def test_a_result_line_is_json_whatever_it_holds() -> None:
    result = CaseResult("s", "h", "m@0.5", "m", "m", "masked", 0.5, {})
    cycle: list = []
    cycle.append(cycle)
    result.method_extras = {"nan": float("nan"), "cycle": cycle, "bytes": b"\x00"}
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["method_extras"]["nan"] is None and data["method_extras"]["bytes"] == "b'\\x00'"
    assert any("nested deeper" in w for w in data["warnings"])


# -- readers --------------------------------------------------------------------------------------
def hostile_run(tmp_path: Path) -> Path:
    """A run folder with good lines, a line of the wrong types, text that is not JSON, a torn line
    and a case id written twice."""
    good = [line("dense", 1.0), line("rigl", 0.5), line("rigl", 0.5, segment_ms=[90.0] * 10)]
    run = write_run(tmp_path / "run", good)
    with open(run / "results.jsonl", "a") as handle:
        handle.write(json.dumps({**line("rigl", 0.1), "density": "x"}) + "\n")
        handle.write(json.dumps({**line("set", 0.1), "segment_ms": "fast"}) + "\n")
        handle.write("this is not json\n")
        handle.write('{"case_id": "set@0.1", "sta')
    return run


def test_readers_skip_and_count_malformed_lines_and_flag_duplicates(tmp_path: Path) -> None:
    run = hostile_run(tmp_path)
    with pytest.warns(UserWarning) as caught:
        lines = list(iter_results(run))
    message = str(caught[0].message)
    assert "skipped 4 unreadable line(s)" in message and "line 4 (density is 'x')" in message
    assert "segment_ms is 'fast'" in message and "not JSON" in message
    assert "rigl@0.5 (2 lines); the last line of each counts" in message
    assert [ln["case_id"] for ln in lines] == ["dense@1", "rigl@0.5"] and lines[1]["segment_ms"] == [90.0] * 10


@pytest.mark.parametrize(
    "command, code",
    [
        (["report", "{run}"], 0),
        (["report", "{run}", "--html", "{tmp}/r.html", "--markdown", "{tmp}/r.md"], 0),
        (["check", "{run}"], 1),  # survives, and fails: the unusable lines are named (issue 62)
        (["compare", "{run}", "{run}"], 0),
        (["publish", "{run}", "--site", "{tmp}/site"], 0),
        (["export", "{run}", "--pytest-benchmark", "{tmp}/b.json"], 0),
    ],
)
def test_every_reader_survives_malformed_lines(command: list[str], code: int, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = hostile_run(tmp_path)
    argv = [part.format(run=run, tmp=tmp_path) for part in command]
    with pytest.warns(UserWarning, match="skipped 4 unreadable"):
        assert main(argv) == code
    assert "Traceback" not in capsys.readouterr().err


def test_one_segment_shows_no_iqr_and_no_interval(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = write_run(tmp_path / "run", [line("dense", 1.0, segment_ms=[100.0]), line("rigl", 0.5, segment_ms=[50.0])])
    assert main(["report", str(run), "--markdown", str(tmp_path / "r.md")]) == 0
    out = capsys.readouterr().out
    assert "95% CI n/a" in out and "2.00× n/a" in out and "[2.00, 2.00]" not in out
    speed_table = out.split("\nMemory")[0]
    rows = [row.split() for row in speed_table.splitlines() if row.startswith(("dense ", "rigl "))]
    # method, density, achieved, status, n, median ms, ms/step, then the IQR
    iqr_column = [cells[7] for cells in rows]
    assert iqr_column and set(iqr_column) == {"n/a"}
    assert "95% CI n/a" in (tmp_path / "r.md").read_text()
    assert main(["compare", str(run), str(run)]) == 0
    assert "INCONCLUSIVE: time (too few samples for an interval)" in capsys.readouterr().out


# -- writers --------------------------------------------------------------------------------------
def test_two_writers_of_one_run_folder_cannot_both_hold_it(tmp_path: Path) -> None:
    with RunLock(tmp_path):
        with pytest.raises(RunDirError, match=f"pid {os.getpid()} on "):
            RunLock(tmp_path).acquire()
    RunLock(tmp_path).acquire().release()  # free again once released


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text('{"pid": 999999, "host": "gone", "started": "2020-01-01"}\n')
    lock = RunLock(tmp_path).acquire()  # no process holds its flock: the lock is free
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path: Path) -> None:
    suite = SimpleNamespace(name="same")
    made: list[Path] = []
    threads = [threading.Thread(target=lambda: made.append(new_run_dir(tmp_path, suite))) for _ in range(6)]  # type: ignore[arg-type]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 6 and all(p.is_dir() for p in made)
    assert make_unique_dir(tmp_path, "x").name == "x" and make_unique_dir(tmp_path, "x").name == "x-2"


def full_disk_for(monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """Writes to files named `*suffix` fail with ENOSPC after half of their bytes."""
    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(suffix):
            real_write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")
def test_a_full_disk_while_appending_is_one_line_exit_74_and_no_torn_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_disk_for(monkeypatch, "results.jsonl")
    assert main(["run", str(write_suite(tmp_path)), "--out", str(tmp_path / "runs")]) == 74
    [error] = [ln for ln in capsys.readouterr().err.splitlines() if "cannot write" in ln]
    assert error.startswith("dstbench: cannot write or read ") and error.endswith("results.jsonl: No space left on device")
    assert (next((tmp_path / "runs").iterdir()) / "results.jsonl").read_bytes() == b""  # the half line was undone


def test_append_after_a_torn_line_starts_a_line_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_text('{"case_id": "x@0.5", "sta')
    result = CaseResult("s", "h", "m@0.5", "m", "m", "masked", 0.5, {})
    with pytest.warns(UserWarning, match="not JSON"):
        append_result(tmp_path, result)
        assert [ln["case_id"] for ln in iter_results(tmp_path)] == ["m@0.5"]


def test_a_report_that_cannot_be_written_leaves_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = write_run(tmp_path / "run", [line("dense", 1.0), line("rigl", 0.5)])
    out = tmp_path / "out"
    out.mkdir()

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    assert main(["report", str(run), "--html", str(out / "r.html")]) == 74
    assert main(["publish", str(run), "--site", str(out / "site")]) == 74
    left = [p.relative_to(out) for p in out.rglob("*") if p.is_file()]
    assert [p for p in left if p.suffix in (".html", ".tmp")] == []  # no empty page, no temporary file
    assert "No space left on device" in capsys.readouterr().err


def test_write_atomic_keeps_the_old_file_when_the_new_one_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = write_atomic(tmp_path / "page.html", "old")
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(OSError):
        write_atomic(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["page.html"]


@pytest.mark.slow
def test_a_20_mb_error_line_is_clipped_on_the_terminal_and_whole_in_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    method = {"name": "fault_error", "params": {"message": "x", "repeat": 20_000_000}}
    suite = write_suite(tmp_path, plugins=[PLUGIN], methods=["dense", method])
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 1
    captured = capsys.readouterr()
    assert len(captured.out) + len(captured.err) < 50_000
    # The progress line of the failed case: its error's last line, cut to one short line.
    [line] = [ln for ln in captured.err.splitlines() if "fault_error@0.5: error ValueError: xxx" in ln]
    assert len(line) <= 160 and line.endswith("…")
    run_dir = next((tmp_path / "runs").iterdir())
    [failed] = [ln for ln in iter_results(run_dir) if ln["status"] != "ok"]
    assert "x" * 20_000_000 in failed["error"]
    assert main(["report", str(run_dir)]) == 0  # its failed-cases table clips the reason too
    assert len(capsys.readouterr().out) < 50_000
