"""Profile one case: a few steps that end in a topology update, under `torch.profiler`.

How the profiled steps come to include an update (`plan_window`): the method is asked, step by
step, whether an update falls due (`update_due(step)` is a predicate of the step number) from the
first step that leaves room for the window, up to `max_advance_steps` ahead and never past the
schedule's `total_steps`. The steps before it are trained without the profiler ("advance"), the
last of them under the exact byte counters, and the window's last step is the update step. When no
update is scheduled in that range (the schedule has ended, or the next update is too far) the
update is *forced* on the window's last step and the profile says so; dense training has no
updates to force. None of these steps is ever timed: the timed segments are over (speed mode) or
never ran (accuracy mode), and the result's timed figures were filled before.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from dstbench.dst.method_base import Method

from dstbench.util.device import synchronize
from dstbench.measure.profiling import analysis
from dstbench.util.files import slug
from dstbench.measure.trackers.memory import ActivationCounter, training_state_bytes

if TYPE_CHECKING:
    from dstbench.suite.cases import Case
    from dstbench.suite.schema import SuiteConfig

TRACES_DIR = "traces"
# Kineto logs an error on every CPU-only profile because it probes for a GPU; quiet it unless the
# user asked for its logs. Read when kineto initialises, i.e. at the first profile of the process.
os.environ.setdefault("KINETO_LOG_LEVEL", "5")


def plan_window(method: Method, steps: int, max_advance: int, has_updates: bool) -> dict[str, Any]:
    """Where the profiled window ends: the first scheduled update step with room for the window and
    one counted step before it, else a forced update (or none, for a method without updates)."""
    first = method.step + 1 + steps  # the window is first-steps+1 .. first; first-steps is counted
    last = min(first + max_advance, method.total_steps)
    for step in range(first, last + 1):
        if method.update_due(step):
            return {"step": step, "how": "scheduled"}
    return {"step": first, "how": "forced" if has_updates else "none"}


class _ForcedUpdate:
    """Makes `update_due` true at one extra step, for the window's last step, then undoes it."""

    def __init__(self, method: Method, step: int | None) -> None:
        self.method, self.step = method, step

    def __enter__(self) -> None:
        if self.step is None:
            return
        original, target = self.method.update_due, self.step
        self.method.update_due = lambda step: step == target or original(step)  # type: ignore[method-assign]

    def __exit__(self, *exc: object) -> None:
        if self.step is not None:
            del self.method.update_due  # the instance attribute; the class's method shows again


def _activities(device: torch.device) -> list[torch.profiler.ProfilerActivity]:
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return acts


def _start_memory_history(device: torch.device, wanted: bool) -> str | None:
    """Start recording allocator history on CUDA; returns why not otherwise."""
    if not wanted:
        return "memory_snapshot is off in the suite"
    if device.type != "cuda":
        return f"device {device.type}: the memory snapshot is a CUDA caching-allocator feature"
    # Python stacks only: C++ unwinding on every allocation would slow the profiled steps far more.
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=500_000)
    return None


def profile_window(
    method: Method,
    batches: Iterator[Any],
    steps: int,
    device: torch.device,
    trace_path: Path,
    snapshot_path: Path | None,
) -> dict[str, Any]:
    """Run `steps` steps under the profiler; write the gzipped trace (and the snapshot); return
    the parsed trace, the operator averages and what the allocator said."""
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    updates_before = method.topology_updates
    trace_path.parent.mkdir(parents=True, exist_ok=True)  # the snapshot is written there first
    try:
        with torch.profiler.profile(
            activities=_activities(device), record_shapes=True, profile_memory=True, with_flops=True
        ) as prof:
            with torch.profiler.record_function(analysis.WINDOW):
                method.train_segment(batches, steps)  # ends in a host sync (the loss's .item())
                synchronize(device)
        if snapshot_path is not None:
            torch.cuda.memory._dump_snapshot(str(snapshot_path))
    finally:
        if snapshot_path is not None:
            torch.cuda.memory._record_memory_history(enabled=None)
    allocator_peak = int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None

    raw = trace_path.with_name(trace_path.name.removesuffix(".gz") + ".tmp")
    try:
        prof.export_chrome_trace(str(raw))
        with open(raw, encoding="utf-8") as handle:
            trace = json.load(handle)
        with open(raw, "rb") as src, gzip.open(trace_path, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
    finally:
        raw.unlink(missing_ok=True)
    return {
        "trace": trace,
        "averages": prof.key_averages(),
        "allocator_peak": allocator_peak,
        "updates": method.topology_updates - updates_before,
    }


# build(suite, case, device, total_steps): a fresh method for the case, as the speed track builds it.
BuildMethod = Callable[["SuiteConfig", "Case", torch.device, int], Method]


def _fresh_method(suite: SuiteConfig, case: Case, device: torch.device, build: BuildMethod) -> tuple[Method, Iterator[Any]]:
    """Accuracy-only runs have no speed-case method: build one as the speed track would, and warm
    it up so lazy initialisation (optimizer state, kernel caches) stays out of the profile."""
    from dstbench.inputs.speed import speed_batches

    method = build(suite, case, device, suite.timing.schedule_steps)
    batches, _ = speed_batches(suite, method.model, device, case.run_seed(suite.seed))
    method.train_segment(batches, suite.timing.warmup_steps)
    return method, batches


def profile_case(
    suite: SuiteConfig,
    case: Case,
    device: torch.device,
    result: Any,
    run_dir: Path,
    method: Method | None,
    batches: Iterator[Any] | None,
    progress: Callable[[str, int, int], None],
    build: BuildMethod | None = None,
) -> None:
    """Fill `result.profile` (`result`: the case's line). Without `method` (an accuracy-only case)
    one is made with `build`. A failure here is recorded in the profile (with its traceback) and
    does not cost the case its timed figures, which were measured before."""
    try:
        result.profile = _profile(suite, case, device, run_dir, method, batches, progress, build)
    except Exception:  # noqa: BLE001 - kept in the result line; `dstbench profile` exits 1 on it
        if device.type == "cuda":
            try:
                torch.cuda.memory._record_memory_history(enabled=None)
            except Exception:  # noqa: BLE001 - best effort: recording may never have started
                pass
        result.profile = {"error": traceback.format_exc()}


def _profile(
    suite: SuiteConfig,
    case: Case,
    device: torch.device,
    run_dir: Path,
    method: Method | None,
    batches: Iterator[Any] | None,
    progress: Callable[[str, int, int], None],
    build: BuildMethod | None,
) -> dict[str, Any]:
    config = suite.profile
    if method is None or batches is None:
        if build is None:
            raise ValueError("profile_case: no method to profile and no `build` to make one")
        method, batches = _fresh_method(suite, case, device, build)
    plan = plan_window(method, config.steps, config.max_advance_steps, case.kind != "dense")
    total = plan["step"] - method.step
    counted_step = plan["step"] - config.steps
    advance = counted_step - 1 - method.step
    plan["advanced_steps"] = advance
    if advance > 0:
        method.train_segment(batches, advance)
    progress("profile", advance, total)

    # The step just before the window: exact byte counts of state and saved activations, taken
    # here rather than inside the window so the counters' hooks add nothing to the profiled time.
    with ActivationCounter(method.model) as activations:
        method.train_segment(batches, 1)
    state = training_state_bytes(method)
    memory = {k: v for k, v in state.items() if k != "total"}
    memory["activations"] = activations.total
    memory["total"] = sum(memory.values())

    name = slug(case.key, "case")  # labels may hold characters a file system dislikes; each seed its own
    trace_rel = Path(TRACES_DIR) / f"{name}.trace.json.gz"
    snapshot_rel = Path(TRACES_DIR) / f"{name}.memory.pickle"
    snapshot_reason = _start_memory_history(device, config.memory_snapshot)
    with _ForcedUpdate(method, plan["step"] if plan["how"] == "forced" else None):
        captured = profile_window(
            method, batches, config.steps, device, run_dir / trace_rel,
            run_dir / snapshot_rel if snapshot_reason is None else None,
        )
    progress("profile", total, total)

    trace = captured["trace"]
    layout = analysis.phase_layout(trace)
    host = analysis.host_phase_times(layout)
    device_times = analysis.device_phase_times(trace, layout) if device.type == "cuda" else None
    ops = analysis.operator_table(captured["averages"], on_device=device.type == "cuda", top=config.top_ops)
    peak = analysis.allocation_peak(trace, layout, 1 if device.type == "cuda" else 0)
    if device.type == "cuda":
        peak_out = {
            "source": "CUDA caching allocator (max_memory_allocated over the profiled steps)",
            "bytes": captured["allocator_peak"],
            "phase": peak["phase"] if peak else None,
            "at_ms": peak["at_ms"] if peak else None,
        }
    else:
        peak_out = {
            # Off CUDA the profiler sees host allocations only (MPS memory is not reported to it).
            "source": "profiler memory events: net host (CPU) bytes allocated since the profiled steps began",
            **(peak or {"bytes": None, "phase": None, "at_ms": None}),
        }
    plan["updates_in_window"] = captured["updates"]
    return {
        "steps": config.steps,
        "update": plan,
        "trace": trace_rel.as_posix(),
        "memory_snapshot": snapshot_rel.as_posix() if snapshot_reason is None else None,
        "memory_snapshot_reason": snapshot_reason,
        "time_basis": "host",
        "wall_ms": host["wall_ms"],
        "phases": host["phases"],
        "update_phases": host["update_phases"],
        "device": device_times,
        **ops,
        "memory": memory,
        "state_after_update_bytes": training_state_bytes(method)["total"],
        "allocator_peak": peak_out,
    }
