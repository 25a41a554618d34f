"""One case, measured: build the model and method, warm up, time segments under the trackers.

This is what runs inside a launcher's process. `execute_case` never raises for a failing case: it
turns an out-of-memory error into status `oom` and any other exception into `error`.
"""

from __future__ import annotations

import datetime as dt
import socket
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from dstbench import distributed
from dstbench.build import CaseTask, Progress, base_result, build_method, failed_result, resolve_device
from dstbench.cases import Case
from dstbench.config import SuiteConfig, parse_suite
from dstbench.data import speed_batches
from dstbench.env import gpu_snapshot, plugin_versions, static_env
from dstbench.method import Method, synchronize
from dstbench.results import CaseResult
from dstbench.trackers import (
    ActivationCounter,
    AllocatorPeak,
    FlopCounter,
    RssPeak,
    SegmentTimer,
    summarize_ms,
    training_state_bytes,
)
from dstbench.trackers.energy import EnergyMeter
from dstbench.trackers.memory import current_rss_bytes

# Re-exported: what launchers and tests import from the runner.
__all__ = ["CaseTask", "Progress", "base_result", "build_method", "execute_case", "failed_result", "resolve_device", "run_case"]


def measure_speed(
    suite: SuiteConfig,
    case: Case,
    device: torch.device,
    result: CaseResult,
    rss_baseline: int | None,
    progress: Progress,
) -> tuple[Method, Any]:
    """The timed segments. Fills `result`; returns the method and its batches for profiling."""
    timing = suite.timing
    method = build_method(suite, case, device, timing.schedule_steps)
    batches, result.data_loading = speed_batches(suite, method.model, device)

    # The first warmup step counts FLOPs and saved activations; no timed step runs under a counter.
    flops, activations = FlopCounter(), ActivationCounter(method.model)
    with flops, activations:
        method.train_segment(batches, 1)
    if timing.warmup_steps > 1:
        method.train_segment(batches, timing.warmup_steps - 1)
    progress("warmup", timing.warmup_steps, timing.warmup_steps)
    synchronize(device)

    samples, stats = [], []
    with AllocatorPeak(device) as allocator, RssPeak(rss_baseline) as rss, EnergyMeter(device) as energy:
        for index in range(timing.segments):
            with SegmentTimer(device) as timer:
                stats.append(method.train_segment(batches, timing.segment_steps))
            samples.append(timer.elapsed_ms)
            progress("segment", index + 1, timing.segments)

    median, iqr = summarize_ms(samples)
    state = training_state_bytes(method)
    detail: dict[str, float] = {}
    for s in stats:
        for key, ms in s.topology_detail_ms.items():
            detail[key] = detail.get(key, 0.0) + ms
    result.segment_steps = timing.segment_steps
    result.segment_ms = samples
    result.median_ms = median
    result.iqr_ms = iqr
    result.images_per_s = suite.batch_size * timing.segment_steps / (median / 1e3)
    result.peak_memory_bytes = allocator.peak_bytes
    result.reserved_memory_bytes = allocator.reserved_bytes
    result.rss_peak_bytes = rss.growth_bytes
    timed_steps = timing.segments * timing.segment_steps
    result.energy = energy.result(timed_steps, suite.batch_size * timed_steps)
    result.state_bytes = state["total"]
    result.state_breakdown = state
    result.activation_bytes = activations.total
    result.flops_per_step = flops.total
    result.density_achieved = method.density()
    result.topology_updates = sum(s.topology_updates for s in stats)
    result.topology_ms = sum(s.topology_ms for s in stats)
    result.topology_detail_ms = detail
    result.loss = stats[-1].loss
    result.method_extras = {
        **method.result_extras(),
        "steps_total": method.step,
        "topology_updates_total": method.topology_updates,
    }
    return method, batches


def run_case(task: CaseTask, progress: Progress | None = None) -> CaseResult:
    """Run one case and return its result; exceptions propagate (see `execute_case`)."""
    progress = progress or (lambda stage, done, total: None)
    suite = parse_suite(task.suite, task.suite_path)
    case = Case.from_dict(task.case)
    started = time.perf_counter()
    rss_baseline = current_rss_bytes()
    device = resolve_device(suite.device)
    result = base_result(suite, case)
    result.started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    result.device = str(device)
    result.env = {**static_env(device), "plugins": plugin_versions(suite.plugins), "gpu_before": gpu_snapshot(device)}
    if distributed.is_distributed():
        # A rank's own line; the launcher merges the ranks' lines into the case's.
        result.world_size = distributed.world_size()
        result.env.update(rank=distributed.rank(), local_rank=distributed.local_rank(), host=socket.gethostname())

    method = batches = None
    if suite.mode in ("speed", "both"):
        method, batches = measure_speed(suite, case, device, result, rss_baseline, progress)
    if suite.mode in ("accuracy", "both"):
        from dstbench.accuracy import measure_accuracy

        measure_accuracy(suite, case, device, result, Path(task.run_dir), progress, resume=task.resume)
    if suite.profile.enabled:
        from dstbench.profiling import profile_case

        run_dir = Path(task.run_dir)
        if distributed.rank() > 0:  # every rank profiles (the steps synchronise); rank 0's is the case's
            run_dir = run_dir / "ranks" / f"rank{distributed.rank()}"
        profile_case(suite, case, device, result, run_dir, method, batches, progress)

    result.env["gpu_after"] = gpu_snapshot(device)
    result.duration_s = time.perf_counter() - started
    return result


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def execute_case(task: CaseTask, progress: Progress | None = None) -> CaseResult:
    """`run_case` with failures turned into statuses `oom` and `error`."""
    try:
        return run_case(task, progress)
    except Exception as exc:
        status = "oom" if is_out_of_memory(exc) else "error"
        return failed_result(task, status, traceback.format_exc())
