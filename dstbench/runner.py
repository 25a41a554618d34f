"""One case, measured: build the model and method, warm up, time segments under the trackers.

This is what runs inside a launcher's process. `execute_case` never raises for a failing case: it
turns an out-of-memory error into status `oom` and any other exception into `error`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import socket
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from dstbench import distributed, registry
from dstbench.cases import Case
from dstbench.config import SuiteConfig, parse_suite
from dstbench.data import speed_batches
from dstbench.env import gpu_snapshot, static_env
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
from dstbench.vit import create_vit

# progress(stage, done, total): stage is "warmup", "segment", "epoch" or "profile".
Progress = Callable[[str, int, int], None]


@dataclasses.dataclass
class CaseTask:
    """What a launcher hands to the process that runs a case (plain data, so it pickles)."""

    suite: dict[str, Any]  # the validated suite, `model_dump(mode="json")`
    suite_path: str
    case: dict[str, Any]
    run_dir: str
    resume: bool = False  # continue an accuracy case from its last checkpoint


def resolve_device(name: str) -> torch.device:
    """The suite's device for this process. Under torchrun a CUDA rank gets `cuda:LOCAL_RANK`
    (its own GPU on its node), and `auto` never picks MPS, which DDP cannot use."""
    if distributed.is_distributed():
        if name == "mps":
            raise RuntimeError("distributed cases run on CUDA (NCCL) or the CPU (gloo), not on mps")
        if name in ("cuda", "auto") and torch.cuda.is_available():
            return torch.device("cuda", distributed.local_rank())
        if name == "cuda":
            raise RuntimeError("the suite asks for device cuda, but torch sees no CUDA device")
        return torch.device("cpu")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("the suite asks for device cuda, but torch sees no CUDA device")
    if name == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError("the suite asks for device mps, but it is not available")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_method(suite: SuiteConfig, case: Case, device: torch.device, total_steps: int, **harness: Any) -> Method:
    """A fresh model (same initial weights for every method of a suite) wrapped by the case's method."""
    seed_everything(suite.seed)
    model = create_vit(suite.model.name, device=device, **suite.model.kwargs)
    if suite.model.checkpoint:
        from dstbench.checkpoint import load_pretrained

        load_pretrained(model, suite.model.checkpoint)
    method = registry.create_method(
        case.method_name,
        model,
        density=case.density,
        total_steps=total_steps,
        optimizer=suite.optimizer.model_dump(),
        precision=suite.precision,
        fuse_norms=suite.fuse_norms,
        seed=suite.seed,
        **harness,
        **case.params,
    )
    rank = distributed.rank()
    if rank > 0:
        # Every rank built the same model from the same seed; from here on each draws its own
        # randomness (dropout, host-side augmentation), as the halves of one large batch would.
        seed_everything(distributed.rank_seed(suite.seed, rank))
    return method


def base_result(suite: SuiteConfig, case: Case) -> CaseResult:
    return CaseResult(
        suite=suite.name,
        suite_hash=suite.setup_hash(),
        case_id=case.case_id,
        method=case.method,
        method_name=case.method_name,
        kind=case.kind,
        density=case.density,
        params=dict(case.params),
        precision=suite.precision,
        batch_size=suite.batch_size,
        mode=suite.mode,
    )


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
    result.env = {**static_env(device), "gpu_before": gpu_snapshot(device)}
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


def failed_result(task: CaseTask, status: str, error: str) -> CaseResult:
    suite = parse_suite(task.suite, task.suite_path)
    result = base_result(suite, Case.from_dict(task.case))
    result.status = status
    result.error = error
    result.device = suite.device
    return result


def execute_case(task: CaseTask, progress: Progress | None = None) -> CaseResult:
    """`run_case` with failures turned into statuses `oom` and `error`."""
    try:
        return run_case(task, progress)
    except Exception as exc:
        status = "oom" if is_out_of_memory(exc) else "error"
        return failed_result(task, status, traceback.format_exc())
