"""`launcher: {name: subprocess, parallel: N}`: N groups at once on one host, each slot on its own GPU
and its own share of the cores (`dstbench.execution.launchers.subprocess.placement`).

Each slot is a thread of the driver that takes the next group and times it exactly as a sequential
run would (`dstbench.execution.rounds.run_groups`: a case alone, or an interleaved group's rounds on the
slot's GPU), in case processes pinned to the slot. The driver's main thread writes each group's
lines as it ends, in whatever order the slots finish (`dstbench.execution.orchestrator.write_group`), so a line is
written once, by one process.

What may run side by side (checked before the run, exit 2 otherwise):

- interleaved speed groups (`mode: speed`, `timing.interleave: true`): on CUDA only, each group on
  its own GPU, so a group's rounds still compare its cases on one device; never on the CPU, where
  groups would share its memory bandwidth and caches;
- cases timed one by one (`interleave: false`, `mode: both`): on CUDA each on its own GPU (a
  speedup then compares two cards: `env.gpu_uuid` says which); on the CPU each line carries a
  warning that it was timed beside others;
- accuracy cases: anywhere (their figures do not depend on time).

Ctrl-C or SIGTERM stops the slots: the live case processes are killed and their cases get no line.
The fork server is started from the main thread first: a child bound to its parent
(`dstbench.execution.lifeline`) dies when the thread that started it exits, and slots are threads.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from typing import Any, Callable, Iterator

from dstbench.execution.case_setup import CaseTask, Progress
from dstbench.suite.cases import Case
from dstbench.suite.groups import Group
from dstbench.execution.launchers.base import GroupRun, register_launcher
from dstbench.execution.launchers.subprocess.config import SubprocessConfig
from dstbench.execution.launchers.subprocess.placement import CPU_SIDE_BY_SIDE, Placement, placements_for
from dstbench.execution.launchers.subprocess.launcher import SubprocessCase, SubprocessLauncher, _context
from dstbench.execution.rounds import run_groups
from dstbench.suite.loading import parse_suite

STOP_GRACE_S = 30.0  # how long Ctrl-C waits for the slots to see their processes gone


class _Stopped(Exception):
    """The run is stopping: a slot starts no new case process."""


class _Slots:
    """What the slots share: the stop flag and their live case processes (to kill on stop)."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.live: set[SubprocessCase] = set()

    def kill_live(self) -> None:
        with self.lock:
            cases = list(self.live)
        for case in cases:
            try:
                if case.process is not None:
                    case.process.kill()
            except (OSError, ValueError, AttributeError):
                pass  # gone already


class _SlotCase(SubprocessCase):
    def __init__(self, slots: _Slots, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = slots

    def close(self) -> None:
        super().close()
        with self.slots.lock:
            self.slots.live.discard(self)


class _SlotLauncher(SubprocessLauncher):
    """A subprocess launcher whose case processes run pinned to one placement."""

    def __init__(self, timeout_s: float, placement: Placement, slots: _Slots) -> None:
        super().__init__(timeout_s)
        self.placement, self.slots = placement, slots

    def open(self, task: CaseTask, progress: Progress) -> SubprocessCase:
        with self.slots.lock:
            if self.slots.stopping.is_set():
                raise _Stopped()
            case = _SlotCase(self.slots, _context(), task, progress, self.timeout_s, self.placement)
            self.slots.live.add(case)
        return case


@register_launcher("parallel")
class ParallelLauncher(SubprocessLauncher):
    """The subprocess launcher, `parallel` groups at once (see the module docstring). It still
    interleaves: the groups it plans are those of a sequential run, each timed in a slot."""

    places_groups = True

    def __init__(self, timeout_s: float, parallel: int) -> None:
        super().__init__(timeout_s)
        self.parallel = parallel
        self.placements: list[Placement] | None = None
        self.warning: str | None = None  # what each line says when it was timed beside others on the CPU

    @classmethod
    def from_config(cls, config: SubprocessConfig) -> "ParallelLauncher":
        return cls(timeout_s=config.timeout_s, parallel=config.parallel)

    def preflight(self, suite: Any) -> list[tuple[str, str]]:
        """Plan the slots on this host; the problems that forbid the run (exit 2) otherwise."""
        placements, problems, device_type = placements_for(suite)
        if problems:
            return [("", p) for p in problems]
        self.placements = placements
        timed = suite.mode in ("speed", "both")
        if device_type == "cpu" and timed:
            self.warning = CPU_SIDE_BY_SIDE.format(others=self.parallel - 1, slots=self.parallel)
        return []

    def run_groups(
        self, groups: list[Group], tasks: dict[str, CaseTask], progress_for: Callable[[Case], Progress], reference: str
    ) -> Iterator[GroupRun]:
        """Time the groups, up to `parallel` at once; yields each as it ends (in the order they end)."""
        if not groups:
            return
        if self.placements is None:
            problems = self.preflight(parse_suite(next(iter(tasks.values())).suite))
            if problems:
                raise RuntimeError("; ".join(p for _, p in problems))
        assert self.placements is not None
        if sys.platform == "linux":
            from multiprocessing import forkserver

            _context()  # sets the server's preload
            forkserver.ensure_running()  # from this (the main) thread: see the module docstring
        slots, pending, ended = _Slots(), list(groups), queue.Queue()
        pending_lock = threading.Lock()

        def work(placement: Placement) -> None:
            launcher = _SlotLauncher(self.timeout_s, placement, slots)
            try:
                while not slots.stopping.is_set():
                    with pending_lock:
                        if not pending:
                            break
                        group = pending.pop(0)
                    for timed in run_groups(launcher, [group], tasks, progress_for, reference):
                        for result in timed.results:
                            result.env.update(placement.env())
                            if self.warning and result.status == "ok":
                                result.warnings.append(self.warning)
                        ended.put(("group", timed))
            except _Stopped:
                pass
            except BaseException as exc:  # a bug: the driver re-raises it
                ended.put(("error", exc))
            finally:
                ended.put(("done", None))

        threads = [
            threading.Thread(target=work, args=(p,), name=f"dstbench-slot-{p.slot}", daemon=True)
            for p in self.placements[: min(self.parallel, len(groups))]
        ]
        for thread in threads:
            thread.start()
        try:
            running = len(threads)
            while running:
                try:
                    kind, value = ended.get(timeout=0.5)  # a timeout, so Ctrl-C is seen promptly
                except queue.Empty:
                    continue
                if kind == "group":
                    yield value
                elif kind == "error":
                    raise value
                else:
                    running -= 1
        finally:
            _stop(slots, threads)


def _stop(slots: _Slots, threads: list[threading.Thread]) -> None:
    """Stop the slots (a no-op when they are done): no new case starts, live ones are killed, and
    their threads are waited for (a slot that raced a start is killed again on the next pass)."""
    slots.stopping.set()
    deadline = time.monotonic() + STOP_GRACE_S
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        slots.kill_live()
        for thread in threads:
            thread.join(timeout=0.2)
