"""Interleaved rounds: a group's cases time their segments in turn, A B C A B C ..., each in its own
live process, one running at a time.

The launcher starts the group's cases one after another (each builds its method and warms up while
the others wait), then asks each for one segment per round, in the group's order, and at the end
asks each to finish (memory, density, extras) and lets its process exit. Whatever the machine does
during a round lands on every case of the group alike, and a method's round r pairs with its
reference's round r. A case that fails (error, crash, out of memory, time-out) leaves the rounds;
the others go on. A time-out counts the case's own active time only (start, warm-up, its segments,
finish), not the time it waits while the others run.

Device memory. The group's processes are alive together, so on CUDA the scheduler estimates before
starting each one whether it fits: the largest footprint of the cases started so far (allocator
peak during warm-up plus `CUDA_CONTEXT_ALLOWANCE_BYTES`) times the cases still to start, times
`FIT_MARGIN`, against the free memory the last started case saw. When it does not fit, the group
is split into (reference, method) pairs (`dstbench.suite.groups.split`) and those are timed instead. A
case that still runs out of memory while others of its group are alive is timed again alone
afterwards, so interleaving never causes an `oom` that a sequential run would not.

A launcher that does not interleave (torchrun: `Launcher.interleaves` false) runs each case of a group
whole, one after another.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator

from dstbench.execution.case_setup import CaseTask, Progress
from dstbench.suite.cases import Case
from dstbench.suite.groups import Group, new_group_id, split
from dstbench.results.record import CaseResult
from dstbench.execution.case_session import SegmentTag
from dstbench.execution.launchers.base import CaseProcess, GroupRun, Launcher

FIT_MARGIN = 1.2
OOM_ALONE = "out of memory beside its group's other processes; timed again alone (its speedup is unpaired)"


def fits(readies: list[dict[str, Any]], still_to_start: int) -> bool:
    """Whether `still_to_start` more cases fit beside those started (see the module docstring)."""
    memory = [r.get("memory") for r in readies if r and r.get("memory")]
    if not memory or still_to_start <= 0:
        return True
    footprint = max(m["footprint_bytes"] for m in memory)
    return memory[-1]["free_bytes"] >= footprint * still_to_start * FIT_MARGIN


@dataclasses.dataclass
class TimedGroup:
    results: list[CaseResult]
    device_type: str | None
    crowded: set[int]  # indices of the cases that failed while another case of the group was alive


def _time_group(
    launcher: Launcher, group: Group, group_id: str, tasks: dict[str, CaseTask], progress_for: Callable[[Case], Progress]
) -> TimedGroup | None:
    """Time one group. None when it does not fit in device memory (its processes are gone then)."""
    handles: list[CaseProcess] = []
    crowded: set[int] = set()
    alive: set[int] = set()  # started, not failed, not finished

    def step(index: int, call: Callable[[], Any]) -> Any:
        value = call()
        if handles[index].failed is not None and index in alive:
            alive.discard(index)
            if alive:
                crowded.add(index)
        return value

    try:
        for index, case in enumerate(group.cases):
            handle = launcher.open(tasks[case.case_id], progress_for(case))
            handles.append(handle)
            alive.add(index)
            step(index, handle.start)
            if len(group.cases) > 1 and not fits([h.ready for h in handles if h.failed is None], len(group.cases) - index - 1):
                return None
        rounds = max([h.ready["segments"] for h in handles if h.failed is None and h.ready], default=0)
        for round_index in range(rounds):
            pids = tuple(h.pid for h in handles if h.failed is None and h.pid is not None)
            for index, handle in enumerate(handles):
                if handle.failed is None and round_index < handle.ready.get("segments", 0):
                    step(index, lambda: handle.segment(SegmentTag(group_id, round_index, pids)))
        results = []
        for index, handle in enumerate(handles):
            was_alive = index in alive
            result = handle.finish()
            alive.discard(index)
            if was_alive and result.status == "oom" and alive:  # ran out of memory finishing, beside the rest
                crowded.add(index)
            results.append(result)
            handle.close()  # a case process exits here: the group's memory shrinks as it finishes
        for result in results:
            result.groups = [group_id]
        device_type = next((h.ready["device_type"] for h in handles if h.ready), None)
        return TimedGroup(results, device_type, crowded)
    finally:
        for handle in handles:
            handle.close()


def run_groups(
    launcher: Launcher,
    groups: list[Group],
    tasks: dict[str, CaseTask],
    progress_for: Callable[[Case], Progress],
    reference: str,
) -> Iterator[GroupRun]:
    """Time the groups one after another (at most one group's processes alive); yields each group
    as it ends, so its lines can be written before the next starts."""
    queue = list(groups)
    while queue:
        group = queue.pop(0)
        if not launcher.interleaves:
            for case in group.cases:  # torchrun: each case whole, alone (its ranks name their group)
                result = launcher.run(tasks[case.case_id], progress_for(case))
                result.groups = result.groups or [new_group_id(case.case_id)]
                yield GroupRun(Group(case.case_id, (case,)), result.groups[0], [result])
            continue
        group_id = new_group_id(group.key)
        timed = _time_group(launcher, group, group_id, tasks, progress_for)
        if timed is None:
            queue[:0] = split(group, reference)
            continue
        results = timed.results
        if timed.device_type == "cuda":
            for index, result in enumerate(results):
                if result.status == "oom" and index in timed.crowded:  # the others are gone now: try it as a sequential run would
                    case = group.cases[index]
                    results[index] = run_alone(launcher, tasks[case.case_id], progress_for(case), key=f"{group.base}|{case.method}")
                    results[index].warnings.append(OOM_ALONE)
        yield GroupRun(group, group_id, results)


def run_alone(launcher: Launcher, task: CaseTask, progress: Progress, key: str | None = None) -> CaseResult:
    """One case in a group of its own, start to end: a launcher's `run`. `key`: the group key to
    file it under (default: its case id)."""
    case = Case.from_dict(task.case)
    group = Group(key or case.case_id, (case,))
    timed = _time_group(launcher, group, new_group_id(group.key), {case.case_id: task}, lambda c: progress)
    assert timed is not None  # a single case never waits for memory beside others
    return timed.results[0]
