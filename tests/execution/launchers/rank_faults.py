"""A method that fails on one rank only, for the torchrun tests. Suites load it with
`plugins: [tests.execution.launchers.rank_faults]`."""

from __future__ import annotations

import dataclasses
from typing import Any

from dstbench.util import distributed
from dstbench.dst.method_base import Method, SegmentStats
from dstbench.dst.registry import register_method

PLUGIN = __name__


@register_method("fault_rank", kind="masked")
class FaultRank(Method):
    """Raises on rank `rank` at its first segment; the other ranks go on into DDP's collectives
    and wait there for it, as peers of a rank that really failed would."""

    @dataclasses.dataclass
    class Params:
        rank: int = 1

    def train_segment(self, batches: Any, steps: int) -> SegmentStats:
        if distributed.rank() == self.params.rank:
            raise ValueError(f"injected failure on rank {self.params.rank}")
        return super().train_segment(batches, steps)
