"""The hand-over between interleaved cases: a case waits after its segment until its process's
other threads are parked, gives up once at the limit, and records how long it waited."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Iterator

import pytest

from dstbench.execution.case_session import CaseSession, CaseTask, SegmentTag
from dstbench.measure import hand_over
from dstbench.measure.hand_over import HandOver, running_threads
from dstbench.suite.loading import parse_suite
from dstbench.suite.plan import expand_cases
from tests.conftest import micro_suite

LINUX_TASKS = Path("/proc/self/task").is_dir()


def _counts(monkeypatch: pytest.MonkeyPatch, counts: Iterator[int | None]) -> None:
    monkeypatch.setattr(hand_over, "running_threads", lambda: next(counts))
    monkeypatch.setattr(hand_over, "POLL_S", 0.0)


def test_a_wait_ends_when_the_other_threads_park(monkeypatch: pytest.MonkeyPatch) -> None:
    _counts(monkeypatch, iter([2, 1, 1, 0]))
    waited = HandOver(True).wait()
    assert waited is not None and waited >= 0
    assert HandOver(False).wait() is None  # `hand_over: immediate` never waits
    _counts(monkeypatch, iter([None]))
    assert HandOver(True).wait() is None  # no thread states here (not Linux): nothing to wait for


def test_threads_that_never_park_hit_the_limit_once_and_the_line_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    _counts(monkeypatch, iter(lambda: 1, None))  # a thread that always runs (OMP_WAIT_POLICY=ACTIVE)
    handing = HandOver(True, limit_s=0.01)
    assert handing.warning() is None
    assert handing.wait() is None and handing.unparked_ms is not None and handing.unparked_ms >= 10
    _counts(monkeypatch, iter([]))  # later segments do not wait (asking would raise StopIteration)
    assert handing.wait() is None
    warning = handing.warning()
    assert warning is not None and warning.startswith(hand_over.WARNING_PREFIX) and "still running" in warning


@pytest.mark.skipif(not LINUX_TASKS, reason="thread states come from /proc (Linux)")
def test_a_thread_that_runs_is_counted_and_the_caller_is_not() -> None:
    done = threading.Event()
    seen: list[int | None] = []

    def hash_a_lot() -> None:  # hashlib releases the GIL: the thread runs while the caller reads
        while not done.is_set():
            hashlib.sha256(b"x" * 2**22).digest()

    worker = threading.Thread(target=hash_a_lot)
    worker.start()
    try:
        for _ in range(200):
            seen.append(running_threads())
            if seen[-1]:
                break
    finally:
        done.set()
        worker.join()
    assert max(s or 0 for s in seen) >= 1
    assert running_threads(own=threading.get_native_id()) == running_threads()


@pytest.mark.skipif(not LINUX_TASKS, reason="thread states come from /proc (Linux)")
@pytest.mark.parametrize("setting", ["parked", "immediate"])
def test_an_interleaved_segment_records_its_hand_over_and_a_lone_one_does_not(setting: str) -> None:
    suite = parse_suite(micro_suite(timing={"warmup_steps": 2, "segment_steps": 2, "segments": 2, "hand_over": setting}))
    [case] = expand_cases(suite)
    session = CaseSession(CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), "."))
    try:
        session.open()
        other = os.getppid()  # a pid of the group besides this process: the segment is interleaved
        session.segment(SegmentTag(group="g", round=0, group_pids=(os.getpid(), other)))
        session.segment(SegmentTag(group="g", round=1, group_pids=(os.getpid(),)))  # alone: its threads are its own
        result = session.finish()
    finally:
        session.close()
    waits = result.noise["hand_over_ms"]
    assert waits[1] is None
    assert (waits[0] is not None and waits[0] >= 0) if setting == "parked" else waits[0] is None
    assert not any(w.startswith(hand_over.WARNING_PREFIX) for w in result.warnings)
