"""Timing the sub-phases of a topology update without a synchronisation per sub-phase.

On CUDA each sub-phase is bracketed by two timing events, on the CPU (synchronous) by the host
clock; the times are read once the update has ended and been synchronised as a whole. So a method
may open a sub-phase per layer and still pay one sync per update, not two per layer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from dstbench.util.device import synchronize


class UpdateTimer:
    """The (sub-phase, start, end) marks of the update in progress, resolved when it ends."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._marks: list[tuple[str, Any, Any]] | None = None

    def begin(self) -> None:
        self._marks = []

    @contextmanager
    def sub_phase(self, key: str) -> Iterator[None]:
        """Mark the work inside as sub-phase `key` of the update in progress (outside an update the
        marks are dropped: a sub-phase may run in a method's setup too)."""
        start = self._clock()
        yield
        end = self._clock()
        if self._marks is not None:
            self._marks.append((key, start, end))

    def end(self) -> dict[str, float]:
        """Milliseconds per sub-phase of the update just ended (after the caller synchronised)."""
        totals: dict[str, float] = {}
        for key, begin, end in self._marks or []:
            totals[key] = totals.get(key, 0.0) + self._elapsed_ms(begin, end)
        self._marks = None
        return totals

    def _clock(self) -> Any:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        if self.device.type != "cpu":
            synchronize(self.device)  # a device without timing events here: sync instead
        return time.perf_counter()

    @staticmethod
    def _elapsed_ms(start: Any, end: Any) -> float:
        if isinstance(start, torch.cuda.Event):
            return float(start.elapsed_time(end))
        return (end - start) * 1e3
