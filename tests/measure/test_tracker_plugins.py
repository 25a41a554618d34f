"""A metric is one module: a tracker defined in one file (`toy_tracker.py`) reaches results.jsonl
and `Run.frame()` with no other file changed, whether a test imports it or a suite's `plugins:`
does; the registry's rules."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any, Iterator

import pytest
import yaml

import dstbench
from dstbench.measure.trackers import registry
from dstbench.measure.trackers.base import CASE, LATEST, RANK0, ResultField, Tracker
from dstbench.results.record import CaseResult, line_type
from tests.conftest import micro_suite

TOY = "tests.measure.toy_tracker"


@pytest.fixture
def own_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tracker registry as it is, restored after the test (with the toy module forgotten, so
    that importing it registers it again)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.delitem(sys.modules, TOY, raising=False)
    yield
    sys.modules.pop(TOY, None)


def run_micro(tmp_path: Any, **overrides: Any) -> Any:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(micro_suite(methods=["dense", "rigl"], **overrides)))
    return dstbench.run_suite(path, out=tmp_path / "runs", progress=False)


def check_toy_fields(run: Any) -> None:
    lines = [json.loads(text) for text in (run.path / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(line["status"] == "ok" for line in lines)
    for line in lines:  # the micro suite runs each case on one intra-op thread, three timed segments
        assert line["segment_cpu_threads"] == [1, 1, 1] and line["cpu_threads"] == 1
    frame = run.frame()
    assert "cpu_threads" in frame.columns and frame["cpu_threads"].tolist() == [1, 1]
    assert "segment_cpu_threads" not in frame.columns  # a list does not fit a cell: all_columns=True has it
    assert "segment_cpu_threads" in run.frame(all_columns=True).columns


@pytest.mark.slow  # a run (in this process)
def test_a_tracker_in_one_file_reaches_the_line_the_frame_the_report_and_the_gates(own_registry: None, tmp_path: Any) -> None:
    import tests.measure.toy_tracker  # noqa: F401 - registers cpu_threads

    assert {"cpu_threads", "segment_cpu_threads"} <= {f.name for f in dataclasses.fields(line_type())}
    run = run_micro(tmp_path, expect=[{"metric": "cpu_threads", "max": 1}, {"metric": "cpu_threads", "method": "rigl", "min": 2}])
    check_toy_fields(run)
    outcomes = {(o.expectation.method, o.case): o for o in run.check().expectations}
    assert outcomes[("*", "dense@1")].verdict == outcomes[("*", "rigl@0.5")].verdict == "PASS"
    assert outcomes[("*", "dense@1")].message == "1 <= 1 (threads)"
    assert outcomes[("rigl", "rigl@0.5")].verdict == "FAIL" and "1 < min 2" in outcomes[("rigl", "rigl@0.5")].message
    # The report's table of tracker figures: Markdown and HTML, with the terminal's text.
    text = run.report(html=tmp_path / "r.html", markdown=tmp_path / "r.md")
    for report in (text, (tmp_path / "r.md").read_text(), (tmp_path / "r.html").read_text()):
        assert "Other tracker figures" in report and "cpu_threads (threads)" in report and "energy (J/step)" in report
        assert "the most intra-op threads a timed segment ran with" in report or report is text
    # compare --metric: one seed a side, so the sampled figure is inconclusive, never a regression.
    rows = dstbench.compare(run, run, metrics=["cpu_threads"], memory_only=True).frame().query("metric == 'cpu_threads'")
    assert len(rows) == 2 and set(rows["verdict"]) == {"inconclusive"} and set(rows["basis"]) == {"one seed"}


@pytest.mark.slow  # a run
@pytest.mark.parametrize("launcher", ["inprocess", "subprocess"])
def test_a_tracker_from_a_suites_plugins(own_registry: None, tmp_path: Any, launcher: str) -> None:
    assert line_type() is CaseResult  # nothing registered it yet
    # In case processes (subprocess), each imports the plugin when it reads the suite, as the run does.
    run = run_micro(tmp_path, plugins=[TOY], launcher={"name": launcher})
    check_toy_fields(run)


class Window(Tracker):
    runs = frozenset({CASE})
    fields = (ResultField("window_s", float | None, LATEST, RANK0, "a window's seconds", default=None),)


def test_the_registry_orders_by_after_and_refuses_what_would_break_a_line(own_registry: None) -> None:
    class Late(Window):
        after = ("window_b",)
        fields = (ResultField("late_s", float | None, LATEST, RANK0, "later", default=None),)

    class B(Window):
        fields = (ResultField("b_s", float | None, LATEST, RANK0, "b", default=None),)

    registry.register_tracker("late")(Late)
    registry.register_tracker("window_b")(B)
    names = [t.name for t in registry.registered_trackers()]
    assert names.index("window_b") < names.index("late") and names[-2:] == ["window_b", "late"]

    class Taken(Window):
        fields = (ResultField("median_ms", float | None, LATEST, RANK0, "again", default=None),)

    with pytest.raises(ValueError, match="'median_ms' is already declared by tracker 'latency'"):
        registry.register_tracker("taken")(Taken)

    class NoDefault(Window):
        fields = (ResultField("bare", float, LATEST, RANK0, "no default"),)

    with pytest.raises(ValueError, match="needs a default"):
        registry.register_tracker("bare")(NoDefault)

    class Sometime(Window):
        runs = frozenset({"sometime"})

    with pytest.raises(ValueError, match="unknown phase"):
        registry.register_tracker("sometime")(Sometime)
    with pytest.raises(ValueError, match="already registered"):
        registry.register_tracker("latency")(Window)

    class Lost(Window):
        after = ("nowhere",)
        fields = ()

    registry.register_tracker("lost")(Lost)
    with pytest.raises(ValueError, match="unregistered tracker"):
        registry.registered_trackers()


def test_a_field_declares_what_a_reader_aggregates_by() -> None:
    with pytest.raises(ValueError, match="over_seeds 'median'"):
        ResultField("x", float | None, LATEST, RANK0, "x", default=None, over_seeds="median")
    assert ResultField("x", int | None, LATEST, RANK0, "x", default=None).scalar
    assert not ResultField("x", list[int], LATEST, RANK0, "x", default_factory=list).scalar
