"""The tracker contract: every result field is declared once, with its merge rules, by the core or
by the tracker that writes it; a new tracker's field joins the line and merges by its rules; the
line's keys keep schema 1's order."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest

from dstbench.measure.trackers import registered_trackers
from dstbench.measure.trackers.base import (
    COUNT, LARGEST, GroupRule, RankRule, ResultField, Tracker, declared_fields,
)
from dstbench.results.merge import merge_ranks, merge_shared, strip_group
from dstbench.results.record import CORE_FIELDS, CaseResult, line_class, line_problem, report_columns

# results.jsonl's keys, in order, as schema 1 writes them.
SCHEMA_1_KEYS = [
    "schema_version", "run_id", "suite", "suite_hash", "case_id", "method", "method_name", "kind", "density", "params",
    "status", "device", "precision", "fuse_norms", "batch_size", "mode", "execution", "segment_steps", "segment_ms",
    "median_ms", "iqr_ms", "images_per_s", "segment_group", "segment_round", "segment_start_s", "groups", "noise",
    "warnings", "peak_memory_bytes", "reserved_memory_bytes", "rss_peak_bytes", "state_bytes", "state_breakdown",
    "activation_bytes", "flops_per_step", "density_achieved", "topology_updates", "topology_ms", "topology_detail_ms",
    "loss", "data_loading", "method_extras", "top1", "top5", "epochs", "train_time_s", "curve", "profile", "energy",
    "world_size", "ranks", "env", "started_at", "duration_s", "error",
]
# Declared since schema 1: after its keys, in the registered trackers' order.
ADDED_SINCE = [
    "sweep", "seed", "segment_process", "segment_slot", "settle_ms", "segment_topology_updates", "segment_topology_ms",
    "compile", "compile_s", "recompiles", "segment_recompiles", "recompile_ms", "topology_recompile_ms",
]
IDENTITY = dict(suite="s", suite_hash="h", case_id="dense@1", method="dense", method_name="dense", kind="dense",
                density=1.0, params={}, batch_size=8, segment_steps=3)


class ToyCounter(Tracker):
    """Counts events inside `with`: summed across groups, the largest across ranks."""

    fields = (
        ResultField("toy_events", int | None, COUNT, LARGEST, "events counted in the timed segments", default=None,
                    per_rank=True),
    )

    def __init__(self) -> None:
        self.events = 0
        self.inside = False

    def __enter__(self) -> "ToyCounter":
        self.inside = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.inside = False

    def tick(self) -> None:
        assert self.inside
        self.events += 1

    def write(self, line: Any) -> None:
        line.toy_events = self.events


ToyLine = line_class((*registered_trackers(), ToyCounter), name="ToyLine")


def declarations() -> list[ResultField]:
    return [*CORE_FIELDS, *(spec for tracker in registered_trackers() for spec in tracker.fields)]


def test_every_field_is_declared_exactly_once_with_its_merge_rules() -> None:
    names = [spec.name for spec in declarations()]
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(CaseResult))
    for spec in declared_fields(CaseResult):
        assert isinstance(spec.groups, GroupRule) and isinstance(spec.ranks, RankRule), spec.name
        assert spec.doc, spec.name


def test_to_dict_keeps_schema_1_keys_in_order() -> None:
    assert list(CaseResult(**IDENTITY).to_dict()) == SCHEMA_1_KEYS + ADDED_SINCE
    line = CaseResult.from_dict(CaseResult(**IDENTITY, segment_ms=[1.0]).to_dict())
    assert line.segment_ms == [1.0] and line.schema_version == 1


def test_declared_types_check_lines() -> None:
    good = {**IDENTITY, "status": "ok", "segment_ms": [1.0], "noise": None}
    assert line_problem(good) is None
    assert line_problem({**good, "segment_ms": "x"}) == "segment_ms is 'x'"
    assert line_problem({**good, "world_size": None}) == "world_size is None"


def test_memory_columns_come_from_the_declarations() -> None:
    assert report_columns("bytes") == (("peak_memory_bytes", "peak"), ("state_bytes", "state"),
                                       ("activation_bytes", "activation"))


def test_a_field_declared_twice_is_refused() -> None:
    class Twice(Tracker):
        fields = (ResultField("loss", float | None, COUNT, LARGEST, "again", default=None),)

    with pytest.raises(ValueError, match="loss"):
        line_class((*registered_trackers(), Twice))


def toy_line(group: str, segment_ms: list[float], events: int, **fields: Any) -> Any:
    counter = ToyCounter()
    with counter:
        for _ in range(events):
            counter.tick()
    line = ToyLine(**IDENTITY, segment_ms=segment_ms, segment_group=[group] * len(segment_ms), groups=[group], **fields)
    counter.write(line)
    return line


def test_a_new_tracker_adds_its_field_to_the_line_after_schema_1s() -> None:
    line = toy_line("d=0.1#a", [1.0], 3)
    data = line.to_dict()
    assert list(data) == [*SCHEMA_1_KEYS, *ADDED_SINCE, "toy_events"] and data["toy_events"] == 3
    assert ToyLine.from_dict(data).toy_events == 3


def test_a_new_tracker_field_merges_by_its_rules() -> None:
    first, second = toy_line("d=0.1#a", [1.0, 2.0], 3), toy_line("d=0.2#b", [3.0, 5.0], 5)
    merged = merge_shared(first.to_dict(), second)
    assert type(merged) is ToyLine and merged.toy_events == 8  # summed across groups
    assert merged.segment_ms == [1.0, 2.0, 3.0, 5.0] and merged.median_ms == 2.5
    stripped = strip_group(merged.to_dict(), "d=0.1", ToyLine)
    assert stripped["toy_events"] == 4 and stripped["segment_ms"] == [3.0, 5.0]  # half the segments stay
    ranks = merge_ranks([toy_line("g", [1.0], 2, env={"rank": 0}), toy_line("g", [1.0], 7, env={"rank": 1})])
    assert ranks.toy_events == 7 and [r["toy_events"] for r in ranks.ranks] == [2, 7]  # the largest; per rank


def test_the_record_reads_the_declarations_without_torch() -> None:
    code = "import sys, dstbench.results.merge, dstbench.gates.compare; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
