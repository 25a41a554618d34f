"""The profile's summary: what `dstbench.measure.profiling.profile_case` writes after the timed
segments (its trace and breakdowns, or the error that stopped it)."""

from __future__ import annotations

from typing import Any

from dstbench.measure.trackers.base import LATEST, RANK0, ResultField, Tracker
from dstbench.measure.trackers.registry import register_tracker


@register_tracker("profile")
class ProfileCapture(Tracker):
    """Declares the profile's field; the profiler runs steps of its own after the timed segments (in no phase).
    Every rank profiles; the case keeps rank 0's."""

    fields = (
        ResultField("profile", dict[str, Any] | None, LATEST, RANK0, "the profile's summary and trace file", default=None),
    )
