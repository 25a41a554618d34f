"""Memory: the CUDA allocator's peak, the process's peak RSS, and exact byte counts on every device.

The byte counts are what a noisy or GPU-less machine can gate on: training state (parameters,
gradients, optimizer state, method buffers) and the activations saved for backward in one step.
Each figure's tracker declares its result fields; the gated ones carry a `bytes` report column.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Iterable

from dstbench.measure.trackers.base import (
    CASE, LARGEST, LATEST, PEAK, RANK0, WARMUP, CaseContext, Column, ResultField, Tracker,
)
from dstbench.measure.trackers.registry import register_tracker

if TYPE_CHECKING:  # torch is imported where it is used: the result record reads the declarations here without it
    import torch

    from dstbench.dst.method_base import Method


def _storage_key(tensor: torch.Tensor) -> tuple[str, int]:
    return (str(tensor.device), tensor.untyped_storage().data_ptr())


def unique_bytes(tensors: Iterable[torch.Tensor], exclude: set[tuple[str, int]] | None = None) -> int:
    """Bytes of the distinct storages behind `tensors` (views of one storage count once)."""
    seen = set(exclude or ())
    total = 0
    for tensor in tensors:
        if tensor is None or tensor.device.type == "meta":
            continue
        key = _storage_key(tensor)
        if key in seen:
            continue
        seen.add(key)
        total += tensor.untyped_storage().nbytes()
    return total


def training_state_bytes(method: Method) -> dict[str, int]:
    """Bytes of what training keeps between steps, by part, plus `total`.

    Gradients are counted as one buffer per trainable parameter, the size each holds during a step.
    """
    import torch

    params = [p for p in method.model.parameters()]
    state_tensors = [
        value
        for state in method.optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]
    parts = {
        "parameters": unique_bytes(params),
        "gradients": sum(p.numel() * p.element_size() for p in params if p.requires_grad),
        "optimizer_state": unique_bytes(state_tensors),
        "method_buffers": unique_bytes(method.method_buffers().values()),
    }
    parts["total"] = sum(parts.values())
    return parts


@register_tracker("state_bytes")
class StateBytes(Tracker):
    """The bytes of the method's training state (`training_state_bytes`), read when written (after
    the timed segments: it runs around no work)."""

    fields = (
        ResultField("state_bytes", int | None, LATEST, RANK0, "bytes training keeps between steps", default=None,
                    per_rank=True, column=Column("state", "bytes"), unit="bytes", better="lower", report=False, exact=True),
        ResultField("state_breakdown", dict[str, int] | None, LATEST, RANK0, "state_bytes by part, with total",
                    default=None, unit="bytes", exact=True),
    )

    def __init__(self, method: Method) -> None:
        self.method = method

    @classmethod
    def for_case(cls, context: CaseContext) -> "StateBytes | None":
        return cls(context.method) if context.timed else None

    def write(self, line: Any) -> None:
        state = training_state_bytes(self.method)
        line.state_bytes = state["total"]
        line.state_breakdown = state


@register_tracker("activations")
class ActivationCounter(Tracker):
    """Counts the bytes autograd saves for backward inside `with` (parameters excluded), through
    `torch.autograd.graph.saved_tensors_hooks`, in the first warm-up step. Each storage counts once."""

    runs = frozenset({WARMUP})
    fields = (
        ResultField("activation_bytes", int | None, LATEST, RANK0, "bytes autograd saves for backward in one step",
                    default=None, per_rank=True, column=Column("activation", "bytes"), unit="bytes",
                    over_segments="warm-up", better="lower", report=False, exact=True),
    )

    @classmethod
    def for_case(cls, context: CaseContext) -> "ActivationCounter | None":
        return cls(context.method.model) if context.timed else None

    def __init__(self, model: torch.nn.Module) -> None:
        self._params = {_storage_key(p) for p in model.parameters()}
        self._seen: set[tuple[str, int]] = set()
        self.total = 0

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type != "meta":
            key = _storage_key(tensor)
            if key not in self._params and key not in self._seen:
                self._seen.add(key)
                self.total += tensor.untyped_storage().nbytes()
        return tensor

    def __enter__(self) -> "ActivationCounter":
        import torch

        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)
        self._hooks.__enter__()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._hooks.__exit__(exc_type, exc, tb)

    def write(self, line: Any) -> None:
        line.activation_bytes = self.total


@register_tracker("allocator_peak")
class AllocatorPeak(Tracker):
    """`torch.cuda.max_memory_allocated` / `max_memory_reserved` over the work inside `with` (the
    timed segments). On other devices both stay None. The allocator's peak is the process's."""

    runs = frozenset({CASE})
    per_process = True
    fields = (
        ResultField("peak_memory_bytes", int | None, PEAK, LARGEST, "the CUDA allocator's peak allocated bytes",
                    default=None, per_rank=True, column=Column("peak", "bytes"), unit="bytes", over_segments="peak",
                    better="lower", report=False, exact=True),
        ResultField("reserved_memory_bytes", int | None, PEAK, LARGEST, "the CUDA allocator's peak reserved bytes",
                    default=None, per_rank=True, unit="bytes", over_segments="peak", better="lower", exact=True),
    )

    @classmethod
    def for_case(cls, context: CaseContext) -> "AllocatorPeak | None":
        return cls(context.device) if context.timed else None

    def __init__(self, device: torch.device) -> None:
        import torch

        self.device = torch.device(device)
        self.peak_bytes: int | None = None
        self.reserved_bytes: int | None = None

    def __enter__(self) -> "AllocatorPeak":
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        import torch

        if self.device.type == "cuda" and exc_type is None:
            torch.cuda.synchronize(self.device)
            self.peak_bytes = int(torch.cuda.max_memory_allocated(self.device))
            self.reserved_bytes = int(torch.cuda.max_memory_reserved(self.device))

    def write(self, line: Any) -> None:
        line.peak_memory_bytes = self.peak_bytes
        line.reserved_memory_bytes = self.reserved_bytes


_STATUS = Path("/proc/self/status")


def _status_kib(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def current_rss_bytes() -> int | None:
    kib = _status_kib("VmRSS")
    return kib * 1024 if kib is not None else None


def _reset_high_water_mark() -> bool:
    """Reset this process's VmHWM to its current RSS ("5" to clear_refs, Linux >= 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    # ru_maxrss is KiB on Linux, bytes on macOS.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


@register_tracker("rss_peak")
class RssPeak(Tracker):
    """How much more resident memory than `baseline_bytes` the work inside `with` needed at its peak.

    `baseline_bytes` is the process's RSS when the case started building (`current_rss_bytes`); the
    peak is the high-water mark over the `with` block, which is reset on entry. `growth_bytes` is
    peak - baseline, clamped at 0: in a process that ran earlier work, memory freed after the
    baseline (garbage collected, returned to the OS) can leave the whole block below the baseline,
    and "needed nothing extra" is then the truthful figure, not a negative one. Where the high-water
    mark cannot be reset it is the process's lifetime peak, an upper bound. None where the baseline
    is unknown (no /proc: not Linux).
    """

    runs = frozenset({CASE})
    per_process = True
    fields = (
        ResultField("rss_peak_bytes", int | None, PEAK, LARGEST, "resident memory the timed segments needed beyond the "
                    "process's at the case's start", default=None, per_rank=True, unit="bytes", over_segments="peak",
                    better="lower"),
    )

    @classmethod
    def for_case(cls, context: CaseContext) -> "RssPeak | None":
        return cls(context.rss_baseline_bytes) if context.timed else None

    def __init__(self, baseline_bytes: int | None) -> None:
        self.baseline_bytes = baseline_bytes
        self.peak_bytes: int | None = None
        self.growth_bytes: int | None = None
        self.reset = False

    def __enter__(self) -> "RssPeak":
        self.reset = _reset_high_water_mark()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.peak_bytes = _peak_rss_bytes()
        if self.baseline_bytes is not None:
            self.growth_bytes = max(0, self.peak_bytes - self.baseline_bytes)

    def write(self, line: Any) -> None:
        line.rss_peak_bytes = self.growth_bytes
