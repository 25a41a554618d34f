"""The scheduler's GPU decisions, with pretend case processes: a group that would not fit in device
memory is split into (reference, method) pairs, and an out-of-memory case is timed again alone."""

from __future__ import annotations

from typing import Any

from dstbench.execution.case_setup import CaseTask
from dstbench.suite.cases import Case
from dstbench.suite.groups import base_key, plan_groups
from dstbench.results.record import CaseResult
from dstbench.execution.case_session import SegmentTag
from dstbench.execution.launchers.base import Launcher
from dstbench.execution.rounds import OOM_ALONE, run_alone, run_groups

GIB = 2**30


class FakeLauncher(Launcher):
    """Cases on a pretend GPU of `free_gib` free memory, each taking `need_gib` once started."""

    interleaves = True

    def __init__(self, free_gib: float, need_gib: float, oom_beside_others: str | None = None, oom_always: str | None = None) -> None:
        self.free, self.need, self.oom_case, self.oom_always = free_gib * GIB, need_gib * GIB, oom_beside_others, oom_always
        self.alive: list[FakeCase] = []
        self.log: list[tuple[str, Any]] = []

    def open(self, task: CaseTask, progress: Any) -> "FakeCase":
        return FakeCase(self, task)

    def run(self, task: CaseTask, progress: Any) -> CaseResult:
        return run_alone(self, task, progress)


class FakeCase:
    def __init__(self, launcher: FakeLauncher, task: CaseTask) -> None:
        self.launcher, self.case = launcher, Case.from_dict(task.case)
        self.pid, self.ready, self.failed = 1000 + len(launcher.log), None, None
        self.segments: list[SegmentTag] = []

    def start(self) -> None:
        self.launcher.alive.append(self)
        others = len(self.launcher.alive) - 1
        self.launcher.log.append(("start", self.case.case_id, others))
        free = self.launcher.free - self.launcher.need * len(self.launcher.alive)
        self.ready = {"device_type": "cuda", "segments": 2,
                      "memory": {"footprint_bytes": int(self.launcher.need), "free_bytes": int(free), "total_bytes": 80 * GIB}}
        if (self.case.case_id == self.launcher.oom_case and others) or self.case.case_id == self.launcher.oom_always:
            self.failed = self._result("oom")

    def segment(self, tag: SegmentTag) -> dict[str, Any]:
        self.segments.append(tag)
        return {"ms": 1.0}

    def _result(self, status: str) -> CaseResult:
        return CaseResult(suite="s", suite_hash="h", case_id=self.case.case_id, method=self.case.method,
                          method_name=self.case.method_name, kind=self.case.kind, density=self.case.density,
                          params={}, status=status, segment_ms=[1.0] * len(self.segments))

    def finish(self) -> CaseResult:
        return self.failed or self._result("ok")

    def close(self) -> None:
        if self in self.launcher.alive:
            self.launcher.alive.remove(self)


def _run(launcher: FakeLauncher) -> list:  # type: ignore[type-arg]
    cases = [Case("dense", "dense", "dense", 1.0), Case("rigl", "rigl", "masked", 0.1),
             Case("set", "set", "masked", 0.1), Case("barter", "barter", "compact", 0.1)]
    tasks = {c.case_id: CaseTask({}, "s.yaml", c.to_dict(), ".") for c in cases}
    groups = plan_groups(cases, "rigl", interleave=True)
    return list(run_groups(launcher, groups, tasks, lambda case: lambda *a: None, "rigl"))


def test_a_group_that_fits_is_timed_whole() -> None:
    [timed] = _run(FakeLauncher(free_gib=80, need_gib=10))
    assert [r.case_id for r in timed.results] == ["rigl@0.1", "dense@1", "set@0.1", "barter@0.1"]
    assert all(r.status == "ok" and r.groups == [timed.group_id] for r in timed.results)


def test_a_group_that_would_not_fit_is_split_into_pairs_with_the_reference() -> None:
    launcher = FakeLauncher(free_gib=40, need_gib=10)  # 4 x 10 GiB x 1.2 does not fit in 40
    runs = _run(launcher)
    assert [[r.case_id for r in run.results] for run in runs] == [
        ["rigl@0.1", "dense@1"], ["rigl@0.1", "set@0.1"], ["rigl@0.1", "barter@0.1"],
    ]
    assert {base_key(run.group_id) for run in runs} == {"d=0.1"}
    assert max(others for _, _, others in launcher.log) == 1  # never more than a pair alive


def test_an_out_of_memory_case_beside_others_is_timed_again_alone() -> None:
    launcher = FakeLauncher(free_gib=80, need_gib=10, oom_beside_others="set@0.1")
    [timed] = _run(launcher)
    again = {r.case_id: r for r in timed.results}["set@0.1"]
    assert again.status == "ok" and OOM_ALONE in again.warnings
    assert ("start", "set@0.1", 0) in launcher.log  # the retry had the GPU to itself
    assert base_key(again.groups[0]) == "d=0.1"


def test_a_case_out_of_memory_on_its_own_is_not_timed_again() -> None:
    # rigl starts first, with nothing else alive: its oom is its own, a retry would only repeat it.
    launcher = FakeLauncher(free_gib=80, need_gib=10, oom_always="rigl@0.1")
    [timed] = _run(launcher)
    failed = {r.case_id: r for r in timed.results}["rigl@0.1"]
    assert failed.status == "oom" and OOM_ALONE not in failed.warnings
    assert [entry for entry in launcher.log if entry[1] == "rigl@0.1"] == [("start", "rigl@0.1", 0)]
