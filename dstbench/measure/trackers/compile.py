"""What `torch.compile` cost a case (`compile:` in a suite): the compilation before the timed
segments, and the recompilations inside them, read from torch's own counters.

Counted from `torch._dynamo.utils`: graphs compiled are `counters["stats"]["unique_graphs"]`;
seconds compiling are the `entire_frame_compile` and `entire_backward_compile` phases of
`cumulative_time_spent_ns` (dynamo's frame compile with its backend, and AOTAutograd's lazy
backward compile). A compilation is charged to where it happened: before the timed segments (the
warm-up absorbs the first one; settling segments and a later process set's catch-up count too) it is
`compile_s`, never part of a sample; inside a timed segment it is part of that segment's time, and
counted per segment (`segment_recompiles`). A method that changes tensor shapes at its topology
updates (a compact method's resize) makes the step after an update recompile (in the next segment,
when the update ended one): compile time in a timed segment once the case has made a topology
update is charged to its updates (`topology_recompile_ms`, which the report's topology share
counts); a recompilation before any update has another cause and is named in `warnings`.
"""

from __future__ import annotations

import contextlib
from typing import Any


from dstbench.measure.trackers.base import (
    CASE, COUNT, LARGEST, LATEST, PEAK, PER_SEGMENT, RANK0, SEGMENT, TOTAL, UNTIMED, CaseContext, Column, ResultField,
    SegmentOutcome, Tracker,
)
from dstbench.measure.trackers.registry import register_tracker
from dstbench.measure.trackers.latency import OUTLIER_PREFIX, outlier_warning

# torch's own names for the compile phases summed into seconds compiling (`compile_counters`).
COMPILE_PHASES = ("entire_frame_compile", "entire_backward_compile")


RECOMPILE_NOTE_PREFIX = "compile: recompiled in "


def segments_without_recompiles(segment_ms: list[float], segment_recompiles: list[int]) -> list[float]:
    """The segment times whose segment compiled nothing (aligned lists; a time without its count is kept)."""
    return [ms for i, ms in enumerate(segment_ms) if not (i < len(segment_recompiles) and segment_recompiles[i])]


def recompile_note(segment_recompiles: list[int], recompile_ms: float | None) -> str | None:
    """The line's warning when timed segments recompiled the model, else None."""
    recompiled = sum(1 for graphs in segment_recompiles if graphs)
    if not recompiled:
        return None
    return (
        f"{RECOMPILE_NOTE_PREFIX}{recompiled} of {len(segment_recompiles)} timed segments ({recompile_ms or 0.0:.0f} ms "
        "of compilation in them; after a topology update it is charged to it); left out of the outlier rule"
    )


def compile_counters() -> tuple[int, float]:
    """(graphs compiled, seconds compiling) so far in this process, from torch's counters."""
    from torch._dynamo.utils import counters, cumulative_time_spent_ns

    graphs = int(counters["stats"]["unique_graphs"])
    return graphs, sum(float(cumulative_time_spent_ns.get(phase, 0.0)) for phase in COMPILE_PHASES) / 1e9


@register_tracker("compile")
class CompileRecord(Tracker):
    """The compile cost of one case process: `untimed` and `segment` bracket the work whose
    compilation they count (see the module docstring); an eager case (`options` None) counts
    nothing and writes only `compile: None`. Built for every case: a case trained only for accuracy
    records the options it trained under. It writes after the segment times, whose outlier
    warning it judges again without the segments that recompiled."""

    runs = frozenset({UNTIMED, CASE, SEGMENT})
    untimed_cases = True
    after = ("latency",)
    fields = (
        ResultField("compile", dict[str, Any] | None, LATEST, RANK0,
                    "the torch.compile options the case trained under (None: eagerly)", default=None),
        ResultField("compile_s", float | None, PEAK, LARGEST,
                    "seconds torch spent compiling before the timed segments (the longest of the case's processes)",
                    default=None, per_rank=True, unit="s", better="lower", report=False),
        ResultField("recompiles", int | None, COUNT, LARGEST, "graphs torch compiled inside the timed segments",
                    default=None, per_rank=True, column=Column("recompiles", "count"), unit="count", over_segments="sum",
                    better="lower", report=False),
        ResultField("segment_recompiles", list[int], PER_SEGMENT, RANK0,
                    "graphs compiled in each timed segment (aligned with segment_ms)", default_factory=list,
                    unit="count", over_segments="each"),
        ResultField("recompile_ms", float | None, TOTAL, LARGEST,
                    "milliseconds torch spent compiling inside the timed segments (part of their time)", default=None,
                    unit="ms", over_segments="sum", better="lower", report=False),
        ResultField("topology_recompile_ms", float | None, TOTAL, LARGEST,
                    "of recompile_ms, what followed a topology update: charged to the updates", default=None,
                    unit="ms", over_segments="sum", better="lower", report=False),
    )

    def __init__(self, options: dict[str, Any] | None) -> None:
        self.options = dict(options) if options is not None else None
        self.compile_s = 0.0
        self.untimed_graphs = 0  # graphs compiled before the timed segments
        self.segment_recompiles: list[int] = []
        self.recompile_ms = 0.0
        self.topology_recompile_ms = 0.0
        self.stray = 0  # recompilations before any topology update
        self._mark: tuple[int, float] | None = None
        self._last: tuple[int, float] = (0, 0.0)  # the last timed segment's graphs and seconds
        self.method_name = "the method"

    @classmethod
    def for_case(cls, context: CaseContext) -> "CompileRecord":
        compiled = context.suite.compile
        record = cls(compiled.options() if compiled.enabled else None)
        record.method_name = str(context.case.method)
        return record

    @property
    def enabled(self) -> bool:
        return self.options is not None

    def case(self, tag: Any) -> Any:
        """Before the first timed segment: a compiled case must have compiled in its warm-up."""
        if self.enabled and not self.untimed_graphs:
            raise RuntimeError(f"compile: torch compiled no graph of {self.method_name}'s model in its warm-up; it would train eagerly")
        return contextlib.nullcontext()

    def add(self, outcome: SegmentOutcome) -> None:
        self.charge(outcome.method.topology_updates)

    def _begin(self) -> None:
        self._mark = compile_counters() if self.enabled else None

    def _since(self) -> tuple[int, float]:
        """Graphs and seconds compiled since `_begin` (never below zero: `torch._dynamo.reset`
        clears torch's times)."""
        if self._mark is None:
            return 0, 0.0
        graphs, seconds = compile_counters()
        return max(0, graphs - self._mark[0]), max(0.0, seconds - self._mark[1])

    def untimed(self) -> "_Span":
        """Around work before the timed segments (warm-up, settling, catch-up): its compile time
        adds to `compile_s`."""
        return _Span(self, timed=False)

    def segment(self, tag: Any = None) -> "_Span":
        """Around one timed segment; call `charge` after it."""
        return _Span(self, timed=True)

    def charge(self, updates_so_far: int) -> None:
        """Book the segment just timed: its recompilations, and their compile time to the topology
        updates when the case has made any (`updates_so_far`: the method's total), else as stray."""
        if not self.enabled:
            return
        graphs, seconds = self._last
        self.segment_recompiles.append(graphs)
        self.recompile_ms += seconds * 1e3
        if updates_so_far:
            self.topology_recompile_ms += seconds * 1e3
        else:
            self.stray += graphs

    def write(self, line: Any) -> None:
        line.compile = self.options
        if not self.enabled:
            return
        line.compile_s = self.compile_s
        line.segment_recompiles = list(self.segment_recompiles)
        line.recompiles = sum(self.segment_recompiles)
        line.recompile_ms = self.recompile_ms
        line.topology_recompile_ms = self.topology_recompile_ms
        if any(self.segment_recompiles):
            # A segment that recompiled is slow for a known reason, not because the machine
            # interfered: the outlier rule (written before, by SegmentTimes) judges the others.
            line.warnings[:] = [w for w in line.warnings if not w.startswith(OUTLIER_PREFIX)]
            said = [outlier_warning(segments_without_recompiles(line.segment_ms, self.segment_recompiles)),
                    recompile_note(self.segment_recompiles, self.recompile_ms)]
            line.warnings.extend(w for w in said if w)
        if self.stray:
            line.warnings.append(
                f"compile: {self.stray} recompilation(s) in timed segments before any topology update; their compile "
                "time is in those segments' times"
            )


class _Span:
    """`with` around work whose compilation `CompileRecord` counts."""

    def __init__(self, record: CompileRecord, timed: bool) -> None:
        self.record, self.timed = record, timed

    def __enter__(self) -> "_Span":
        self.record._begin()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> None:
        graphs, seconds = self.record._since()
        if self.timed:
            self.record._last = (graphs, seconds)
        else:
            self.record.compile_s += seconds
            self.record.untimed_graphs += graphs
