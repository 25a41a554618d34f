"""Static sparse training: the masked methods' random sparse mask, never updated."""

from __future__ import annotations

from dstbench.dst.registry import register_method
from dstbench.dst.update_schedule import UpdateSchedule
from dstbench.dst.masked.masked_method import MaskedMethod, MaskLayoutParams


@register_method("static", kind="masked")
class Static(MaskedMethod):
    """Static: the random ERK mask the masked methods start from, never updated (DST's baseline).

    Built from the masked engine's parts: the same initial mask as SET, RigL, MEST and Chase for
    the same seed and density (random per layer, at `erk` or `uniform` layer densities), the same
    per-step masking, and an update schedule with no update in it. What it measures against them
    is what the topology updates cost and buy.
    """

    Params = MaskLayoutParams

    def build_schedule(self) -> UpdateSchedule:
        # t_end 0: no step falls before the end, so no update is ever due.
        return UpdateSchedule(delta_t=1, t_end=0.0, drop_fraction=0.0, total_steps=self.total_steps)
