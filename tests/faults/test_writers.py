"""One writer per run folder and per site (issue 61): concurrent publishes stay whole, deleting
`.lock` does not let a second writer in, and readers refuse (compare, publish, export) or flag
(report, check, load_run) a run folder another process is still writing. Each test fails on the
code before the fix: the lock was a flock on `.lock`, publish took no lock, readers did not look."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Iterator

import pytest

import dstbench
from dstbench.cli import main
from dstbench.results.run_files import RunDirError, RunLock
from dstbench.util.files import LOCK_FILE
from tests.faults.processes import reap_all, wait_for_file
from tests.faults.test_data_safety import stored_run

ROOT = Path(__file__).resolve().parents[2]
GATE_RUNS = sorted((ROOT / "reports/studies/intervals/runs/gate").glob("cpu_gate-*"))


def quiet_copy(tmp_path: Path, name: str, source: Path = GATE_RUNS[0]) -> Path:
    target = tmp_path / name
    shutil.copytree(source, target)
    return target


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Path]:
    """A copy of a committed run whose lock another process holds (as `dstbench run` does while
    it writes), released when the test ends."""
    run = quiet_copy(tmp_path, "writing")
    ready = tmp_path / "locked"
    code = textwrap.dedent(f"""
        import time
        from dstbench.results.run_files import RunLock
        RunLock({str(run)!r}).acquire()
        open({str(ready)!r}, "w").write("locked")
        time.sleep(120)
    """)
    process = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_for_file(ready, 30, "the writer taking its lock")
        yield run
    finally:
        process.kill()
        process.wait()
        reap_all([process.pid])


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(writer: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (writer / LOCK_FILE).unlink()
    with pytest.raises(RunDirError, match="being written by another dstbench run"):
        RunLock(writer).acquire()


def test_resuming_a_run_being_written_exits_2_even_without_its_lock_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, run_dir = stored_run(tmp_path)
    ready = tmp_path / "locked"
    code = f"from dstbench.results.run_files import RunLock; import time; RunLock({str(run_dir)!r}).acquire(); " \
           f"open({str(ready)!r}, 'w').write('x'); time.sleep(120)"
    process = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_for_file(ready, 30, "the writer taking its lock")
        (run_dir / LOCK_FILE).unlink()
        assert main(["run", str(path), "--resume", str(run_dir)]) == 2
        assert "being written by another dstbench run" in capsys.readouterr().err
    finally:
        process.kill()
        process.wait()
    # Its writer gone, the folder resumes.
    RunLock(run_dir).acquire().release()


@pytest.mark.parametrize("command", [
    ["compare", "{other}", "{run}"],
    ["compare", "{run}", "{other}", "--memory-only"],
    ["publish", "{run}", "--site", "{tmp}/site"],
    ["export", "{run}", "--pytest-benchmark", "{tmp}/b.json"],
])
def test_commands_that_judge_or_copy_a_run_refuse_one_being_written(
    command: list[str], writer: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("pytest_benchmark")
    other = quiet_copy(tmp_path, "other", GATE_RUNS[1])
    argv = [a.format(run=writer, other=other, tmp=tmp_path) for a in command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{writer} is still being written by a dstbench run (pid" in err
    assert not (tmp_path / "site").exists() and not (tmp_path / "b.json").exists()


def test_readers_of_a_run_being_written_say_so(writer: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(writer)]) == 0
    assert "warning: " + f"{writer} is still being written" in capsys.readouterr().err
    main(["check", str(writer)])
    assert "is still being written" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="still being written"):
        dstbench.load_run(writer)


def test_a_finished_run_reads_without_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = quiet_copy(tmp_path, "done")
    RunLock(run).acquire().release()  # a lock file left by a finished run
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dstbench.load_run(run)
    assert main(["compare", str(run), str(run)]) == 0
    # The process that holds the lock reads its own folder as any reader would (no warning).
    with RunLock(run):
        assert main(["compare", str(run), str(run)]) == 0
    assert "still being written" not in capsys.readouterr().err


@pytest.mark.slow  # nine publish processes (~25 s)
def test_concurrent_publishes_into_one_site_list_every_run(tmp_path: Path) -> None:
    """Three trials, each three publishes into its own site at once (the trials run side by side)."""
    runs = [quiet_copy(tmp_path, f"run{letter}", source) for letter, source in zip("ABC", GATE_RUNS)]
    sites = [tmp_path / f"site{trial}" for trial in range(3)]
    processes = [
        subprocess.Popen([sys.executable, "-m", "dstbench", "publish", str(run), "--site", str(site)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for site in sites for run in runs
    ]
    codes = [p.wait(timeout=300) for p in processes]
    assert codes == [0] * 9, [p.stderr.read().decode() if p.stderr else "" for p in processes]
    for site in sites:
        manifest = json.loads((site / ".dstbench-site.json").read_text())
        assert sorted(manifest["runs"]) == ["runA", "runB", "runC"]
        index = (site / "index.html").read_text()
        assert all(f"runs/run{letter}/index.html" in index for letter in "ABC")
        # The site is whole: the next publish into it works.
        assert main(["publish", str(runs[0]), "--site", str(site)]) == 0


# --- --resume on another machine ------------------------------------------------------------------


def _as_other_machine(run_dir: Path) -> None:
    """Rewrite the run's lines as if another host with another CPU had timed them."""
    path = run_dir / "results.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    for line in lines:
        line["env"] = {**line["env"], "hostname": "elsewhere", "cpu_model": "Other CPU 9000"}
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_resume_over_another_machines_lines_is_refused_or_timed_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Density 0.5 timed 'elsewhere', then the run resumed here for 0.1: refused (exit 2, naming
    the host and CPU); with --allow-other-machine every group holding such a line (0.5's, and 0.1's,
    which holds dense) is timed again here, and dense's line holds this machine's segments only."""
    from tests.faults.test_data_safety import suite_file

    path = suite_file(tmp_path, methods=["dense", "static"], densities=[0.5, 0.1])
    out = tmp_path / "runs"
    assert main(["run", str(path), "--out", str(out), "--density", "0.5"]) == 0
    (run_dir,) = out.iterdir()
    _as_other_machine(run_dir)
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(out), "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "holds lines timed on another machine (CPU model: Other CPU 9000, here" in err and "host: elsewhere, here" in err
    assert "dense@1" in err and "static@0.5" in err
    assert main(["run", str(path), "--out", str(out), "--resume", str(run_dir), "--dry-run"]) == 2  # refused before anything runs
    lines_before = (run_dir / "results.jsonl").read_text()
    assert main(["run", str(path), "--out", str(out), "--resume", str(run_dir), "--allow-other-machine"]) == 0
    assert "timing again here every group holding a line from another machine" in capsys.readouterr().err
    lines = {x["case_id"]: x for x in dstbench.load_run(run_dir).lines()}
    assert set(lines) == {"dense@1", "static@0.5", "static@0.1"}
    assert all(x["env"]["hostname"] != "elsewhere" for x in lines.values())
    old_groups = {g for x in map(json.loads, lines_before.splitlines()) for g in x.get("groups") or []}
    assert not old_groups & set(lines["dense@1"]["groups"])
    # dense has one segment set per density group, each timed here.
    assert len(lines["dense@1"]["segment_ms"]) == 2 * len(lines["static@0.5"]["segment_ms"])


def test_allow_other_machine_needs_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.faults.test_data_safety import suite_file

    assert main(["run", str(suite_file(tmp_path)), "--allow-other-machine"]) == 2
    assert "--allow-other-machine: only with --resume" in capsys.readouterr().err
