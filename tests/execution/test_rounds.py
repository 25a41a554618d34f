"""Interleaved groups: rounds alternate between live cases, lines carry their group, and `--resume`
times an interrupted group again, whole."""

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

from dstbench.suite.cases import Case

from dstbench.suite.plan import expand_cases
from dstbench.results.merge import merge_shared, strip_group
from dstbench.suite.groups import base_key, group_done, plan_groups, shared_cases, split
from dstbench.results.record import CaseResult, iter_results
from dstbench.execution.orchestrator import run_suite
from dstbench.execution.rounds import fits
from dstbench.suite.loading import parse_suite
from tests.conftest import micro_suite
from tests.faults.processes import start_with_sigint
from tests.execution.launchers.fault_methods import PLUGIN

ROOT = Path(__file__).resolve().parents[2]


def _suite_file(tmp_path: Path, **overrides) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(micro_suite(**overrides)))
    return path


def test_plan_puts_the_reference_and_dense_in_every_density_group() -> None:
    suite = parse_suite(micro_suite(methods=["dense", "set", "rigl"], densities=[0.5, 0.1], reference="rigl"))
    cases = expand_cases(suite)
    groups = plan_groups(cases, "rigl", interleave=True)
    assert [g.key for g in groups] == ["d=0.5", "d=0.1"]
    assert [[c.case_id for c in g.cases] for g in groups] == [
        ["rigl@0.5", "dense@1", "set@0.5"], ["rigl@0.1", "dense@1", "set@0.1"],
    ]
    assert shared_cases(groups) == {"dense@1"}
    assert [g.key for g in plan_groups(cases, "rigl", interleave=False)] == [c.case_id for c in cases]
    pairs = split(groups[1], "rigl")
    assert [[c.case_id for c in g.cases] for g in pairs] == [["rigl@0.1", "dense@1"], ["rigl@0.1", "set@0.1"]]
    assert {base_key(g.key + "#abc123") for g in pairs} == {"d=0.1"}
    assert [len(g.cases) for g in split(pairs[0], "rigl")] == [1, 1]


def test_fit_estimate_splits_a_group_that_would_not_fit() -> None:
    gib = 2**30
    started = [{"memory": {"footprint_bytes": 10 * gib, "free_bytes": 50 * gib, "total_bytes": 80 * gib}}]
    assert fits(started, 3)  # 3 more of 10 GiB, with the margin 36 GiB, fit in 50
    assert not fits(started, 5)  # 60 GiB do not
    assert fits([{"memory": None}], 50)  # no device memory to run out of (CPU)


def test_segments_of_a_group_alternate_and_lines_carry_their_group(tmp_path: Path) -> None:
    suite = _suite_file(tmp_path, methods=["dense", "set", "rigl"], densities=[0.5], reference="rigl")
    run_dir = run_suite(suite, out=tmp_path / "runs")
    lines = {line["case_id"]: line for line in iter_results(run_dir)}
    assert set(lines) == {"dense@1", "set@0.5", "rigl@0.5"}
    [group_id] = {g for line in lines.values() for g in line["groups"]}
    assert base_key(group_id) == "d=0.5"
    samples = sorted(
        (start, r, case) for case, line in lines.items()
        for start, r, g in zip(line["segment_start_s"], line["segment_round"], line["segment_group"], strict=True)
        if g == group_id
    )
    # Recorded start times: one segment of each case per round, round after round, the group's
    # order rotated by one each round (rounds 0-1 in the first process set, 2 in the second).
    order = ("rigl@0.5", "dense@1", "set@0.5")
    assert [(r, case) for _, r, case in samples] == [(r, order[(r + k) % 3]) for r in range(3) for k in range(3)]
    for line in lines.values():
        assert line["segment_process"] == [0, 0, 1] and len(line["settle_ms"]) == 2  # one per set
        assert sorted(line["segment_slot"]) != [0, 0, 0] and len(set(line["segment_slot"])) == 3
    for line in lines.values():
        noise = line["noise"]
        assert len(noise["cpu_share"]) == len(noise["involuntary_switches"]) == len(line["segment_ms"]) == 3
        assert noise["threads"] == 1 and line["env"]["threads"] == 1
        assert isinstance(noise["contended"], bool) and noise["rule"].startswith("starved: ")
        assert noise["hand_over_ms"] == [None] * 3  # the inprocess launcher's cases share one process: no hand-over


def _line(case_id: str, groups: list[str], ms: list[float], **fields) -> dict:  # type: ignore[no-untyped-def]
    method, density = case_id.split("@")
    return CaseResult(
        suite="s", suite_hash="h", case_id=case_id, method=method, method_name=method, kind="dense",
        density=float(density), params={}, batch_size=8, segment_steps=3, segment_ms=ms,
        segment_group=[g for g in groups for _ in range(len(ms) // len(groups))],
        segment_round=[r for _ in groups for r in range(len(ms) // len(groups))],
        segment_start_s=[float(i) for i in range(len(ms))], groups=groups,
        noise={"cpu_share": [1.0] * len(ms), "involuntary_switches": [0] * len(ms)}, env={"device_type": "cpu"}, **fields,
    ).to_dict()


def test_a_shared_case_keeps_every_groups_segments_and_drops_a_retimed_groups() -> None:
    old = _line("dense@1", ["d=0.5#aaa", "d=0.1#bbb"], [10.0, 11.0, 30.0, 31.0])
    stripped = strip_group(old, "d=0.1")
    assert stripped["groups"] == ["d=0.5#aaa"] and stripped["segment_ms"] == [10.0, 11.0]
    assert stripped["noise"]["cpu_share"] == [1.0, 1.0]
    totals = strip_group({**old, "duration_s": 8.0, "topology_updates": 2, "energy": {"measured": True, "joules": 5.0}}, "d=0.1")
    assert totals["duration_s"] == 4.0 and totals["topology_updates"] == 1 and not totals["energy"]["measured"]
    merged = merge_shared(stripped, CaseResult.from_dict(_line("dense@1", ["d=0.1#ccc"], [12.0, 13.0])))
    assert merged.groups == ["d=0.5#aaa", "d=0.1#ccc"]
    assert merged.segment_ms == [10.0, 11.0, 12.0, 13.0] and merged.segment_group[-1] == "d=0.1#ccc"
    assert merged.median_ms == pytest.approx(11.5) and len(merged.noise["starved"]) == 4
    failed = CaseResult.from_dict({**_line("dense@1", ["d=0.1#ddd"], []), "status": "crash", "error": "boom"})
    crashed = merge_shared(stripped, failed)
    assert crashed.status == "crash" and crashed.groups == ["d=0.5#aaa", "d=0.1#ddd"]
    assert strip_group(crashed.to_dict(), "d=0.1") is None  # timed again, d=0.1's result replaces the failure
    lines = {"dense@1": stripped}
    group = plan_groups([Case("dense", "dense", "dense", 1.0), Case("rigl", "rigl", "masked", 0.1)], "rigl", interleave=True)[0]
    assert not group_done(group, lines, {"dense@1"})  # dense lacks d=0.1 and rigl has no line


def test_dense_keeps_each_densitys_segments_when_densities_run_one_at_a_time(tmp_path: Path) -> None:
    # `--density 0.5`, then `--resume --density 0.1`: dense is in one group of each selection, yet
    # its line must end up with both groups' segments, not the last one's only.
    suite = _suite_file(tmp_path, methods=["dense", "rigl"], densities=[0.5, 0.1], reference="rigl")
    run_dir = run_suite(suite, out=tmp_path / "runs", densities=[0.5])
    run_suite(suite, out=tmp_path / "runs", resume=str(run_dir), densities=[0.1])
    lines = {line["case_id"]: line for line in iter_results(run_dir)}
    assert set(lines) == {"dense@1", "rigl@0.5", "rigl@0.1"}
    assert sorted(base_key(g) for g in lines["dense@1"]["groups"]) == ["d=0.1", "d=0.5"]
    assert len(lines["dense@1"]["segment_ms"]) == 6
    # Resumed again with nothing selected left to time: no line changes.
    run_suite(suite, out=tmp_path / "runs", resume=str(run_dir), densities=[0.5])
    assert {line["case_id"]: line for line in iter_results(run_dir)} == lines


@pytest.mark.slow
def test_resume_of_an_interrupted_interleaved_group_times_it_again_whole(tmp_path: Path) -> None:
    """Kill a real interleaved `dstbench run` inside its second group, plant a stale line of that
    group, resume: the group is timed again whole and each case has exactly one line."""
    suite = _suite_file(
        tmp_path,
        plugins=[PLUGIN],
        methods=["dense", {"name": "fault_hang", "label": "hang", "params": {"at_density": 0.1}},
                 {"name": "set", "label": "last"}],
        densities=[0.5, 0.1],
        launcher={"name": "subprocess", "timeout_s": 600},
    )
    out = tmp_path / "runs"
    hang_file = tmp_path / "hang"
    hang_file.touch()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DSTBENCH_FAULT_HANG_FILE": str(hang_file)}
    command = [sys.executable, "-m", "dstbench", "run", str(suite), "--out", str(out)]
    process = start_with_sigint(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # the first group's lines; the second group then hangs
            run_dirs = [p for p in out.iterdir() if p.is_dir()] if out.exists() else []
            if run_dirs and len(list(iter_results(run_dirs[0]))) == 3:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the first group never finished")
        time.sleep(1.0)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    assert process.returncode == 130
    [run_dir] = run_dirs
    first = {line["case_id"]: line for line in iter_results(run_dir)}
    assert set(first) == {"dense@1", "hang@0.5", "last@0.5"}  # nothing of the interrupted group
    # A line of the second group left by an earlier, interrupted timing must not survive the resume.
    stale = dict(first["last@0.5"], case_id="last@0.1", density=0.1, groups=["d=0.1#stale0"])
    with open(run_dir / "results.jsonl", "a") as handle:
        handle.write(json.dumps(stale) + "\n")

    hang_file.unlink()
    resumed = subprocess.run(command + ["--resume"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    lines = list(iter_results(run_dir))
    ids = [line["case_id"] for line in lines]
    assert sorted(ids) == sorted(["dense@1", "hang@0.5", "last@0.5", "hang@0.1", "last@0.1"])  # one line each
    by_id = {line["case_id"]: line for line in lines}
    for case_id in ("hang@0.5", "last@0.5"):
        assert by_id[case_id] == first[case_id]  # the finished group was not timed again
    [retimed] = set(by_id["hang@0.1"]["groups"])
    assert base_key(retimed) == "d=0.1" and by_id["last@0.1"]["groups"] == [retimed]
    assert set(by_id["last@0.1"]["segment_group"]) == {retimed}
    dense = by_id["dense@1"]
    assert dense["groups"] == first["dense@1"]["groups"] + [retimed]
    assert len(dense["segment_ms"]) == 6 and dense["segment_group"][3:] == [retimed] * 3
