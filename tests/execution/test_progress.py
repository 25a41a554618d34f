"""Progress of a run: the share of work done, the ETA, one plain line per event off a terminal (and a
heartbeat between them), a live bar on a terminal."""

from __future__ import annotations

import io
import threading
import types

import pytest
from rich.console import Console

from dstbench.execution.progress import RunProgress, duration, stage_weights
from dstbench.suite.loading import parse_suite
from tests.conftest import micro_suite


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _result(status: str = "ok") -> types.SimpleNamespace:
    return types.SimpleNamespace(status=status, error="Traceback\nValueError: boom", median_ms=12.5, top1=None, density_achieved=0.1)


def test_stage_weights_follow_the_suite() -> None:
    speed = stage_weights(parse_suite(micro_suite(timing={"warmup_steps": 2, "segment_steps": 3, "segments": 6})))
    assert speed == pytest.approx({"warmup": 0.1, "segment": 0.9})
    both = stage_weights(parse_suite(micro_suite(mode="both", data={"name": "digits", "num_workers": 0},
                                                 model={**micro_suite()["model"], "img_size": 8, "patch_size": 2},
                                                 profile=True)))
    assert set(both) == {"warmup", "segment", "epoch", "profile"} and sum(both.values()) == pytest.approx(1.0)


def test_plain_lines_at_each_stage_with_elapsed_and_eta() -> None:
    stream, clock = io.StringIO(), Clock()
    suite = parse_suite(micro_suite(timing={"warmup_steps": 2, "segment_steps": 3, "segments": 6}))
    with RunProgress(Console(file=stream, width=200), suite, total_cases=2, clock=clock, interval_s=0) as progress:
        progress.case_started("dense@1")
        clock.now += 10
        progress.stage("dense@1", "warmup", 2, 2)
        clock.now += 10
        progress.stage("dense@1", "segment", 3, 6)  # a new stage: a line
        # 0.1 + 0.9 * 3/6 = 0.55 of one case, 0.275 of the run, in 20 s: 52.7 s to go.
        assert progress.fraction() == pytest.approx(0.275)
        assert progress.eta() == pytest.approx(20 * 0.725 / 0.275)
        progress.stage("dense@1", "segment", 4, 6)  # the same stage: no line
        progress.case_finished("dense@1", _result())
        progress.case_started("rigl@0.1")
        progress.case_finished("rigl@0.1", _result("error"))
    lines = stream.getvalue().splitlines()
    assert lines == [
        "case 1/2 dense@1: starting",
        "case 1/2 dense@1: warmup 2/2",
        "case 1/2 dense@1: segment 3/6",
        "case 1/2 dense@1: ok median 12.5 ms/segment, density 0.100",
        "case 2/2 rigl@0.1: starting",
        "case 2/2 rigl@0.1: error ValueError: boom",
    ]


def test_the_summary_line_names_the_run_and_every_line_is_short() -> None:
    stream, clock = io.StringIO(), Clock()
    suite = parse_suite(micro_suite(timing={"warmup_steps": 2, "segment_steps": 3, "segments": 6}))
    long_id = "a_method_with_a_long_label_" * 4 + "@0.1"
    with RunProgress(Console(file=stream, width=80), suite, total_cases=3, clock=clock, interval_s=30) as progress:
        progress.case_started("dense@1")
        progress.case_started(long_id)
        clock.now += 20
        progress.stage("dense@1", "segment", 3, 6)
        assert progress.line() == (
            "progress: 0 of 3 cases done, 2 running (case 1/3 dense@1: segment 3/6 and 1 more), elapsed 20s, ETA 1m29s"
        )
        clock.now += 11
        progress.stage("dense@1", "segment", 4, 6)  # the same stage, but 30 s since the last summary
        error = types.SimpleNamespace(status="error", error="Traceback\nRuntimeError: " + "x" * 500, median_ms=None,
                                      top1=None, density_achieved=None, warnings=["contended: " + "y" * 400])
        progress.case_finished(long_id, error)
    lines = stream.getvalue().splitlines()
    assert lines[3].startswith("progress: 0 of 3 cases done, 2 running")
    assert any(line.startswith("case 2/3 a_method_with") and "RuntimeError" in line for line in lines)
    assert any(line.startswith("  warning: contended") for line in lines)
    assert max(len(line) for line in lines) <= 160


def test_a_case_timed_in_several_groups_keeps_its_number() -> None:
    # dense is timed in each density's group: its second group must not read "case 4/3".
    stream = io.StringIO()
    suite = parse_suite(micro_suite())
    with RunProgress(Console(file=stream, width=200), suite, total_cases=3, clock=Clock(), interval_s=0) as progress:
        for group in (["rigl@0.5", "dense@1"], ["rigl@0.1", "dense@1"]):
            for case_id in group:
                progress.case_started(case_id)
            for case_id in group:
                progress.case_finished(case_id, _result(), count=case_id != "dense@1" or group[0] == "rigl@0.5")
    finished = [line.split(":")[0] for line in stream.getvalue().splitlines() if ": ok" in line]
    assert finished == ["case 1/3 rigl@0.5", "case 2/3 dense@1", "case 3/3 rigl@0.1", "case 2/3 dense@1"]
    assert progress.finished == 3


def test_a_heartbeat_between_events_off_a_terminal() -> None:
    stream = io.StringIO()
    suite = parse_suite(micro_suite())
    beat = threading.Event()

    class Watched(io.StringIO):
        def write(self, text: str) -> int:
            if "epoch 3/200" in text:
                beat.set()
            return stream.write(text)

    with RunProgress(Console(file=Watched(), width=200), suite, total_cases=1, interval_s=0.05) as progress:
        progress.case_started("dense@1")
        progress.stage("dense@1", "epoch", 3, 200)
        lines_before = stream.getvalue().count("\n")
        assert beat.wait(10)  # the stage line
        beat.clear()
        assert beat.wait(10)  # and, with nothing new to say, the heartbeat repeats it
    assert stream.getvalue().count("epoch 3/200") >= 2 and lines_before >= 2


def test_a_terminal_gets_a_live_bar_with_an_eta() -> None:
    stream, clock = io.StringIO(), Clock()
    console = Console(file=stream, force_terminal=True, width=160)
    with RunProgress(console, parse_suite(micro_suite()), total_cases=2, clock=clock) as progress:
        assert progress.live_bar
        progress.case_started("dense@1")
        clock.now += 30
        progress.stage("dense@1", "segment", 3, 3)
        progress._bar.refresh()
        assert "ETA 30s" in stream.getvalue() and "segment 3/3" in stream.getvalue()
        progress.case_finished("dense@1", _result())
    assert "case 1/2 dense@1:" in stream.getvalue()


def test_duration_text() -> None:
    assert [duration(s) for s in (None, 4.4, 65, 3 * 3600 + 7 * 60)] == ["--", "4s", "1m05s", "3h07m"]
