"""Interleaved rounds: a group's cases time their segments in turn, A B C, B C A, ..., each in its
own live process, one running at a time.

Process sets. The rounds are spread over `timing.processes` sets of fresh processes (all of a
group's cases restarted together), so each case is timed in several processes and a process's own
speed offset shows in the samples (`segment_process`) and the interval
(`dstbench.results.intervals`). A later set trains, untimed, up to its first round, so round r covers
the same training steps in every set; the accuracy track and the profile run in the last set.

In each set the launcher starts the group's cases one after another (each builds its method and
warms up while the others wait), has each run `timing.settle_segments` untimed segments (the first
round after that wait ran slow), then asks each for one segment per round in the round's order
(`timing.round_order`: a Williams design by default, so every case follows every other equally
often: `round_order`), and at the end asks each to finish (memory, density, extras) and lets its process exit.
Whatever the machine does during a round lands on every case of the group alike, and a method's
round r pairs with its reference's round r. A case that fails (error, crash, out of memory,
time-out) leaves the rounds, and later sets; the others go on. A time-out counts the case's own
active time only (start, warm-up, its segments, finish), not the time it waits while the others run.

Device memory. The group's processes are alive together, so on CUDA the scheduler estimates before
starting each one whether it fits: the largest footprint of the cases started so far (allocator
peak during warm-up plus `CUDA_CONTEXT_ALLOWANCE_BYTES`) times the cases still to start, times
`FIT_MARGIN`, against the free memory the last started case saw. When it does not fit, the group
is split into (reference, method) pairs (`dstbench.suite.groups.split`) and those are timed instead. A
case that still runs out of memory while others of its group are alive is timed again alone
afterwards, so interleaving never causes an `oom` that a sequential run would not.

A launcher that does not interleave (torchrun: `Launcher.interleaves` false) runs each case of a group
whole, one after another, once per process set.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Iterator

from dstbench.execution.case_setup import CaseTask, Progress
from dstbench.suite.cases import Case
from dstbench.suite.groups import Group, new_group_id, split
from dstbench.results.merge import merge_shared
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


def process_shares(rounds: int, processes: int) -> list[tuple[int, int]]:
    """(first round, rounds) of each process set: `rounds` split as evenly as they go, in order."""
    processes = max(1, min(processes, rounds)) if rounds else 1
    base, extra = divmod(rounds, processes)
    shares, first = [], 0
    for index in range(processes):
        count = base + (index < extra)
        shares.append((first, count))
        first += count
    return shares


def williams_rows(cases: int) -> list[list[int]]:
    """A Williams design for `cases` cases: rounds in which every case follows every other case
    equally often and takes every position equally often; n rounds for an even n, 2n for an odd
    n (the square and its mirror image)."""
    if cases <= 1:
        return [list(range(cases))]
    first, low, high = [0], 1, cases - 1
    while len(first) < cases:  # 0, 1, n-1, 2, n-2, ...
        first.append(low)
        low += 1
        if len(first) < cases:
            first.append(high)
            high -= 1
    rows = [[(c + r) % cases for c in first] for r in range(cases)]
    return rows if cases % 2 == 0 else rows + [row[::-1] for row in rows]


def round_order(cases: int, round_index: int, order: str, seed: int) -> list[int]:
    """The indices of a group's cases in the order round `round_index` times them:

    - `williams` (the default): a Williams design, so over each block of n rounds (2n for an odd
      count) every case follows every other case equally often and holds every position equally
      often: carry-over from the case before is balanced, not confounded with a pair;
    - `rotate`: rotated by one per round; every case holds every position equally often, but B
      always follows A (carry-over goes with the pair);
    - `shuffle`: shuffled, seeded by the suite's seed and the round: balanced only on average;
    - `fixed`: as listed."""
    indices = list(range(cases))
    if order == "williams" and cases:
        rows = williams_rows(cases)
        return rows[round_index % len(rows)]
    if order == "rotate" and cases:
        shift = round_index % cases
        return indices[shift:] + indices[:shift]
    if order == "shuffle":
        random.Random(f"{seed}:{round_index}").shuffle(indices)
    return indices


@dataclasses.dataclass
class TimedGroup:
    results: list[CaseResult]
    device_type: str | None
    crowded: set[int]  # indices of the cases that failed while another case of the group was alive


def _timing(task: CaseTask) -> dict[str, Any]:
    timing = dict(task.suite.get("timing") or {})
    timed = Case.from_dict(task.case).mode(str(task.suite.get("mode", "speed"))) in ("speed", "both")
    return {
        "segments": int(timing.get("segments", 0)) if timed else 0, "processes": int(timing.get("processes", 1)),
        "settle": int(timing.get("settle_segments", 0)), "order": str(timing.get("round_order", "fixed")),
        "seed": int(task.suite.get("seed") or 0),
    }


def process_tasks(task: CaseTask) -> list[CaseTask]:
    """The task of each process set that times `task`'s case (one when it is not timed)."""
    timing = _timing(task)
    shares = process_shares(timing["segments"], timing["processes"])
    last = len(shares) - 1
    return [
        dataclasses.replace(task, process=index, first_round=first, rounds=count, extras=index == last)
        for index, (first, count) in enumerate(shares)
    ]


def time_process_set(
    launcher: Launcher, group: Group, group_id: str, tasks: list[CaseTask], progress_for: Callable[[Case], Progress]
) -> TimedGroup | None:
    """Time one process set of a group: fresh processes for its cases, its share of the rounds.
    None when it does not fit in device memory (its processes are gone then)."""
    handles: list[CaseProcess] = []
    crowded: set[int] = set()
    alive: set[int] = set()  # started, not failed, not finished
    timing = _timing(tasks[0])
    process, first_round = tasks[0].process, tasks[0].first_round

    def step(index: int, call: Callable[[], Any]) -> Any:
        value = call()
        if handles[index].failed is not None and index in alive:
            alive.discard(index)
            if alive:
                crowded.add(index)
        return value

    def live(index: int) -> bool:
        return handles[index].failed is None

    try:
        for index, case in enumerate(group.cases):
            handle = launcher.open(tasks[index], progress_for(case))
            handles.append(handle)
            alive.add(index)
            step(index, handle.start)
            if len(group.cases) > 1 and not fits([h.ready for h in handles if h.failed is None], len(group.cases) - index - 1):
                return None
        rounds = max([h.ready["segments"] for h in handles if h.failed is None and h.ready], default=0)
        pids = tuple(h.pid for h in handles if h.failed is None and h.pid is not None)
        for _ in range(timing["settle"] if rounds else 0):  # untimed: the first round after warm-up runs slow
            for slot, index in enumerate(round_order(len(handles), first_round, timing["order"], timing["seed"])):
                if live(index):
                    tag = SegmentTag(group_id, first_round, pids, process, slot, settle=True)
                    step(index, lambda: handles[index].segment(tag))
        for offset in range(rounds):
            round_index = first_round + offset
            pids = tuple(h.pid for h in handles if h.failed is None and h.pid is not None)
            for slot, index in enumerate(round_order(len(handles), round_index, timing["order"], timing["seed"])):
                handle = handles[index]
                if live(index) and offset < handle.ready.get("segments", 0):
                    tag = SegmentTag(group_id, round_index, pids, process, slot)
                    step(index, lambda: handle.segment(tag))
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


def _time_group(
    launcher: Launcher, group: Group, group_id: str, tasks: dict[str, CaseTask], progress_for: Callable[[Case], Progress]
) -> TimedGroup | None:
    """Time one group in its process sets (`timing.processes`), one set after another, each
    with fresh processes for all the group's cases; a case's lines from the sets are merged (its
    samples from every set). A case that failed in one set is not started in the next: its
    failure is its result. None when a set does not fit in device memory."""
    per_case = [process_tasks(tasks[case.key]) for case in group.cases]
    merged: list[CaseResult | None] = [None] * len(group.cases)
    crowded: set[int] = set()
    device_type = None
    for process in range(max(len(t) for t in per_case)):
        members = [i for i, t in enumerate(per_case) if process < len(t) and (merged[i] is None or merged[i].status == "ok")]
        if not members:
            break
        subgroup = Group(group.key, tuple(group.cases[i] for i in members))
        timed = time_process_set(launcher, subgroup, group_id, [per_case[i][process] for i in members], progress_for)
        if timed is None:
            return None
        device_type = device_type or timed.device_type
        crowded |= {members[i] for i in timed.crowded}
        for i, result in zip(members, timed.results):
            merged[i] = result if merged[i] is None else merge_shared(merged[i].to_dict(), result)
    return TimedGroup([r for r in merged if r is not None], device_type, crowded)


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
                result = None
                for task in process_tasks(tasks[case.key]):  # one job per process set
                    part = launcher.run(task, progress_for(case))
                    part.groups = part.groups or [new_group_id(case.key)]
                    result = part if result is None else merge_shared(result.to_dict(), part)
                    if result.status != "ok":
                        break
                assert result is not None
                yield GroupRun(Group(case.key, (case,)), result.groups[0], [result])
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
                    results[index] = run_alone(launcher, tasks[case.key], progress_for(case), key=f"{group.base}|{case.method}")
                    results[index].warnings.append(OOM_ALONE)
        yield GroupRun(group, group_id, results)


def run_alone(launcher: Launcher, task: CaseTask, progress: Progress, key: str | None = None) -> CaseResult:
    """One case in a group of its own, start to end: a launcher's `run`. `key`: the group key to
    file it under (default: its case key, `Case.key`)."""
    case = Case.from_dict(task.case)
    group = Group(key or case.key, (case,))
    timed = _time_group(launcher, group, new_group_id(group.key), {case.key: task}, lambda c: progress)
    assert timed is not None  # a single case never waits for memory beside others
    return timed.results[0]
