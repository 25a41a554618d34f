"""The device's own clock for a segment: CUDA or MPS events, `perf_counter` on the CPU."""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used
    import torch


class SegmentTimer:
    """Times the work inside `with` as one segment.

    On CUDA two events are recorded on the current stream and the end event is synchronised once,
    at the segment's end; nothing inside the segment is synchronised by the timer.
    """

    def __init__(self, device: torch.device) -> None:
        import torch

        self.device = torch.device(device)
        self.elapsed_ms: float | None = None

    def _event(self):  # type: ignore[no-untyped-def]
        import torch

        if self.device.type == "cuda":
            return torch.cuda.Event(enable_timing=True)
        return torch.mps.event.Event(enable_timing=True)

    def __enter__(self) -> "SegmentTimer":
        if self.device.type in ("cuda", "mps"):
            self._start, self._end = self._event(), self._event()
            self._start.record()
        else:
            self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is not None:
            return
        if self.device.type in ("cuda", "mps"):
            self._end.record()
            self._end.synchronize()
            self.elapsed_ms = float(self._start.elapsed_time(self._end))
        else:
            self.elapsed_ms = (time.perf_counter() - self._t0) * 1e3
