"""The compile tracker: where torch's compile time is booked (before the timed segments, inside
them, charged to topology updates) and what a line gets, on counters the test sets."""

from __future__ import annotations

from typing import Any

import pytest

from dstbench.measure.trackers import compile as tracker
from dstbench.measure.trackers.compile import CompileRecord
from dstbench.results.record import CaseResult


class FakeCounters:
    """torch's (graphs compiled, seconds compiling), advanced by the test as a compile would."""

    def __init__(self) -> None:
        self.graphs, self.seconds = 0, 0.0

    def compile(self, graphs: int, seconds: float) -> None:
        self.graphs += graphs
        self.seconds += seconds

    def __call__(self) -> tuple[int, float]:
        return self.graphs, self.seconds


@pytest.fixture
def counters(monkeypatch: pytest.MonkeyPatch) -> FakeCounters:
    fake = FakeCounters()
    monkeypatch.setattr(tracker, "compile_counters", fake)
    return fake


def _line() -> Any:
    return CaseResult(suite="s", suite_hash="h", case_id="barter@0.5", method="barter", method_name="barter",
                      kind="compact", density=0.5, params={})


def test_compilation_is_booked_where_it_happened(counters: FakeCounters) -> None:
    options = {"backend": "inductor", "fullgraph": False, "dynamic": None}
    record = CompileRecord(options)
    counters.compile(2, 20.0)  # before the record counts: another case's compile in this process
    with record.untimed():  # warm-up: the first compilation
        counters.compile(2, 7.5)
    with record.untimed():  # a settling segment
        counters.compile(0, 0.0)
    with record.segment():
        pass
    record.charge(updates_so_far=0)
    with record.segment():  # the step after a topology update recompiles
        counters.compile(1, 0.25)
    record.charge(updates_so_far=1)
    line = _line()
    record.write(line)
    assert line.compile == options and line.compile_s == pytest.approx(7.5) and record.untimed_graphs == 2
    assert line.segment_recompiles == [0, 1] and line.recompiles == 1
    assert line.recompile_ms == pytest.approx(250.0) and line.topology_recompile_ms == pytest.approx(250.0)
    assert line.warnings == [
        "compile: recompiled in 1 of 2 timed segments (250 ms of compilation in them; after a topology update it is "
        "charged to it); left out of the outlier rule"
    ]


def test_a_segment_slow_from_recompiling_is_not_blamed_on_the_machine(counters: FakeCounters) -> None:
    from dstbench.measure.trackers.latency import outlier_warning

    record = CompileRecord({"backend": "inductor", "fullgraph": False, "dynamic": None})
    times = [72.0, 68.0, 8563.0, 69.0, 70.0, 73.0]  # the third recompiled after an update (measured so)
    for ms in times:
        with record.segment():
            if ms > 1000:
                counters.compile(1, 8.477)
        record.charge(updates_so_far=1)
    line = _line()
    line.segment_ms = times
    line.warnings = [outlier_warning(times)]  # what SegmentTimes writes first
    assert line.warnings[0].startswith("outliers: 1 of 6")
    record.write(line)
    assert len(line.warnings) == 1 and line.warnings[0].startswith("compile: recompiled in 1 of 6 timed segments")
    # An outlier among the segments that did not recompile is still named.
    line = _line()
    line.segment_ms = times[:5] + [900.0]
    line.warnings = [outlier_warning(line.segment_ms)]
    record.write(line)
    assert line.warnings[0].startswith("outliers: 1 of 5 segments") and line.warnings[1].startswith("compile: ")


def test_a_recompilation_before_any_update_is_named(counters: FakeCounters) -> None:
    record = CompileRecord({"backend": "eager", "fullgraph": False, "dynamic": None})
    with record.segment():
        counters.compile(1, 0.5)
    record.charge(updates_so_far=0)
    line = _line()
    record.write(line)
    assert line.recompiles == 1 and line.recompile_ms == pytest.approx(500.0) and line.topology_recompile_ms == 0.0
    assert line.warnings[1:] == [
        "compile: 1 recompilation(s) in timed segments before any topology update; their compile time is in those "
        "segments' times"
    ]


def test_an_eager_case_counts_nothing(counters: FakeCounters) -> None:
    record = CompileRecord(None)
    with record.untimed():
        counters.compile(3, 1.0)
    with record.segment():
        counters.compile(1, 1.0)
    record.charge(updates_so_far=5)
    line = _line()
    record.write(line)
    assert line.compile is None and line.compile_s is None and line.recompiles is None and line.segment_recompiles == []
