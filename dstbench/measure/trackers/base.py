"""The tracker contract: a tracker is a context manager around the measured work that declares the
result fields it writes and how each field merges across groups, ranks and processes.

A field is declared once, as a `ResultField`: its name, type, default and meaning, its rule across
groups (`GroupRule`: a case timed in several interleaved groups, such as dense, has one line per
group; `join` adds the next group's line to the line so far, `strip` takes one group's share out of
it before that group is timed again), its rule across ranks (`RankRule`: a torchrun case has one line
per rank; `combine` makes the case's value from every rank's), whether each rank's own value is
listed in the line's `ranks`, and optionally the report column that shows it.

`dstbench.results.record` makes `CaseResult` from the core fields (identity, bookkeeping) and every
tracker's declarations (`dstbench.measure.trackers.TRACKERS`); `dstbench.results.merge` combines
lines field by field by these rules. A rule marked `derived` does not combine the inputs: it
recomputes the field from the merged line, after every other field is merged (a median from the
merged segment times). A new metric is one tracker module: its tracker, its fields, their rules.
"""

from __future__ import annotations

import dataclasses
from types import TracebackType
from typing import Any, Callable, ClassVar

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
    column is a memory figure `dstbench compare` gates (`dstbench.measure.trackers.columns`)."""

    header: str
    unit: str


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

    def dataclass_field(self) -> Any:
        """The `dataclasses.field` of a line class, carrying this declaration in its metadata."""
        default = dataclasses.MISSING if self.default is REQUIRED else self.default
        factory = dataclasses.MISSING if self.default_factory is REQUIRED else self.default_factory
        return dataclasses.field(default=default, default_factory=factory, metadata={DECLARED: self})


def declared_fields(line_type: type) -> tuple[ResultField, ...]:
    """The declarations of a line class's fields, in line order."""
    return tuple(f.metadata[DECLARED] for f in dataclasses.fields(line_type))


class Tracker:
    """A context manager around the measured work that declares, in `fields`, the result fields its
    `write(line)` fills in after the work (it may also add to the line's `warnings`, which every
    tracker may). A tracker that reads its figures after the work (training-state bytes) keeps
    `__enter__` and `__exit__` as they are here; one whose figures a step of their own writes (the
    accuracy track, the profiler) only declares them."""

    fields: ClassVar[tuple[ResultField, ...]] = ()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def write(self, line: Any) -> None:
        """Put this tracker's figures into `line`."""


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
