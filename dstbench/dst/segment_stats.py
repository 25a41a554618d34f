"""What one `Method.train_segment` call did (`dstbench.dst.method_base`)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class SegmentStats:
    """What one `train_segment` call did."""

    steps: int
    images: int
    loss: float
    topology_updates: int
    topology_ms: float
    # Sub-phases of the updates in this segment (e.g. "resize", "state_remap"), milliseconds.
    topology_detail_ms: dict[str, float] = dataclasses.field(default_factory=dict)
