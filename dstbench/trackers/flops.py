"""Training FLOPs of one step, as `torch.utils.flop_counter.FlopCounterMode` counts them."""

from __future__ import annotations

from types import TracebackType

from torch.utils.flop_counter import FlopCounterMode


class FlopCounter:
    """Counts the FLOPs of the operations run inside `with` (forward and backward matmuls,
    convolutions, attention). What stays dense is counted too, so a ratio of two counts is the
    physical limit of a speedup."""

    def __init__(self) -> None:
        self._mode = FlopCounterMode(display=False)
        self.total: int | None = None

    def __enter__(self) -> "FlopCounter":
        self._mode.__enter__()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._mode.__exit__(exc_type, exc, tb)
        self.total = int(self._mode.get_total_flops())
