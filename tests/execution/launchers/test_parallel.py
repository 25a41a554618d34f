"""`launcher: {name: subprocess, parallel: N}`: cases at once, each pinned to its own cores (or GPU),
each line written once; the combinations that would time cases side by side on one device refused."""

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
from dstbench.execution.launchers.subprocess.placement import plan_slots, visible_gpus
from dstbench.results.record import iter_results
from dstbench.execution.orchestrator import plan_run, run_suite
from dstbench.util.files import RESULTS_FILE
from dstbench.suite.loading import SuiteError, parse_suite
from tests.conftest import micro_suite
from tests.faults.processes import reap_all, survivors, wait_for_file
from tests.execution.launchers.fault_methods import PLUGIN

ROOT = Path(__file__).resolve().parents[3]
SIDE_BY_SIDE = {"warmup_steps": 1, "segment_steps": 1, "segments": 2, "interleave": False}


def write_suite(path: Path, **overrides: object) -> Path:
    path.write_text(yaml.safe_dump(micro_suite(**overrides)))
    return path


def test_slots_split_the_cores_and_take_a_gpu_each() -> None:
    placements, problems = plan_slots(2, "cpu", [0, 1, 2, 3, 4], [])
    assert problems == []
    assert [p.cores for p in placements] == [(0, 1), (2, 3)]  # equal, disjoint shares; core 4 unused
    assert [p.cuda_device for p in placements] == [None, None]
    assert placements[1].env() == {"cpu_affinity": [2, 3], "cuda_visible_devices": None, "parallel": {"slot": 1, "slots": 2}}
    placements, problems = plan_slots(2, "cuda", [0, 1, 2, 3], ["GPU-aa", "GPU-bb", "GPU-cc"])
    assert problems == [] and [p.cuda_device for p in placements] == ["GPU-aa", "GPU-bb"]


@pytest.mark.parametrize(
    "args, fragment",
    [
        ((3, "cuda", [0, 1, 2, 3], ["0", "1"], None), "3 cases at once need 3 GPUs, one each; this process sees 2"),
        ((3, "cpu", [0, 1], [], None), "need a core each; this process may run on 2"),
        ((2, "cpu", [0, 1, 2, 3], [], 4), "threads: 4 threads per case would oversubscribe each case's share of 2 core(s)"),
        ((2, "mps", [0, 1], [], None), "mps is one device"),
    ],
)
def test_slots_that_cannot_be_placed_say_why(args: tuple, fragment: str) -> None:
    placements, problems = plan_slots(*args)
    assert placements == [] and any(fragment in p for p in problems), problems


def test_visible_gpus_follow_the_drivers_own_list(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    assert visible_gpus() == ["5", "7"]  # a slot's child gets the driver's physical GPU, not "0"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpus() == ["0", "1"]


def test_interleaved_speed_groups_side_by_side_on_the_cpu_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    launcher = {"name": "subprocess", "parallel": 2}
    suite = write_suite(tmp_path / "cpu.yaml", launcher=launcher)  # speed, interleaved by default
    assert main(["run", str(suite), "--dry-run"]) == 2
    assert "launcher.parallel: interleaved speed groups would run side by side on one CPU" in capsys.readouterr().err
    # device auto: refused once the run finds itself on the CPU (this host has no GPU).
    if not __import__("torch").cuda.is_available():
        with pytest.raises(SuiteError, match="device auto is the CPU here"):
            plan_run(write_suite(tmp_path / "auto.yaml", device="auto", launcher=launcher), out=tmp_path / "runs")
    # What is allowed: cases timed one by one, or accuracy; and only the subprocess launcher has slots.
    parse_suite(micro_suite(launcher=launcher, timing=SIDE_BY_SIDE))
    with pytest.raises(SuiteError, match="parallel: cases at once on one host is the subprocess launcher's"):
        parse_suite(micro_suite(launcher={"name": "torchrun", "parallel": 2}))


def test_two_cases_run_at_once_on_disjoint_cores_and_each_line_is_written_once(tmp_path: Path) -> None:
    # Each case waits in its first segment until both have arrived: run one after another, they fail.
    meet = tmp_path / "meet"
    meet.mkdir()
    params = {"folder": str(meet), "expect": 2, "wait_s": 120}
    methods = [{"name": "rendezvous", "label": label, "params": params} for label in ("a", "b")]
    suite = write_suite(
        tmp_path / "suite.yaml", plugins=[PLUGIN], methods=methods, densities=[0.5], timing=SIDE_BY_SIDE, threads=None,
        launcher={"name": "subprocess", "parallel": 2, "timeout_s": 300},
    )
    run_dir = run_suite(suite, out=tmp_path / "runs")
    lines = [json.loads(raw) for raw in (run_dir / RESULTS_FILE).read_text().splitlines()]
    assert sorted(line["case_id"] for line in lines) == ["a@0.5", "b@0.5"]  # once each
    assert all(line["status"] == "ok" for line in lines), [line["error"] for line in lines]
    cores = [line["env"]["cpu_affinity"] for line in lines]
    assert all(cores) and not set(cores[0]) & set(cores[1])
    for line in lines:
        # The case ran inside its share (its own record agrees) and trained on that many threads.
        assert line["env"]["affinity_cores"] == line["env"]["cpu_affinity"] and line["env"]["threads"] == len(line["env"]["cpu_affinity"])
        assert line["env"]["parallel"]["slots"] == 2
        assert any("timed side by side with 1 other case" in w for w in line["warnings"])
    assert {line["env"]["parallel"]["slot"] for line in lines} == {0, 1}


@pytest.mark.slow
def test_sigterm_stops_every_slot_and_leaves_no_case_process(tmp_path: Path) -> None:
    hang_file, pid_file = tmp_path / "hang", tmp_path / "pids"
    hang = {"hang_file": str(hang_file), "pid_file": str(pid_file)}
    methods = ["dense", {"name": "fault_hang", "label": "hang", "params": hang}]
    suite = write_suite(
        tmp_path / "suite.yaml", plugins=[PLUGIN], methods=methods, densities=[0.5], timing=SIDE_BY_SIDE,
        launcher={"name": "subprocess", "parallel": 2, "timeout_s": 600},
    )
    hang_file.touch()
    out = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "dstbench", "run", str(suite), "--out", str(out)], env=env, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids = [int(pid) for pid in wait_for_file(pid_file, 240, "the hanging case").split()]  # case, fork server
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
        reap_all(pids)
    assert process.returncode == 143, err
    assert survivors(pids, 10.0) == []
    [run_dir] = list(out.iterdir())
    lines = list(iter_results(run_dir))
    # dense ran beside the hanging case: its line stays (written once); the hanging case has none.
    assert [line["case_id"] for line in lines] in ([], ["dense@1"])
    assert "hang@0.5" in json.loads((run_dir / "run.json").read_text())["interruptions"][-1]["unfinished"]


@pytest.mark.cuda
@pytest.mark.skipif(__import__("torch").cuda.device_count() < 2, reason="needs two CUDA devices")
def test_interleaved_groups_run_at_once_each_on_its_own_gpu(tmp_path: Path) -> None:
    suite = write_suite(
        tmp_path / "suite.yaml", device="cuda", methods=["dense", "set"], densities=[0.1, 0.5], timing=SIDE_BY_SIDE | {"interleave": True},
        threads=None, launcher={"name": "subprocess", "parallel": 2, "timeout_s": 300},
    )
    run_dir = run_suite(suite, out=tmp_path / "runs")
    lines = {line["case_id"]: line for line in iter_results(run_dir)}
    assert all(line["status"] == "ok" for line in lines.values())
    # Each density's group on its own card; dense, in both groups, holds segments from both.
    assert lines["set@0.1"]["env"]["gpu_uuid"] != lines["set@0.5"]["env"]["gpu_uuid"]
    assert len(lines["dense@1"]["groups"]) == 2
