"""A method plugin with a known, CPU-burning regression, for the power study of `dstbench compare
--decide` (scripts/studies/power.py): SET that, at each segment's end and inside the timed segment,
multiplies small matrices on the intra-op threads for `slowdown` x the segment's own training time.
Unlike a sleep, the burn uses the cores as training does, so the machine sees a slower case.

Used as `plugins: [planted_burn]` with `scripts/studies` on PYTHONPATH; never registered by dstbench.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterable

import torch

from dstbench.dst.masked.masked_method import DropGrowParams
from dstbench.dst.method_base import SegmentStats
from dstbench.dst.registry import register_method
from dstbench.methods.set import SET


@dataclasses.dataclass
class BurnParams(DropGrowParams):
    slowdown: float = 0.15  # the planted share: each segment takes this much longer, burning CPU

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.slowdown < 10:
            raise ValueError(f"slowdown must be in [0, 10), got {self.slowdown}")


@register_method("planted_burn_set", kind="masked")
class PlantedBurnSET(SET):
    """SET with `slowdown` x its own segment time of matrix products added to each segment."""

    Params = BurnParams

    def train_segment(self, batches: Iterable[Any], steps: int) -> SegmentStats:
        started = time.perf_counter()
        stats = super().train_segment(batches, steps)
        until = time.perf_counter() + self.params.slowdown * (time.perf_counter() - started)
        block = torch.ones(96, 96)
        while time.perf_counter() < until:  # ~30 us a product: the burn ends within that of its target
            torch.mm(block, block)
        return stats
