"""`dstbench run` killed from outside: SIGTERM ends it as Ctrl-C does (exit 143, finished lines
kept, the running case left for `--resume`), SIGKILL leaves no process behind, and a second run
cannot write the same run folder meanwhile."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dstbench.cli import main
from dstbench.execution.lifeline import Terminated, terminate_as_interrupt
from dstbench.results.record import iter_results
from tests.conftest import micro_suite
from tests.faults.processes import alive, reap_all, survivors, wait_for_file
from tests.execution.launchers.fault_methods import PLUGIN

ROOT = Path(__file__).resolve().parents[2]
ORPHAN_GRACE_S = 10.0  # what the issue allows a child to outlive its killed parent
START_S = 240.0  # guard only: how long a loaded machine may take to reach the hanging case


def start_run(tmp_path: Path, methods: list, launcher: dict) -> tuple[subprocess.Popen, Path, Path, Path]:
    """`dstbench run` of a micro suite with a case labelled `hang` appended to `methods`: it hangs
    while `tmp_path/hang` exists, after writing its pid and parent pid to `tmp_path/pids` (see
    tests/execution/launchers/fault_methods.py)."""
    hang_file, pid_file, out = tmp_path / "hang", tmp_path / "pids", tmp_path / "runs"
    hang = {"name": "fault_hang", "label": "hang", "params": {"hang_file": str(hang_file), "pid_file": str(pid_file)}}
    suite = tmp_path / "suite.yaml"
    # Nothing here is timed: as short as can be. One case after another, so a case finished before
    # the hang has its line (interleaved, a group's lines are written when the whole group ends).
    timing = {"warmup_steps": 1, "segment_steps": 1, "segments": 2, "interleave": False}
    suite.write_text(yaml.safe_dump(micro_suite(plugins=[PLUGIN], methods=[*methods, hang], densities=[0.5], launcher=launcher, timing=timing)))
    hang_file.touch()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "dstbench", "run", str(suite), "--out", str(out)]
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, suite, out, pid_file


def hanging_case(process: subprocess.Popen, pid_file: Path) -> tuple[int, int]:
    """(pid, parent pid) of the case process once it hangs."""
    try:
        text = wait_for_file(pid_file, START_S, "the hanging case")
    except AssertionError:
        process.kill()
        raise AssertionError(process.communicate()[1][-3000:]) from None
    pid, parent = map(int, text.split())
    return pid, parent


@pytest.mark.slow
def test_sigterm_keeps_finished_lines_exits_143_leaves_no_process_and_resume_completes(tmp_path: Path) -> None:
    process, suite, out, pid_file = start_run(tmp_path, ["fault_extras"], {"name": "subprocess", "timeout_s": 600})
    case_pid, server_pid = hanging_case(process, pid_file)
    [run_dir] = list(out.iterdir())
    try:
        # A second writer of the folder is refused, naming the one that holds it.
        assert main(["run", str(suite), "--out", str(out), "--resume", str(run_dir)]) == 2
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        reap_all([process.pid, case_pid, server_pid])
    assert process.returncode == 143, err
    assert "terminated by SIGTERM" in err and "not run: hang@0.5" in err and f"--resume {run_dir}" in err
    assert survivors([case_pid, server_pid], ORPHAN_GRACE_S) == []

    lines = list(iter_results(run_dir))
    assert [(line["case_id"], line["status"]) for line in lines] == [("fault_extras@0.5", "ok")]
    # The plugin's set and tensor cost warnings, not the case.
    extras = lines[0]
    assert extras["method_extras"]["classes"] == [1, 2, 3] and extras["method_extras"]["scores"] == [0.0, 1.0, 2.0]
    assert any("set is not JSON" in w for w in extras["warnings"]) and any("Tensor" in w for w in extras["warnings"])
    interruption = json.loads((run_dir / "run.json").read_text())["interruptions"][-1]
    assert interruption["by"] == "SIGTERM" and interruption["unfinished"] == ["hang@0.5"]

    (tmp_path / "hang").unlink()  # the hanging case now trains as dense does
    assert main(["run", str(suite), "--out", str(out), "--resume"]) == 0  # in this process: no second torch import
    raw = (run_dir / "results.jsonl").read_text().splitlines()
    ids = [json.loads(line)["case_id"] for line in raw]  # every line whole, none twice
    assert ids == ["fault_extras@0.5", "hang@0.5"]


@pytest.mark.slow
def test_sigkill_of_the_run_takes_the_fork_server_and_the_case_with_it(tmp_path: Path) -> None:
    process, _, _, pid_file = start_run(tmp_path, [], {"name": "subprocess", "timeout_s": 600})
    case_pid, server_pid = hanging_case(process, pid_file)
    try:
        assert alive(server_pid) and server_pid != process.pid  # the case runs under the fork server
        process.kill()
        process.communicate(timeout=60)
        assert survivors([case_pid, server_pid], ORPHAN_GRACE_S) == []
    finally:
        reap_all([case_pid, server_pid])


@pytest.mark.slow
def test_sigkill_of_the_run_takes_torchrun_and_its_rank_with_it(tmp_path: Path) -> None:
    launcher = {"name": "torchrun", "nproc_per_node": 1, "timeout_s": 600}
    process, _, _, pid_file = start_run(tmp_path, [], launcher)
    rank_pid, agent_pid = hanging_case(process, pid_file)
    try:
        # torchrun runs in a session of its own, and its rank in another: no signal to our group reaches them.
        assert os.getsid(agent_pid) != os.getsid(process.pid) and os.getsid(rank_pid) != os.getsid(process.pid)
        process.kill()
        process.communicate(timeout=60)
        assert survivors([rank_pid, agent_pid], ORPHAN_GRACE_S) == []
    finally:
        reap_all([rank_pid, agent_pid])


# The watchdog, without PDEATHSIG (as on macOS): a grandchild whose parent is SIGKILLed ends itself.
WATCHED_CHILD = """
import sys, time
import dstbench.execution.lifeline as lifeline
lifeline._set_parent_death_signal = lambda *a: False
lifeline.WATCHDOG_INTERVAL_S = 0.2
lifeline.bind_to_parent()
print("bound", flush=True)
time.sleep(120)
"""
MIDDLE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline() == "bound\\n"
print(child.pid, flush=True)
time.sleep(120)
"""


def test_without_pdeathsig_the_watchdog_ends_a_child_whose_parent_died() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE, WATCHED_CHILD], env=env, stdout=subprocess.PIPE, text=True)
    child_pid = int(middle.stdout.readline())  # type: ignore[union-attr]
    try:
        assert alive(child_pid)
        middle.kill()
        middle.wait()
        assert survivors([child_pid], ORPHAN_GRACE_S) == []
    finally:
        reap_all([child_pid])


def test_sigterm_raises_terminated_inside_the_block_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as raised:
        with terminate_as_interrupt():
            assert os.environ["DSTBENCH_LIFELINE_OWNER"] == str(os.getpid())
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs as soon as kill() returns
    assert raised.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before and "DSTBENCH_LIFELINE_OWNER" not in os.environ


@pytest.mark.slow
def test_a_run_terminated_between_seeds_resumes_the_later_seed_only(tmp_path: Path) -> None:
    hang_file, pid_file, out = tmp_path / "hang", tmp_path / "pids", tmp_path / "runs"
    hang = {"name": "fault_hang", "label": "hang", "params": {"hang_file": str(hang_file), "pid_file": str(pid_file), "at_seed": 1}}
    timing = {"warmup_steps": 1, "segment_steps": 1, "segments": 2, "interleave": False, "per_seed": True}
    suite = tmp_path / "suite.yaml"
    data = micro_suite(plugins=[PLUGIN], methods=["dense", hang], densities=[0.5], timing=timing,
                       launcher={"name": "subprocess", "timeout_s": 600})
    data.pop("seed", None)
    suite.write_text(yaml.safe_dump({**data, "seeds": [0, 1]}))
    hang_file.touch()
    command = [sys.executable, "-m", "dstbench", "run", str(suite), "--out", str(out)]
    process = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    case_pid, server_pid = hanging_case(process, pid_file)  # seed 1's hang: seed 0 and dense@1 seed=1 are done
    [run_dir] = list(out.iterdir())
    try:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        reap_all([process.pid, case_pid, server_pid])
    assert process.returncode == 143, err
    assert "not run: hang@0.5 seed=1" in err
    before = (run_dir / "results.jsonl").read_text()
    assert [(line["case_id"], line["seed"]) for line in iter_results(run_dir)] == [("dense@1", 0), ("hang@0.5", 0), ("dense@1", 1)]
    assert json.loads((run_dir / "run.json").read_text())["interruptions"][-1]["unfinished"] == ["hang@0.5 seed=1"]

    hang_file.unlink()
    assert main(["run", str(suite), "--out", str(out), "--resume"]) == 0
    after = (run_dir / "results.jsonl").read_text()
    assert after.startswith(before)  # the finished seeds' lines untouched
    assert [(line["case_id"], line["seed"], line["status"]) for line in iter_results(run_dir)] == [
        ("dense@1", 0, "ok"), ("hang@0.5", 0, "ok"), ("dense@1", 1, "ok"), ("hang@0.5", 1, "ok")]
