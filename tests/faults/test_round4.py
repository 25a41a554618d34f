"""Reliability round 4, part 1 (issue 88): nothing hung, nothing deleted outside its folder, no
silent exit 0, no line that poisons a resume. One regression test per probe; the docs' Faults
table lists them."""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dstbench.cli import main
from dstbench.report.site_manifest import MANIFEST_FILE, PublishedRun, remove_published
from dstbench.results.record import read_results, replace_results
from dstbench.results.rejected_lines import REJECTED_FILE, set_aside_unusable
from dstbench.util.files import RESULTS_FILE, write_atomic
from tests.conftest import micro_suite
from tests.faults.exit_plugin import PLUGIN as EXIT_PLUGIN
from tests.faults.processes import reap_all, wait_for_file
from tests.gates.synthetic import line, write_run
from tests.execution.launchers.fault_methods import PLUGIN

ROOT = Path(__file__).resolve().parents[2]


def synthetic_run(path: Path) -> Path:
    return write_run(path, [line("dense", 1.0), line("rigl", 0.5)])


# -- 1. publish never deletes outside the site --------------------------------------------------------
def test_a_manifest_naming_a_file_outside_the_site_is_refused_and_the_file_kept(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    site = tmp_path / "site"
    site.mkdir()
    manifest = {"format": 1, "pages": [], "runs": {"r": {"source": "/elsewhere", "files": ["../../../victim.txt"]}}}
    (site / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert main(["publish", str(synthetic_run(tmp_path / "r")), "--site", str(site)]) == 2
    assert "outside the site" in capsys.readouterr().err
    assert victim.read_text() == "keep me"


def test_removing_a_published_run_stays_inside_its_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep me")
    folder = tmp_path / "site" / "runs" / "r"
    folder.mkdir(parents=True)
    (folder / "link").symlink_to(outside)  # a link inside the run folder to a folder outside the site
    (folder / "mine.json").write_text("{}")
    remove_published(folder, PublishedRun("", ["link/victim.txt", "../../../outside/victim.txt", "mine.json"]))
    assert (outside / "victim.txt").read_text() == "keep me" and not (folder / "mine.json").exists()


# -- 2 and 3. a FIFO where a file is read: refused, never waited on -----------------------------------
@pytest.mark.timeout(60)
def test_a_fifo_as_the_site_manifest_is_refused_and_the_lock_released(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    site = tmp_path / "site"
    site.mkdir()
    os.mkfifo(site / MANIFEST_FILE)
    run = synthetic_run(tmp_path / "r")
    for _ in range(2):  # the second publish does not wait for a lock the first left held
        assert main(["publish", str(run), "--site", str(site)]) == 2
        assert "not a regular file" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_fifo_as_a_checkpoint_is_named_damaged_not_waited_on(tmp_path: Path) -> None:
    from dstbench.dst.checkpoint import CheckpointDamaged, load_checkpoint

    path = tmp_path / "rigl@0.5 seed=1.pt"
    os.mkfifo(path)
    with pytest.raises(CheckpointDamaged, match="not a regular file"):
        load_checkpoint(path)
    # A resume past it trains the case afresh: tests/faults/test_data_safety.py (the fifo case).


# -- 4. a plugin that exits while it is built -----------------------------------------------------------
@pytest.mark.parametrize("interrupt", [False, True], ids=["sys.exit(0)", "KeyboardInterrupt"])
def test_a_plugin_ending_the_process_in_its_constructor_is_its_failure(
    interrupt: bool, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    suite = tmp_path / "suite.yaml"
    methods = [{"name": "fault_init_exit", "params": {"interrupt": interrupt}}]
    suite.write_text(yaml.safe_dump(micro_suite(plugins=[EXIT_PLUGIN], methods=methods)))
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "cannot be built with these parameters" in err and ("SystemExit" in err or "KeyboardInterrupt" in err)
    assert not (tmp_path / "runs").exists() and "finished cases" not in err


# -- 5. a line that would poison every resume ----------------------------------------------------------
def _poisoned(tmp_path: Path) -> tuple[Path, list[str]]:
    run = synthetic_run(tmp_path / "run")
    good = (run / RESULTS_FILE).read_text().splitlines()
    bad = json.dumps({**json.loads(good[1]), "seed": "x"})
    with open(run / RESULTS_FILE, "a") as handle:
        handle.write(bad + "\n" + '{"case_id": "rigl@0.5", "sta' + "\n" + "\x00" * 16)
    return run, good


def test_unusable_lines_are_set_aside_whole_and_the_rest_kept(tmp_path: Path) -> None:
    run, good = _poisoned(tmp_path)
    replace_results(run, {"dense@1"}, [])  # a wrongly typed seed no longer raises here
    assert len(read_results(run).skipped) == 3
    moved = set_aside_unusable(run)
    assert [m.split(" ")[0] for m in moved] == ["2", "3", "4"] and "seed" in moved[0] and "not JSON" in moved[1]
    assert (run / RESULTS_FILE).read_text().splitlines() == good[1:]  # dense's line went with replace_results
    rejected = (run / REJECTED_FILE).read_text().splitlines()
    assert len(rejected) == 3 and '"seed": "x"' in rejected[0] and rejected[2] == "\x00" * 16
    assert read_results(run).skipped == [] and set_aside_unusable(run) == []


@pytest.mark.slow
def test_a_resume_sets_a_poisoned_line_aside_and_check_then_passes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(micro_suite(methods=["dense", "rigl"])))
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 0
    [run_dir] = list((tmp_path / "runs").iterdir())
    lines = (run_dir / RESULTS_FILE).read_text().splitlines()
    rigl = json.loads(lines[-1])
    (run_dir / RESULTS_FILE).write_text("\n".join(lines[:-1] + [json.dumps({**rigl, "seed": "x"})]) + "\n" + "\x00" * 8)
    assert main(["check", str(run_dir)]) == 1
    capsys.readouterr()
    assert main(["run", str(suite), "--resume", str(run_dir)]) == 0
    assert "set aside 2 unusable line(s)" in capsys.readouterr().err
    assert main(["check", str(run_dir)]) == 0
    assert len((run_dir / REJECTED_FILE).read_text().splitlines()) == 2


# -- 6. check of a run.json that records no selection ----------------------------------------------------
@pytest.mark.parametrize("meta", ["without cases", "{}"])
def test_check_fails_an_incomplete_run_whose_run_json_records_no_selection(meta: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = write_run(tmp_path / "run", [line("dense", 1.0)], suite=micro_suite(methods=["dense", "rigl"], densities=[0.5]))
    data = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text("{}" if meta == "{}" else json.dumps({k: v for k, v in data.items() if k not in ("cases", "selected")}))
    code = main(["check", str(run)])
    out = capsys.readouterr()
    assert code != 0, out.err
    if meta != "{}":  # `{}` is refused as a damaged run.json (exit 2), which names the file
        assert "run.json records no selection" in out.err and "rigl@0.5" in out.err


# -- 7. thresholds that judge nothing -----------------------------------------------------------------
@pytest.mark.parametrize("option", ["--memory-threshold", "--time-threshold", "--top1-threshold"])
def test_a_nan_or_infinite_threshold_is_refused(option: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import dstbench
    from dstbench.gates.sides import CompareInputError

    a, b = synthetic_run(tmp_path / "a"), synthetic_run(tmp_path / "b")
    for value in ("nan", "inf"):
        assert main(["compare", str(a), str(b), option, value]) == 2
        assert "finite" in capsys.readouterr().err
    keyword = option.removeprefix("--").replace("-", "_")
    with pytest.raises(CompareInputError, match="finite"):
        dstbench.compare(a, b, **{keyword: math.nan})


# -- 8. errors that name their file, and come first ----------------------------------------------------
def test_an_output_nobody_may_write_is_refused_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(micro_suite()))
    assert main(["run", str(suite), "--out", str(tmp_path / "runs"), "--html", "/sys/dstbench-report.html"]) == 2
    assert "--html: cannot write into /sys" in capsys.readouterr().err and not (tmp_path / "runs").exists()


def test_a_full_disk_names_the_file_it_was_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    target = tmp_path / "report.md"
    with pytest.raises(OSError) as raised:
        write_atomic(target, "text")
    assert raised.value.filename == str(target) and raised.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # no partial file, no temporary one


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_to_the_process_group_prints_no_traceback(tmp_path: Path) -> None:
    hang_file, pid_file = tmp_path / "hang", tmp_path / "pids"
    hang = {"name": "fault_hang", "label": "hang", "params": {"hang_file": str(hang_file), "pid_file": str(pid_file)}}
    suite = tmp_path / "suite.yaml"
    timing = {"warmup_steps": 1, "segment_steps": 1, "segments": 2, "interleave": False}
    launcher = {"name": "subprocess", "timeout_s": 600}
    suite.write_text(yaml.safe_dump(micro_suite(plugins=[PLUGIN], methods=[hang], launcher=launcher, timing=timing)))
    hang_file.touch()
    command = [sys.executable, "-m", "dstbench", "run", str(suite), "--out", str(tmp_path / "runs")]
    process = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)  # a group of its own, as a terminal's job
    pids = [process.pid]
    try:
        pids += [int(p) for p in wait_for_file(pid_file, 240, "the hanging case").split()]
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, err = process.communicate(timeout=120)
    finally:
        reap_all(pids)
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "stopped (Ctrl-C)" in err and "not run: hang@0.5" in err
