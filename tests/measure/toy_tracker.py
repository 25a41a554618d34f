"""A metric in one file: the intra-op threads torch used in each timed segment.

Registered when imported: by a test, or by a suite's `plugins: [tests.measure.toy_tracker]`.
docs/extending/metric.md walks through it.
"""

from __future__ import annotations

from typing import Any

from dstbench import ResultField, Tracker, register_tracker
from dstbench.measure.trackers.base import PEAK, PER_SEGMENT, RANK0, SEGMENT, CaseContext, SegmentOutcome


@register_tracker("cpu_threads")
class CpuThreads(Tracker):
    """How many intra-op threads torch ran each timed segment with, and the most."""

    runs = frozenset({SEGMENT})  # around each timed segment
    fields = (
        ResultField("cpu_threads", int | None, PEAK, RANK0, "the most intra-op threads a timed segment ran with",
                    default=None, unit="threads", over_segments="peak"),
        ResultField("segment_cpu_threads", list[int], PER_SEGMENT, RANK0, "intra-op threads of each timed segment",
                    default_factory=list, unit="threads", over_segments="each"),
    )

    def __init__(self) -> None:
        self.threads: list[int] = []
        self._now: int | None = None

    @classmethod
    def for_case(cls, context: CaseContext) -> "CpuThreads | None":
        return cls() if context.timed else None  # a case trained only for accuracy has no timed segments

    def __enter__(self) -> "CpuThreads":  # the segment window: entered just outside the segment's clock
        import torch

        self._now = torch.get_num_threads()
        return self

    def add(self, outcome: SegmentOutcome) -> None:  # after the segment, its windows closed
        assert self._now is not None
        self.threads.append(self._now)

    def write(self, line: Any) -> None:  # at the case's end
        line.segment_cpu_threads = list(self.threads)
        line.cpu_threads = max(self.threads, default=None)
