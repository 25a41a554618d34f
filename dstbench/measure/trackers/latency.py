"""Segment timing on the device's own clock: CUDA or MPS events, `perf_counter` on the CPU.

`SegmentTimer` times one segment; `SegmentTimes` is the case's latency tracker: every segment's
milliseconds with what it was timed with, and their summary (median, IQR, throughput).
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from dstbench.measure.trackers.base import (
    LATEST, PER_SEGMENT, RANK0, SLOWEST_PER_SEGMENT, GroupRule, Joining, RankRule, Ranks, ResultField, Tracker,
)

if TYPE_CHECKING:  # torch is imported where it is used: the result record reads the declarations here without it
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


def summarize_ms(samples_ms: list[float]) -> tuple[float, float]:
    """(median, interquartile range) of segment times."""
    values = np.asarray(samples_ms, dtype=float)
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return float(median), float(q3 - q1)


# The summary is recomputed from the merged samples: across groups from every group's, across
# ranks from the slowest rank's per segment when every rank timed as many segments (the job's
# throughput: every rank trains its own batch).
def _summary_joined(part: int) -> Any:
    def join(old: Any, new: Any, joining: Joining) -> Any:
        samples = joining.merged.segment_ms
        return summarize_ms(samples)[part] if samples else new

    return join


def _images_joined(old: Any, new: Any, joining: Joining) -> Any:
    line = joining.merged
    if line.segment_ms and line.batch_size and line.segment_steps:
        # A distributed case's throughput is the whole job's: every rank trains its own batch.
        images = line.batch_size * line.segment_steps * (getattr(line, "world_size", 1) or 1)
        return images / (summarize_ms(line.segment_ms)[0] / 1e3)
    return new


def _ranks_aligned(ranks: Ranks) -> bool:
    samples = ranks.merged.segment_ms
    return bool(samples) and all(len(line.segment_ms) == len(samples) for line in ranks.lines)


def _summary_combined(part: int) -> Any:
    def combine(values: list[Any], ranks: Ranks) -> Any:
        return summarize_ms(ranks.merged.segment_ms)[part] if _ranks_aligned(ranks) else values[0]

    return combine


def _images_combined(values: list[Any], ranks: Ranks) -> Any:
    if not _ranks_aligned(ranks):
        return values[0]
    line = ranks.merged
    images = ranks.world_size * line.batch_size * line.segment_steps
    return images / (summarize_ms(line.segment_ms)[0] / 1e3)


CONCATENATED = GroupRule("every group's, concatenated", lambda old, new, joining: list(old or []) + list(new or []))

# A segment this many scaled MADs (1.4826 x the median absolute deviation, the standard deviation
# of normal data) from the case's median is an outlier worth a warning: normal noise puts one that
# far out once in ~10^23 samples, a descheduled or page-faulting segment easily.
OUTLIER_MADS = 10.0
OUTLIER_PREFIX = "outliers: "


def outlier_warning(samples_ms: list[float]) -> str | None:
    """The line's `warnings` entry when some segments are outliers by the MAD rule, else None."""
    values = np.asarray([x for x in samples_ms if x is not None and np.isfinite(x)], dtype=float)
    if len(values) < 3:
        return None
    median = float(np.median(values))
    scale = 1.4826 * float(np.median(np.abs(values - median)))
    if scale <= 0:
        return None
    outliers = values[np.abs(values - median) > OUTLIER_MADS * scale]
    if not len(outliers):
        return None
    worst = float(outliers[np.argmax(np.abs(outliers - median))])
    return (
        f"{OUTLIER_PREFIX}{len(outliers)} of {len(values)} segments over {OUTLIER_MADS:g} MADs from the median "
        f"{median:.1f} ms (worst {worst:.1f} ms): the machine may have interfered"
    )


MEDIAN_OF_SAMPLES = GroupRule("the median of the merged samples", _summary_joined(0), derived=True)
IQR_OF_SAMPLES = GroupRule("the IQR of the merged samples", _summary_joined(1), derived=True)
IMAGES_OF_SAMPLES = GroupRule("images per second at the merged median", _images_joined, derived=True)
MEDIAN_OF_SLOWEST = RankRule("the median of the slowest rank per segment", _summary_combined(0), derived=True)
IQR_OF_SLOWEST = RankRule("the IQR of the slowest rank per segment", _summary_combined(1), derived=True)
IMAGES_OF_JOB = RankRule("the whole job's images per second", _images_combined, derived=True)


class SegmentTimes(Tracker):
    """The case's timed segments: each one's milliseconds (`add`, after its `SegmentTimer`), start
    and interleaved group and round; `write` adds their median, IQR and images per second."""

    fields = (
        ResultField("segment_steps", int | None, LATEST, RANK0, "training steps per timed segment", default=None),
        ResultField("segment_ms", list[float], PER_SEGMENT, SLOWEST_PER_SEGMENT, "milliseconds of each timed segment",
                    default_factory=list, per_rank=True),
        ResultField("median_ms", float | None, MEDIAN_OF_SAMPLES, MEDIAN_OF_SLOWEST, "median of segment_ms", default=None,
                    per_rank=True),
        ResultField("iqr_ms", float | None, IQR_OF_SAMPLES, IQR_OF_SLOWEST, "interquartile range of segment_ms", default=None),
        ResultField("images_per_s", float | None, IMAGES_OF_SAMPLES, IMAGES_OF_JOB, "images per second at median_ms",
                    default=None, per_rank=True),
        # What each sample was timed with (aligned with segment_ms): the interleaved group's id, its
        # round, its start (Unix seconds).
        ResultField("segment_group", list[str], PER_SEGMENT, RANK0, "each segment's interleaved group id",
                    default_factory=list),
        ResultField("segment_round", list[int], PER_SEGMENT, RANK0, "each segment's round in its group", default_factory=list),
        ResultField("segment_start_s", list[float], PER_SEGMENT, RANK0, "each segment's start, Unix seconds",
                    default_factory=list),
        ResultField("segment_process", list[int], PER_SEGMENT, RANK0,
                    "each segment's process set in its group (fresh processes per set)", default_factory=list),
        ResultField("segment_slot", list[int], PER_SEGMENT, RANK0, "each segment's place in its round's order",
                    default_factory=list),
        # Not samples, and not aligned with segment_ms: kept to show the first round after warm-up
        # runs slow, which is why it is not timed.
        ResultField("settle_ms", list[float], CONCATENATED, RANK0,
                    "milliseconds of each untimed settling segment (timing.settle_segments per process set)",
                    default_factory=list),
    )

    def __init__(self, segment_steps: int, batch_size: int) -> None:
        self.segment_steps = segment_steps
        self.batch_size = batch_size
        self.ms: list[float] = []
        self.start_s: list[float] = []
        self.group: list[str] = []
        self.round: list[int] = []
        self.process: list[int] = []
        self.slot: list[int] = []
        self.settle_ms: list[float] = []

    @property
    def count(self) -> int:
        return len(self.ms)

    def add(self, ms: float, start_s: float, group: str, round: int, process: int = 0, slot: int = 0) -> None:
        self.ms.append(ms)
        self.start_s.append(start_s)
        self.group.append(group)
        self.round.append(round)
        self.process.append(process)
        self.slot.append(slot)

    def add_settle(self, ms: float) -> None:
        self.settle_ms.append(ms)

    def write(self, line: Any) -> None:
        line.segment_ms = list(self.ms)
        line.segment_start_s = list(self.start_s)
        line.segment_group = list(self.group)
        line.segment_round = list(self.round)
        line.segment_process = list(self.process)
        line.segment_slot = list(self.slot)
        line.settle_ms = list(self.settle_ms)
        warning = outlier_warning(self.ms)
        if warning:
            line.warnings.append(warning)
        if self.ms:
            line.median_ms, line.iqr_ms = summarize_ms(self.ms)
            line.images_per_s = self.batch_size * self.segment_steps / (line.median_ms / 1e3)
        line.segment_steps = self.segment_steps
