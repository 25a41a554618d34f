"""The tracker contract: a tracker is a measurement around the work of a case that declares when
it runs, the result fields it writes, and how each field merges across groups, ranks and processes.

A field is declared once, as a `ResultField`: its name, type, default and meaning, its unit, how it
relates to the timed segments and what a row pooled over seeds shows of it, which direction is
better, its rule across groups (`GroupRule`: a case timed in several interleaved groups, such as
dense, has one line per group; `join` adds the next group's line to the line so far, `strip` takes
one group's share out of it before that group is timed again), its rule across ranks (`RankRule`: a
torchrun case has one line per rank; `combine` makes the case's value from every rank's), whether
each rank's own value is listed in the line's `ranks`, and optionally the report column that shows
it.

`dstbench.results.record` makes the line class from the core fields (identity, bookkeeping) and
every registered tracker's declarations (`dstbench.measure.trackers.registry`);
`dstbench.results.merge` combines lines field by field by these rules. A rule marked `derived` does
not combine the inputs: it recomputes the field from the merged line, after every other field is
merged (a median from the merged segment times). `dstbench.execution.case_session.CaseSession` runs
every registered tracker in the phases it declares (`Tracker`). A new metric is one tracker module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
from types import TracebackType
from typing import Any, Callable, ClassVar, ContextManager

DECLARED = "dstbench.declared"  # the key of a line field's metadata that holds its ResultField


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


# What `GroupRule.strip` returns for a field that keeps its value.
UNCHANGED: Any = _Marker("UNCHANGED")
# A field declared without a default (dataclasses' own MISSING would be taken for a default here).
REQUIRED: Any = _Marker("REQUIRED")


@dataclasses.dataclass(frozen=True)
class Joining:
    """What a group rule sees: the line so far (`previous`), the next group's line (`current`) and
    the merged line being built (`merged`: a copy of `current`; when a derived rule runs, every
    other field already holds its merged value)."""

    previous: Any
    current: Any
    merged: Any


@dataclasses.dataclass(frozen=True)
class Cut:
    """What `strip_group` takes out of a line: group `base`'s samples. `segments` is the line's
    sample count, `keep` the indices of the samples that stay."""

    base: str
    segments: int
    keep: tuple[int, ...]

    @property
    def removes_samples(self) -> bool:
        return bool(self.segments) and len(self.keep) < self.segments

    @property
    def share(self) -> float:
        """The share of the samples that stays."""
        return len(self.keep) / self.segments

    def select(self, values: Any) -> Any:
        """The kept items of a per-segment list (aligned with the samples), else UNCHANGED."""
        values = list(values or [])
        return [values[i] for i in self.keep] if len(values) == self.segments else UNCHANGED


@dataclasses.dataclass(frozen=True)
class Ranks:
    """What a rank rule sees: every rank's line in rank order, the job's world size, the merged line
    being built (a copy of rank 0's; complete but for the derived fields when a derived rule runs)
    and the fields each rank's entry of `ranks` lists, in line order."""

    lines: tuple[Any, ...]
    world_size: int
    merged: Any
    per_rank: tuple[str, ...]


def _keep(value: Any, cut: Cut) -> Any:
    return UNCHANGED


@dataclasses.dataclass(frozen=True)
class GroupRule:
    """How a field combines across the groups a case was timed in. `join(previous, current,
    joining)` gives the merged value from the two lines' values; `strip(value, cut)` the value
    without the cut group's share (or UNCHANGED)."""

    name: str
    join: Callable[[Any, Any, Joining], Any]
    strip: Callable[[Any, Cut], Any] = _keep
    derived: bool = False


@dataclasses.dataclass(frozen=True)
class RankRule:
    """How a field combines across a distributed case's ranks: `combine(values, ranks)` gives the
    case's value from every rank's, in rank order."""

    name: str
    combine: Callable[[list[Any], Ranks], Any]
    derived: bool = False


@dataclasses.dataclass(frozen=True)
class Column:
    """A report column showing a field: its header and the unit of its values. Every `bytes`
    column is a memory figure `dstbench compare` gates (`dstbench.results.record.report_columns`)."""

    header: str
    unit: str


# How a field's value relates to the timed segments.
SEGMENT_AGGREGATES = {
    "each": "one item per timed segment (aligned with segment_ms)",
    "median": "the median over the timed segments",
    "spread": "the interquartile range over the timed segments",
    "sum": "summed over the timed segments",
    "peak": "the largest over the timed segments",
    "window": "measured once over the timed segments",
    "last": "the last timed segment's",
    "warm-up": "measured in the warm-up (one step)",
    "case": "the case's, not a segment figure",
}
# What a row pooled over a case's seeds (`Run.frame()`) shows of the field.
SEED_AGGREGATES = {
    "first": "the first seed's (the timed seed's)",
    "mean": "the mean over the ok seeds",
}
BETTER = (None, "lower", "higher")


@dataclasses.dataclass(frozen=True)
class ResultField:
    """One field of a result line, as the tracker that writes it (or the record's core) declares it.
    `type` is the annotation readers check a line against (`dstbench.results.record.line_problem`);
    `per_rank` lists each rank's own value in the line's `ranks`."""

    name: str
    type: Any
    groups: GroupRule
    ranks: RankRule
    doc: str
    default: Any = REQUIRED
    default_factory: Any = REQUIRED
    per_rank: bool = False
    column: Column | None = None
    # What a reader needs to aggregate and judge the figure (the results reference lists them):
    unit: str | None = None  # of the value, or of each item of a per-segment list ("ms", "bytes", ...)
    over_segments: str = "case"  # SEGMENT_AGGREGATES: how the value relates to the timed segments
    over_seeds: str = "first"  # SEED_AGGREGATES: what a row pooled over a case's seeds shows
    better: str | None = None  # "lower", "higher", or None (not a figure to improve)
    # The report's table of tracker figures (`dstbench.report.tracker_fields`) shows the field unless
    # it opts out (another table shows it, or it is a setting); a value that is not a number, a
    # string or a flag shows through `summary` (value -> number or text), else not at all.
    report: bool = True
    summary: Callable[[Any], Any] | None = None
    summary_unit: str | None = None  # the unit of what `summary` gives (default: `unit`)
    # A count that does not jitter between runs (bytes, FLOPs): `compare --metric` judges it as memory
    # is judged, by its change alone; any other figure by the equivalence rule over seeds.
    exact: bool = False

    def __post_init__(self) -> None:
        for what, value, allowed in (("over_segments", self.over_segments, SEGMENT_AGGREGATES),
                                     ("over_seeds", self.over_seeds, SEED_AGGREGATES), ("better", self.better, BETTER)):
            if value not in allowed:
                raise ValueError(f"result field {self.name!r}: {what} {value!r} is not one of {', '.join(map(repr, allowed))}")

    @property
    def has_default(self) -> bool:
        return self.default is not REQUIRED or self.default_factory is not REQUIRED

    @property
    def reported(self) -> bool:
        """Whether the report's table of tracker figures has a column for it."""
        return self.report and (self.scalar or self.summary is not None)

    def shown(self, value: Any) -> Any:
        """What a report cell shows of `value`: itself, or its `summary`."""
        return self.summary(value) if self.summary is not None else value

    @property
    def shown_unit(self) -> str | None:
        """The unit of what `shown` gives."""
        return self.summary_unit if self.summary is not None else self.unit

    @property
    def gateable(self) -> bool:
        """Whether `expect:` and `compare --metric` can judge it: a number, or a value whose
        `summary` is one."""
        args = self._type_args()
        numeric = any(arg in (int, float) for arg in args) and all(arg in (int, float, type(None)) for arg in args)
        return numeric or self.summary is not None

    @property
    def scalar(self) -> bool:
        """Whether the value fits a table cell: a number, a string or a flag (or None)."""
        return all(arg in (int, float, str, bool, type(None)) for arg in self._type_args())

    def _type_args(self) -> tuple[Any, ...]:
        """The types a value may have: a union's members, else the type itself."""
        union = typing.get_origin(self.type) in (typing.Union, types.UnionType)
        return typing.get_args(self.type) if union else (self.type,)

    def dataclass_field(self) -> Any:
        """The `dataclasses.field` of a line class, carrying this declaration in its metadata."""
        default = dataclasses.MISSING if self.default is REQUIRED else self.default
        factory = dataclasses.MISSING if self.default_factory is REQUIRED else self.default_factory
        return dataclasses.field(default=default, default_factory=factory, metadata={DECLARED: self})


def declared_fields(line_type: type) -> tuple[ResultField, ...]:
    """The declarations of a line class's fields, in line order."""
    return tuple(f.metadata[DECLARED] for f in dataclasses.fields(line_type))


# When a tracker runs, in a timed case's life (`Tracker.runs`); the case session calls the hook of
# the same name on every tracker that declares it.
WARMUP = "warmup"  # around the first warm-up step (`warmup()`: a context manager)
UNTIMED = "untimed"  # around untimed training: the rest of the warm-up, catch-up, settling (`untimed()`)
CASE = "case"  # one window over all the timed segments: entered before the first, left at the end (`case(tag)`)
SEGMENT = "segment"  # around each timed segment, outside its clock (`segment(tag)`); then `add(outcome)`
PHASES = (WARMUP, UNTIMED, CASE, SEGMENT)


@dataclasses.dataclass
class CaseContext:
    """What a tracker is built from (`Tracker.for_case`): the suite, the case, its device and
    threads, the method (None in a case trained only for accuracy, which is not timed), how its
    inputs are made, and the process's resident bytes when the case started building."""

    suite: Any
    case: Any
    device: Any
    threads: int
    method: Any = None
    data_loading: str | None = None
    rss_baseline_bytes: int | None = None

    @property
    def timed(self) -> bool:
        return self.method is not None


@dataclasses.dataclass
class SegmentOutcome:
    """One segment as the session timed it, handed to each tracker's `add` (or `add_settle` for an
    untimed settling segment): its milliseconds on the device's clock, its start (Unix seconds), the
    launcher's tag, the method's `SegmentStats`, the method, and how long the process's threads took
    to park after it (interleaved, else None). `report` is what the session returns to the launcher
    for the segment; a tracker may add to it."""

    ms: float
    start_s: float
    tag: Any
    stats: Any = None
    method: Any = None
    hand_over_ms: float | None = None
    report: dict[str, Any] = dataclasses.field(default_factory=dict)


class Tracker:
    """A measurement around the work of a case that declares the result fields its `write(line)`
    fills in at the case's end (it may also add to the line's `warnings`).

    What a tracker declares on its class (`dstbench.measure.trackers.registry.register_tracker`
    registers it, and `CaseSession` drives every registered one):

    - `fields`: the result fields it writes (`ResultField`: name, type, unit, merge rules, how to
      aggregate over segments and seeds, which direction is better).
    - `runs`: when it runs (`PHASES`); the session calls the hook of each phase named. Empty: it
      only declares fields that a step of their own writes (the accuracy track, the profiler).
    - `per_process`: its figures mean something only for a case alone in its process (a peak, a
      device counter); a launcher that runs cases side by side in one process marks them
      unmeasured (`unmeasured`).
    - `after`: the registered trackers it must follow: its windows open inside theirs and it writes
      after them. Otherwise trackers go in the order they were registered.

    `for_case(context)` builds it for one case, or returns None where it does not apply. The
    session builds trackers only for timed cases, except those that declare `untimed_cases`.
    """

    name: ClassVar[str] = ""  # set by register_tracker
    fields: ClassVar[tuple[ResultField, ...]] = ()
    runs: ClassVar[frozenset[str]] = frozenset()
    per_process: ClassVar[bool] = False
    after: ClassVar[tuple[str, ...]] = ()
    untimed_cases: ClassVar[bool] = False  # also built for a case trained only for accuracy

    @classmethod
    def for_case(cls, context: CaseContext) -> "Tracker | None":
        """This tracker for one case; None where it does not apply (the default: a tracker that
        runs in no phase is built by its own step, or never)."""
        return cls() if cls.runs else None

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None

    # -- the phases' windows (each a context manager; the default is this tracker itself) ---------
    def warmup(self) -> ContextManager[Any]:
        return self

    def untimed(self) -> ContextManager[Any]:
        return contextlib.nullcontext()

    def case(self, tag: Any) -> ContextManager[Any]:
        """Around all the timed segments; `tag` is the first segment's (`SegmentTag`)."""
        return self

    def segment(self, tag: Any) -> ContextManager[Any]:
        return self

    def add(self, outcome: SegmentOutcome) -> None:
        """After each timed segment (its windows closed)."""

    def add_settle(self, outcome: SegmentOutcome) -> None:
        """After each untimed settling segment."""

    def write(self, line: Any) -> None:
        """Put this tracker's figures into `line`."""

    @classmethod
    def unmeasured(cls, line: Any, reason: str) -> None:
        """Mark this tracker's figures in `line` as not the case's own (see `per_process`): each
        field back to its default."""
        for spec in cls.fields:
            setattr(line, spec.name, spec.default if spec.default is not REQUIRED else spec.default_factory())


# -- named rules -----------------------------------------------------------------------------------
def _peak(old: Any, new: Any, joining: Any = None) -> Any:
    values = [v for v in (old, new) if v is not None]
    return max(values) if values else None


def _total(zero: int | float) -> GroupRule:
    rounded = isinstance(zero, int)

    def join(old: Any, new: Any, joining: Joining) -> Any:
        return (old or zero) + (new or zero)

    def strip(value: Any, cut: Cut) -> Any:
        # Each group runs the case from step 0 with the same schedule, so a total splits evenly by
        # segments (updates exactly, their time and the wall time nearly so).
        if not (cut.removes_samples and isinstance(value, (int, float))):
            return UNCHANGED
        return round(value * cut.share) if rounded else value * cut.share

    return GroupRule("count, summed" if rounded else "total, summed", join, strip)


def _join_by_key(old: Any, new: Any, joining: Joining) -> dict[str, float]:
    totals = dict(old or {})
    for key, value in (new or {}).items():
        totals[key] = totals.get(key, 0.0) + value
    return totals


def _strip_by_key(value: Any, cut: Cut) -> Any:
    if not (cut.removes_samples and isinstance(value, dict)):
        return UNCHANGED
    return {key: v * cut.share for key, v in value.items()}


def _union(old: Any, new: Any, joining: Any = None) -> list[Any]:
    return list(old) + [item for item in new if item not in old]


def _largest(values: list[Any], ranks: Ranks) -> Any:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _mean(values: list[Any], ranks: Ranks) -> Any:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _slowest_per_segment(values: list[Any], ranks: Ranks) -> Any:
    first = values[0]
    if first and all(len(v) == len(first) for v in values):
        return [max(samples) for samples in zip(*values)]
    return first


# Across groups.
LATEST = GroupRule("the latest group's", lambda old, new, joining: new)
EARLIEST = GroupRule("the earliest group's", lambda old, new, joining: old)
PER_SEGMENT = GroupRule("per segment: concatenated, the cut group's items removed",
                        lambda old, new, joining: list(old) + list(new), lambda value, cut: cut.select(value))
TOTAL = _total(0.0)  # a float total: summed; scaled by the kept share when a group is cut
COUNT = _total(0)  # an integer total: summed; scaled and rounded when a group is cut
TOTAL_BY_KEY = GroupRule("totals by key, summed", _join_by_key, _strip_by_key)
PEAK = GroupRule("the largest", _peak)
UNION = GroupRule("every group's, each once", _union)

# Across ranks.
RANK0 = RankRule("rank 0's", lambda values, ranks: values[0])
LARGEST = RankRule("the largest rank's", _largest)
MEAN = RankRule("the mean over ranks", _mean)
SLOWEST_PER_SEGMENT = RankRule("the slowest rank's, segment by segment", _slowest_per_segment)
