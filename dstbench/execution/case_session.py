"""One case, measured: build the model and method, warm up, time segments under the trackers.

This is what runs inside a launcher's process. `CaseSession` is the case step by step, as the
launchers drive it (their scheduler interleaves several cases' segments); `run_case` runs one alone
start to end. `execute_case` never raises for a failing case: it turns an out-of-memory error into
status `oom` and any other exception into `error`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import math
import os
import re
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from dstbench.util import distributed
from dstbench.execution.case_setup import CaseTask, Progress, base_result, build_method, failed_result, resolve_device
from dstbench.suite.cases import Case
from dstbench.inputs.speed import speed_batches
from dstbench.measure.environment import gpu_snapshot, plugin_versions, static_env
from dstbench.suite.groups import new_group_id
from dstbench.dst.method_base import Method
from dstbench.util.device import synchronize
from dstbench.results.divergence import DIVERGED, divergence
from dstbench.results.record import CaseResult
from dstbench.suite.loading import parse_suite
from dstbench.measure.clock import SegmentTimer
from dstbench.measure.trackers.base import CASE, SEGMENT, UNTIMED, WARMUP, CaseContext, SegmentOutcome, Tracker
from dstbench.measure.trackers.registry import registered_trackers
from dstbench.util.threads import affinity_cores, resolve_threads, use_threads
from dstbench.measure.hand_over import HandOver
from dstbench.measure.trackers.memory import current_rss_bytes
from dstbench.execution.torch_compile import compile_failure, compile_method

# Re-exported: what tests and scripts import from the case session.
__all__ = [
    "CaseSession", "CaseTask", "Progress", "SegmentTag", "base_result", "build_method", "execute_case", "failed_result",
    "failure", "resolve_device", "run_case",
]


# CUDA memory a case process holds beyond its allocator's reservations (context, cuBLAS and cuDNN
# workspaces): what an interleaved group's fit estimate adds per process (dstbench.execution.rounds).
CUDA_CONTEXT_ALLOWANCE_BYTES = 768 * 2**20


@dataclasses.dataclass
class SegmentTag:
    """What the launcher says about a segment it asks for: the interleaved group's id, the round,
    the pids of the group's processes (which are not "other processes on the GPU"), the process set
    and the case's place in the round."""

    group: str = ""
    round: int = 0
    group_pids: tuple[int, ...] = ()
    process: int = 0  # the process set of the group that times this round
    slot: int = 0  # the case's place in this round's order
    settle: bool = False  # an untimed settling segment before the first round (not a sample)


class CaseSession:
    """One case inside its process, driven step by step by the launcher
    (docs/concepts/measurement.md): `open` builds the method and warms up, `segment` times one
    segment, `finish` computes the remaining figures (the accuracy track and the profile when
    enabled) and returns the result. Raises on failure; `execute_case` and the launchers turn that
    into a status.

    The figures come from every registered tracker (`dstbench.measure.trackers.registry`), in their
    order, each in the phases it declares (`Tracker.runs`): around the first warm-up step, around
    untimed training (the rest of the warm-up, catch-up, settling), in one window over all the
    timed segments (entered before the first, left in `finish`: a per-process figure such as a peak
    is only this case's when no other case runs in its process) and around each timed segment,
    outside the segment's clock. Each writes the fields it declares into the line."""

    def __init__(self, task: CaseTask, progress: Progress | None = None) -> None:
        self.task = task
        self.progress = progress or (lambda stage, done, total: None)
        self.suite = parse_suite(task.suite, task.suite_path)  # imports the suite's plugins: their trackers register
        self.case = Case.from_dict(task.case)
        self.threads = resolve_threads(self.suite.threads)
        self.result = base_result(self.suite, self.case)
        self.timed = self.case.mode(self.suite.mode) in ("speed", "both")  # a later seed may train for accuracy alone
        # This process set's share of the rounds (dstbench.execution.rounds): all of them by default.
        self.segments = (self.suite.timing.segments if task.rounds is None else task.rounds) if self.timed else 0
        self.method: Method | None = None
        self.batches: Any = None
        self.trackers: list[Tracker] = []
        self._spanning = contextlib.ExitStack()  # the windows entered before the first timed segment, left in `finish`
        self._case_open = False
        self._timed_segments = 0  # this process set's, so far
        self._hand_over = HandOver(self.suite.timing.hand_over == "parked")

    def _build_trackers(self, context: CaseContext) -> None:
        for tracker_type in registered_trackers():
            if context.timed or tracker_type.untimed_cases:
                tracker = tracker_type.for_case(context)
                if tracker is not None:
                    self.trackers.append(tracker)

    def _windows(self, phase: str, open_one: Any) -> contextlib.ExitStack:
        """The windows of every tracker that runs in `phase`, entered in order (a later one inside)."""
        stack = contextlib.ExitStack()
        try:
            for tracker in self.trackers:
                if phase in tracker.runs:
                    stack.enter_context(open_one(tracker))
        except BaseException:
            stack.close()
            raise
        return stack

    def open(self) -> dict[str, Any]:
        """Build and warm up; returns what the launcher's scheduler needs (device, CUDA memory)."""
        suite, result = self.suite, self.result
        self._started = time.perf_counter()
        rss_baseline = current_rss_bytes()
        self.device = device = resolve_device(suite.device)
        result.started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        result.device = str(device)
        result.env = {
            **static_env(device), "plugins": plugin_versions(self.suite.plugins), "threads": self.threads,
            "affinity_cores": affinity_cores(),
            "gpu_before": gpu_snapshot(device),
        }
        ready: dict[str, Any] = {"device_type": device.type, "segments": self.segments, "memory": None}
        context = CaseContext(suite, self.case, device, self.threads, rss_baseline_bytes=rss_baseline)
        if not self.timed:
            self._build_trackers(context)
            return ready
        timing = suite.timing
        self.method = method = build_method(suite, self.case, device, timing.schedule_steps)
        self.batches, data_loading = speed_batches(suite, method.model, device, self.case.run_seed(suite.seed))
        context.method, context.data_loading = method, data_loading
        self._build_trackers(context)
        with self._windows(WARMUP, lambda tracker: tracker.warmup()):
            method.train_segment(self.batches, 1)  # eagerly: FLOPs and saved activations are counted here
        if suite.compile.enabled:
            cache = compile_method(method, suite.compile.options())
            self._spanning.callback(shutil.rmtree, cache, ignore_errors=True)  # after the timed segments
        with self._windows(UNTIMED, lambda tracker: tracker.untimed()):  # the warm-up absorbs the first compilation
            if timing.warmup_steps > 1:
                method.train_segment(self.batches, timing.warmup_steps - 1)
            if first := self.task.first_round:
                # A later process set trains, untimed, the steps the earlier sets' rounds timed, so its
                # round r covers the same training steps (and scheduled updates) as in one process.
                method.train_segment(self.batches, first * timing.segment_steps)
        self.progress("warmup", timing.warmup_steps, timing.warmup_steps)
        synchronize(device)
        if device.type == "cuda":
            free, total = torch.cuda.mem_get_info(device)
            footprint = int(torch.cuda.max_memory_reserved(device)) + CUDA_CONTEXT_ALLOWANCE_BYTES
            ready["memory"] = {"footprint_bytes": footprint, "free_bytes": int(free), "total_bytes": int(total)}
        return ready

    def segment(self, tag: SegmentTag | None = None) -> dict[str, Any]:
        """Time one segment; returns its milliseconds, start time and what the trackers add (the
        noise sample)."""
        assert self.method is not None, "segment() before open() or in an accuracy-only case"
        tag = tag or SegmentTag()
        # Interleaved with other processes, the next case's segment waits for this one's threads to
        # park (dstbench.measure.hand_over); alone or in one process, the threads are its own.
        interleaved = bool(set(tag.group_pids) - {os.getpid()})
        steps = self.suite.timing.segment_steps
        if tag.settle:
            with self._windows(UNTIMED, lambda tracker: tracker.untimed()), SegmentTimer(self.device) as timer:
                stats = self.method.train_segment(self.batches, steps)
            outcome = SegmentOutcome(timer.elapsed_ms, time.time(), tag, stats, self.method,
                                     report={"ms": timer.elapsed_ms, "settle": True})
            for tracker in self.trackers:
                tracker.add_settle(outcome)
            if interleaved:
                self._hand_over.wait()
            return outcome.report
        if not self._case_open:
            self._case_open = True
            self._spanning.enter_context(self._windows(CASE, lambda tracker: tracker.case(tag)))  # left in `finish`
        started = time.time()
        with self._windows(SEGMENT, lambda tracker: tracker.segment(tag)), SegmentTimer(self.device) as timer:
            stats = self.method.train_segment(self.batches, steps)
        hand_over_ms = self._hand_over.wait() if interleaved else None
        outcome = SegmentOutcome(timer.elapsed_ms, started, tag, stats, self.method, hand_over_ms,
                                 report={"ms": timer.elapsed_ms, "start_s": started})
        for tracker in self.trackers:
            if SEGMENT in tracker.runs:
                tracker.add(outcome)
        self._timed_segments += 1
        # Counted over every process set's rounds: a later set goes on from where the earlier stopped.
        self.progress("segment", self.task.first_round + self._timed_segments, self.suite.timing.segments)
        return outcome.report

    def finish(self) -> CaseResult:
        """The remaining figures and the result (the process may exit after it)."""
        suite, result, device = self.suite, self.result, self.device
        self._spanning.close()  # the windows over all the segments (peaks, a spanning energy window)
        for tracker in self.trackers:
            tracker.write(result)
        if self.timed and (warning := self._hand_over.warning()):
            result.warnings.append(warning)
        # The accuracy track and the profile run once per case: in its last process set; in a
        # `mode: both` run the training phase trains and the timing phase profiles.
        phase = self.task.phase
        if self.timed and self.method is not None:
            flag_missed_updates(self.method, result, "timed segments")
        if self.case.mode(suite.mode) in ("accuracy", "both") and self.task.extras and phase != "timing":
            from dstbench.execution.accuracy_track import measure_accuracy

            trained = measure_accuracy(suite, self.case, device, result, Path(self.task.run_dir), self.progress, resume=self.task.resume)
            flag_missed_updates(trained, result, "training run")
        if suite.profile.enabled and self.task.extras and phase != "training":
            from dstbench.measure.profiling import profile_case

            run_dir = Path(self.task.run_dir)
            if distributed.rank() > 0:  # every rank profiles (the steps synchronise); rank 0's is the case's
                run_dir = run_dir / "ranks" / f"rank{distributed.rank()}"
            profile_case(suite, self.case, device, result, run_dir, self.method, self.batches, self.progress, build_method)
        result.env["gpu_after"] = gpu_snapshot(device)
        result.duration_s = time.perf_counter() - self._started
        classes = getattr(getattr(self.method, "model", None), "num_classes", None) or suite.model.kwargs.get("num_classes")
        start = math.log(classes) if isinstance(classes, int) and classes > 1 else None  # a uniform prediction's loss
        why = divergence(result.loss, result.curve, start) if result.status == "ok" else None
        if why:  # a model that learns nothing: its figures answer no question (dstbench.results.divergence)
            result.status, result.error = DIVERGED, why
        return result

    def close(self) -> None:
        """Leave the trackers' windows (a case that failed half way)."""
        self._spanning.close()


def flag_missed_updates(method: Method, result: CaseResult, where: str) -> None:
    """A warning on the line when a method that declares a topology schedule made fewer than half
    the updates it asks for (`Method.update_shortfall`): unflagged, a DST result that never updated
    reads as DST while it is a static mask."""
    shortfall = method.update_shortfall()
    if shortfall is not None:
        asked, made = shortfall
        result.warnings.append(
            f"{made} topology update{'s' if made != 1 else ''} in its {where}'s {method.step:,} steps, where its schedule asks "
            f"for {asked}: fewer than half, so its figures are nearly a static mask's (does update_due follow the schedule?)"
        )


def run_case(task: CaseTask, progress: Progress | None = None) -> CaseResult:
    """Run one case alone, start to end, and return its result; exceptions propagate (see
    `execute_case`). A group of one: the launchers' scheduler drives the same session."""
    session = CaseSession(task, progress)
    group = new_group_id(session.case.key)
    with use_threads(session.threads):
        try:
            session.open()
            pids = (os.getpid(),)
            for _ in range(session.suite.timing.settle_segments if session.segments else 0):
                session.segment(SegmentTag(group=group, group_pids=pids, process=task.process, settle=True))
            for index in range(session.segments):
                tag = SegmentTag(group=group, round=task.first_round + index, group_pids=pids, process=task.process)
                session.segment(tag)
            result = session.finish()
            result.groups = [group]
            return result
        finally:
            session.close()


CPU_ALLOCATION = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's out-of-memory error, the CPU allocator's refusal (a RuntimeError), or a MemoryError."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text.lower() or CPU_ALLOCATION.search(text) is not None)


def memory_asked(exc: BaseException) -> str | None:
    """"asked for 40.0 GB (40,000,000,000 bytes)" from the CPU allocator's message, else None."""
    found = CPU_ALLOCATION.search(str(exc))
    return f"asked for {int(found.group(1)) / 1e9:.1f} GB ({int(found.group(1)):,} bytes)" if found else None


def failure(task: CaseTask, exc: BaseException) -> CaseResult:
    """The result of a case that raised `exc` (call inside its `except` block): `oom` or `error`,
    with the traceback (and, when torch's compiler raised it, a last line saying so)."""
    error = traceback.format_exc()
    options = task.suite.get("compile") or {}
    if isinstance(options, dict) and options.get("enabled"):
        note = compile_failure(exc, str(task.case.get("method")), {k: v for k, v in options.items() if k != "enabled" and v is not None})
        error += f"{note}\n" if note else ""
    asked = memory_asked(exc)
    error += f"out of host memory: the allocation {asked}\n" if asked else ""
    return failed_result(task, "oom" if is_out_of_memory(exc) else "error", error)


def execute_case(task: CaseTask, progress: Progress | None = None) -> CaseResult:
    """`run_case` with failures turned into statuses `oom` and `error`."""
    try:
        return run_case(task, progress)
    except Exception as exc:
        return failure(task, exc)
