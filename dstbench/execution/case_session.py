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
import socket
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
from dstbench.measure.trackers import (
    ActivationCounter,
    AllocatorPeak,
    CompileRecord,
    EnergyMeter,
    FlopCounter,
    NoiseRecord,
    RankPlacement,
    RssPeak,
    SegmentTimer,
    SegmentTimes,
    StateBytes,
    Tracker,
    TrainingStats,
)
from dstbench.util.threads import affinity_cores, resolve_threads, use_threads
from dstbench.measure.hand_over import HandOver
from dstbench.measure.trackers.memory import current_rss_bytes
from dstbench.execution.torch_compile import compile_failure, compile_method

# Re-exported: what tests and scripts import from the runner.
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
    (docs/concepts/measurement.md): `open` builds the method and warms up (the first warm-up step counts FLOPs and
    saved activations), `segment` times one segment with its noise sample, `finish` computes the
    remaining figures (memory, density, extras; the accuracy track and the profile when enabled)
    and returns the result. Raises on failure; `execute_case` and the launchers turn that into a
    status. Trackers that span the timed segments (allocator and RSS peaks) are entered in `open`
    and left in `finish`: they are per process, so cases interleaved in other processes do not
    touch them. The line is assembled from the trackers: each writes the fields it declares."""

    def __init__(self, task: CaseTask, progress: Progress | None = None) -> None:
        self.task = task
        self.progress = progress or (lambda stage, done, total: None)
        self.suite = parse_suite(task.suite, task.suite_path)
        self.case = Case.from_dict(task.case)
        self.threads = resolve_threads(self.suite.threads)
        self.result = base_result(self.suite, self.case)
        self.timed = self.case.mode(self.suite.mode) in ("speed", "both")  # a later seed may train for accuracy alone
        # This process set's share of the rounds (dstbench.execution.rounds): all of them by default.
        self.segments = (self.suite.timing.segments if task.rounds is None else task.rounds) if self.timed else 0
        self.method: Method | None = None
        self.batches: Any = None
        # torch.compile's options (None: eager) and what compiling cost (compiled after the first
        # warm-up step, which counts FLOPs and activations eagerly).
        self._compile = CompileRecord(self.suite.compile.options() if self.suite.compile.enabled else None)
        self._spanning = contextlib.ExitStack()  # the trackers entered in `open` and left in `finish`
        self._spanning_energy = False
        self._hand_over = HandOver(self.suite.timing.hand_over == "parked")

    def open(self) -> dict[str, Any]:
        """Build and warm up; returns what the launcher's scheduler needs (device, CUDA memory)."""
        suite, result = self.suite, self.result
        self._started = time.perf_counter()
        self._rss_baseline = current_rss_bytes()
        self.device = device = resolve_device(suite.device)
        result.started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        result.device = str(device)
        result.env = {
            **static_env(device), "plugins": plugin_versions(self.suite.plugins), "threads": self.threads,
            "affinity_cores": affinity_cores(),
            "gpu_before": gpu_snapshot(device),
        }
        if distributed.is_distributed():
            # A rank's own line; the launcher merges the ranks' lines into the case's.
            placement = RankPlacement(distributed.world_size(), distributed.rank(), distributed.local_rank(), socket.gethostname())
            placement.write(result)
        ready: dict[str, Any] = {"device_type": device.type, "segments": self.segments, "memory": None}
        if not self.timed:
            return ready
        timing = suite.timing
        self.method = method = build_method(suite, self.case, device, timing.schedule_steps)
        self.batches, data_loading = speed_batches(suite, method.model, device, self.case.run_seed(suite.seed))
        flops, activations = FlopCounter(), ActivationCounter(method.model)
        with flops, activations:
            method.train_segment(self.batches, 1)
        if self._compile.options is not None:
            cache = compile_method(method, self._compile.options)
            self._spanning.callback(shutil.rmtree, cache, ignore_errors=True)  # after the timed segments
        with self._compile.untimed():  # the warm-up absorbs the first compilation (validation: >= 2 steps)
            if timing.warmup_steps > 1:
                method.train_segment(self.batches, timing.warmup_steps - 1)
            if first := self.task.first_round:
                # A later process set trains, untimed, the steps the earlier sets' rounds timed, so its
                # round r covers the same training steps (and scheduled updates) as in one process.
                method.train_segment(self.batches, first * timing.segment_steps)
        if self._compile.enabled and not self._compile.untimed_graphs:
            raise RuntimeError(f"compile: torch compiled no graph of {self.case.method}'s model in its warm-up; it would train eagerly")
        self.progress("warmup", timing.warmup_steps, timing.warmup_steps)
        synchronize(device)
        flops.write(result)
        activations.write(result)
        if device.type == "cuda":
            free, total = torch.cuda.mem_get_info(device)
            footprint = int(torch.cuda.max_memory_reserved(device)) + CUDA_CONTEXT_ALLOWANCE_BYTES
            ready["memory"] = {"footprint_bytes": footprint, "free_bytes": int(free), "total_bytes": int(total)}
        self._allocator = self._spanning.enter_context(AllocatorPeak(device))
        self._rss = self._spanning.enter_context(RssPeak(self._rss_baseline))
        self._energy = EnergyMeter(device)
        self._noise = NoiseRecord(device, self.threads)
        self._times = SegmentTimes(timing.segment_steps, suite.batch_size)
        self._training = TrainingStats(method, data_loading)
        return ready

    def segment(self, tag: SegmentTag | None = None) -> dict[str, Any]:
        """Time one segment; returns its milliseconds, start time and noise sample."""
        assert self.method is not None, "segment() before open() or in an accuracy-only case"
        tag = tag or SegmentTag()
        # Interleaved with other processes, the next case's segment waits for this one's threads to
        # park (dstbench.measure.hand_over); alone or in one process, the threads are its own.
        interleaved = bool(set(tag.group_pids) - {os.getpid()})
        if tag.settle:
            with self._compile.untimed(), SegmentTimer(self.device) as timer:
                self.method.train_segment(self.batches, self.suite.timing.segment_steps)
            self._times.add_settle(timer.elapsed_ms)
            if interleaved:
                self._hand_over.wait()
            return {"ms": timer.elapsed_ms, "settle": True}
        index = self._times.count
        if index == 0:
            # Alone on the device, one energy window spans every segment; interleaved, the group's
            # other cases run between this one's segments, so each segment is its own window.
            self._spanning_energy = len(set(tag.group_pids) - {os.getpid()}) == 0
            if self._spanning_energy:
                self._spanning.enter_context(self._energy)  # left with the peaks, in `finish`
        started = time.time()
        with self._compile.segment(), self._noise.segment(tag.group_pids) as noise:
            with contextlib.nullcontext() if self._spanning_energy else self._energy:
                with SegmentTimer(self.device) as timer:
                    stats = self.method.train_segment(self.batches, self.suite.timing.segment_steps)
        self._compile.charge(self.method.topology_updates)
        noise.sample["hand_over_ms"] = self._hand_over.wait() if interleaved else None
        self._noise.add(noise)
        self._training.add(stats)
        self._times.add(timer.elapsed_ms, started, tag.group, tag.round, tag.process, tag.slot)
        # Counted over every process set's rounds: a later set goes on from where the earlier stopped.
        self.progress("segment", self.task.first_round + index + 1, self.suite.timing.segments)
        return {"ms": timer.elapsed_ms, "start_s": started, "noise": noise.sample}

    def _speed_figures(self) -> None:
        assert self.method is not None
        self._spanning.close()  # allocator and RSS peaks (and a spanning energy window) over the segments
        # In this order: energy divides by the timed steps; the training state is read before the
        # method's density and extras; the contention warning comes last.
        trackers: tuple[Tracker, ...] = (
            self._times, self._energy, self._allocator, self._rss, StateBytes(self.method), self._training, self._noise,
            self._compile,
        )
        for tracker in trackers:
            tracker.write(self.result)
        if warning := self._hand_over.warning():
            self.result.warnings.append(warning)

    def finish(self) -> CaseResult:
        """The remaining figures and the result (the process may exit after it)."""
        suite, result, device = self.suite, self.result, self.device
        if self.timed:
            self._speed_figures()
        else:
            self._compile.write(self.result)  # the options an accuracy-only case trained under
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
        """Leave the trackers (a case that failed half way)."""
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
