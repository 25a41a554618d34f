"""What the method did in the timed segments: density reached, topology updates and their time, the
last segment's loss, how inputs were produced, and the method's own extras."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dstbench.measure.trackers.base import (
    COUNT, LARGEST, LATEST, MEAN, PER_SEGMENT, RANK0, SEGMENT, SLOWEST_PER_SEGMENT, TOTAL, TOTAL_BY_KEY, CaseContext,
    ResultField, SegmentOutcome, Tracker,
)
from dstbench.measure.trackers.registry import register_tracker

if TYPE_CHECKING:
    from dstbench.dst.method_base import Method, SegmentStats


@register_tracker("training")
class TrainingStats(Tracker):
    """Each timed segment's `SegmentStats` (`add`); `write` sums their updates and reads the
    method's density and extras, after the training state's bytes are read. The accuracy track
    writes these fields for its own training."""

    runs = frozenset({SEGMENT})
    after = ("state_bytes",)
    fields = (
        ResultField("density_achieved", float | None, LATEST, RANK0, "the density the method's weights have",
                    default=None, per_rank=True, unit="fraction", report=False),
        ResultField("topology_updates", int | None, COUNT, RANK0, "topology updates in the timed segments", default=None,
                    unit="count", over_segments="sum", exact=True),
        ResultField("topology_ms", float | None, TOTAL, LARGEST, "milliseconds of those updates", default=None,
                    per_rank=True, unit="ms", over_segments="sum", better="lower"),
        # Aligned with segment_ms: which segments held updates, and how long they took there. A time
        # to target takes a step's time from the segments less their updates, and adds the updates.
        ResultField("segment_topology_updates", list[int], PER_SEGMENT, RANK0, "topology updates in each timed segment",
                    default_factory=list, unit="count", over_segments="each"),
        ResultField("segment_topology_ms", list[float], PER_SEGMENT, SLOWEST_PER_SEGMENT,
                    "milliseconds of the topology updates in each timed segment", default_factory=list, per_rank=True,
                    unit="ms", over_segments="each"),
        ResultField("topology_detail_ms", dict[str, float] | None, TOTAL_BY_KEY, RANK0,
                    "topology_ms by sub-phase (e.g. resize, state_remap)", default=None, unit="ms", over_segments="sum"),
        # The mean over ranks is the global batch's loss: the ranks' batches are the same size.
        ResultField("loss", float | None, LATEST, MEAN, "training loss of the last timed segment", default=None,
                    per_rank=True, over_segments="last", better="lower"),
        ResultField("data_loading", str | None, LATEST, RANK0, "how the training inputs were produced", default=None, report=False),
        ResultField("method_extras", dict[str, Any], LATEST, RANK0, "the method's own figures, with step totals",
                    default_factory=dict),
    )

    def __init__(self, method: Method, data_loading: str | None) -> None:
        self.method = method
        self.data_loading = data_loading
        self.stats: list[SegmentStats] = []

    @classmethod
    def for_case(cls, context: CaseContext) -> "TrainingStats | None":
        return cls(context.method, context.data_loading) if context.timed else None

    def add(self, outcome: SegmentOutcome) -> None:
        self.stats.append(outcome.stats)

    def write(self, line: Any) -> None:
        method = self.method
        detail: dict[str, float] = {}
        for s in self.stats:
            for key, ms in s.topology_detail_ms.items():
                detail[key] = detail.get(key, 0.0) + ms
        line.density_achieved = method.density()
        line.topology_updates = sum(s.topology_updates for s in self.stats)
        line.topology_ms = sum(s.topology_ms for s in self.stats)
        line.topology_detail_ms = detail
        line.segment_topology_updates = [s.topology_updates for s in self.stats]
        line.segment_topology_ms = [s.topology_ms for s in self.stats]
        line.loss = self.stats[-1].loss if self.stats else None
        line.data_loading = self.data_loading
        extras = method.result_extras()
        schedule = getattr(method, "schedule", None)  # a DST method's update schedule (none: no updates)
        scheduled = len(schedule.update_steps()) if hasattr(schedule, "update_steps") else 0
        line.method_extras = {
            **extras,
            "steps_total": method.step,
            "topology_updates_total": method.topology_updates,
            # What a whole run of the schedule would take: the end-to-end speedup prices it.
            "schedule_steps": method.total_steps,
            "updates_scheduled": extras.get("updates_scheduled", scheduled),
        }
