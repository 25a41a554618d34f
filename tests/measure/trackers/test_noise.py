"""The noise tracker: a busy neighbour on the case's core starves its segments and the case says so."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from dstbench.suite.plan import expand_cases
from dstbench.execution.case_session import CaseTask, run_case
from dstbench.suite.loading import parse_suite
from dstbench.measure.trackers.noise import (
    CONTENDED_FRACTION, STARVED_CPU_SHARE, STARVED_WAIT_SHARE, assess, contention_warning, run_queue_wait_ns,
)
from tests.conftest import micro_suite


def test_rule_marks_starved_segments_and_contended_cases() -> None:
    # With run-queue figures they decide: a passive OpenMP wait lowers cpu_share on an idle machine too.
    passive = assess({"cpu_share": [0.76, 0.75, 0.77, 0.76], "wait_share": [0.01, 0.0, 0.02, 0.01]}, "cpu")
    assert not passive["contended"] and passive["rule"].startswith("starved: wait_share >")
    waiting = assess({"cpu_share": [0.99] * 4, "wait_share": [0.3, 0.25, 0.01, 0.4]}, "cpu")
    assert waiting["starved"] == [True, True, False, True] and waiting["contended"]
    assert contention_warning(waiting) == "contended: 3 of 4 segments starved (wait_share > 0.1, median wait_share 0.30)"
    # Without them (not Linux), cpu_share on the CPU.
    quiet = assess({"cpu_share": [0.97, 0.99, 0.95, 0.98]}, "cpu")
    assert quiet["starved"] == [False] * 4 and not quiet["contended"] and contention_warning(quiet) is None
    one = assess({"cpu_share": [0.97, 0.5, 0.95, 0.98, 0.99]}, "cpu")
    assert one["starved_segments"] == 1 and not one["contended"]  # 1 of 5 is under the fraction
    loaded = assess({"cpu_share": [0.5, 0.6, 0.95, 0.4]}, "cpu")
    assert loaded["starved_segments"] == 3 and loaded["contended"]
    assert contention_warning(loaded).startswith("contended: 3 of 4 segments starved")
    # On CUDA another process on the GPU starves a segment; the host thread's share is recorded only.
    gpu = assess({"cpu_share": [0.3, 0.3], "gpu_other_processes": [0, 1]}, "cuda")
    assert gpu["starved"] == [False, True] and gpu["contended"]
    assert not assess({"cpu_share": [0.1]}, "mps")["contended"]
    assert 0 < CONTENDED_FRACTION < 1 and 0 < STARVED_CPU_SHARE < 1 and 0 < STARVED_WAIT_SHARE < 1


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_busy_loop_on_the_cases_core_starves_it_and_the_warning_appears() -> None:
    core = max(os.sched_getaffinity(0))
    suite = parse_suite(micro_suite(threads=1, timing={"warmup_steps": 2, "segment_steps": 12, "segments": 4}))
    [case] = expand_cases(suite)
    task = CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), ".")
    before = os.sched_getaffinity(0)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    try:
        time.sleep(0.5)  # the loop is spinning before the case starts
        os.sched_setaffinity(0, {core})  # this process and the loop now share one core
        result = run_case(task)
    finally:
        os.sched_setaffinity(0, before)
        spinner.kill()
        spinner.wait()
    noise = result.noise
    assert noise["threads"] == 1 and len(noise["cpu_share"]) == 4
    # Half a core at best: far below the threshold on any machine, and waiting for it the other half.
    assert sorted(noise["cpu_share"])[1] < STARVED_CPU_SHARE - 0.1
    if run_queue_wait_ns() is not None:
        assert sorted(noise["wait_share"])[-2] > STARVED_WAIT_SHARE + 0.1
    assert noise["contended"] and sum(noise["involuntary_switches"]) > 0
    assert any(w.startswith("contended:") for w in result.warnings)
