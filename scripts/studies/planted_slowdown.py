"""A method plugin with a known regression, for the power study of `dstbench compare`
(scripts/studies/intervals.py): SET that sleeps `slowdown` x each segment's own training time at
the segment's end, inside the timed segment, so the case is that much slower and nothing else is.

Used as `plugins: [planted_slowdown]` with `scripts/studies` on PYTHONPATH; never registered by dstbench.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterable

from dstbench.dst.masked.masked_method import DropGrowParams
from dstbench.dst.method_base import SegmentStats
from dstbench.dst.registry import register_method
from dstbench.methods.set import SET


@dataclasses.dataclass
class PlantedParams(DropGrowParams):
    slowdown: float = 0.15  # the planted share: each segment takes this much longer

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.slowdown < 10:
            raise ValueError(f"slowdown must be in [0, 10), got {self.slowdown}")


@register_method("planted_slow_set", kind="masked")
class PlantedSlowSET(SET):
    """SET with a planted slowdown of `slowdown` x its own segment time (a test of the gate)."""

    Params = PlantedParams

    def train_segment(self, batches: Iterable[Any], steps: int) -> SegmentStats:
        started = time.perf_counter()
        stats = super().train_segment(batches, steps)
        time.sleep(self.params.slowdown * (time.perf_counter() - started))
        return stats
