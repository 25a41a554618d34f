"""The case's latency: every timed segment's milliseconds on the device's clock
(`dstbench.measure.clock.SegmentTimer`, which the case session holds innermost around each
segment), with what each was timed with, and their summary (median, IQR, throughput).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dstbench.measure.trackers.base import (
    LATEST, PER_SEGMENT, RANK0, SEGMENT, SLOWEST_PER_SEGMENT, CaseContext, GroupRule, Joining, RankRule, Ranks,
    ResultField, SegmentOutcome, Tracker,
)
from dstbench.measure.trackers.registry import register_tracker


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


@register_tracker("latency")
class SegmentTimes(Tracker):
    """The case's timed segments: each one's milliseconds, start and interleaved group and round
    (`add`, after each segment's clock stopped); `write` adds their median, IQR and images per
    second. Settling segments are kept apart (`add_settle`)."""

    runs = frozenset({SEGMENT})
    fields = (
        ResultField("segment_steps", int | None, LATEST, RANK0, "training steps per timed segment", default=None,
                    unit="steps", report=False),
        ResultField("segment_ms", list[float], PER_SEGMENT, SLOWEST_PER_SEGMENT, "milliseconds of each timed segment",
                    default_factory=list, per_rank=True, unit="ms", over_segments="each", better="lower"),
        ResultField("median_ms", float | None, MEDIAN_OF_SAMPLES, MEDIAN_OF_SLOWEST, "median of segment_ms", default=None,
                    per_rank=True, unit="ms", over_segments="median", better="lower", report=False),
        ResultField("iqr_ms", float | None, IQR_OF_SAMPLES, IQR_OF_SLOWEST, "interquartile range of segment_ms",
                    default=None, unit="ms", over_segments="spread", report=False),
        ResultField("images_per_s", float | None, IMAGES_OF_SAMPLES, IMAGES_OF_JOB, "images per second at median_ms",
                    default=None, per_rank=True, unit="images/s", over_segments="median", better="higher", report=False),
        # What each sample was timed with (aligned with segment_ms): the interleaved group's id, its
        # round, its start (Unix seconds).
        ResultField("segment_group", list[str], PER_SEGMENT, RANK0, "each segment's interleaved group id",
                    default_factory=list, over_segments="each"),
        ResultField("segment_round", list[int], PER_SEGMENT, RANK0, "each segment's round in its group",
                    default_factory=list, over_segments="each"),
        ResultField("segment_start_s", list[float], PER_SEGMENT, RANK0, "each segment's start, Unix seconds",
                    default_factory=list, unit="s", over_segments="each"),
        ResultField("segment_process", list[int], PER_SEGMENT, RANK0,
                    "each segment's process set in its group (fresh processes per set)", default_factory=list,
                    over_segments="each"),
        ResultField("segment_slot", list[int], PER_SEGMENT, RANK0, "each segment's place in its round's order",
                    default_factory=list, over_segments="each"),
        # Not samples, and not aligned with segment_ms: kept to show the first round after warm-up
        # runs slow, which is why it is not timed.
        ResultField("settle_ms", list[float], CONCATENATED, RANK0,
                    "milliseconds of each untimed settling segment (timing.settle_segments per process set)",
                    default_factory=list, unit="ms"),
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

    @classmethod
    def for_case(cls, context: CaseContext) -> "SegmentTimes | None":
        return cls(context.suite.timing.segment_steps, context.suite.batch_size) if context.timed else None

    @property
    def count(self) -> int:
        return len(self.ms)

    def add(self, outcome: SegmentOutcome) -> None:
        tag = outcome.tag
        self.ms.append(outcome.ms)
        self.start_s.append(outcome.start_s)
        self.group.append(tag.group)
        self.round.append(tag.round)
        self.process.append(tag.process)
        self.slot.append(tag.slot)

    def add_settle(self, outcome: SegmentOutcome) -> None:
        self.settle_ms.append(outcome.ms)

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
