"""A clean hand-over between interleaved cases: a case process gives up the cores before the next
case's segment starts.

Why. OpenMP's worker threads (libgomp, which torch's CPU ops run on) spin after each parallel
region before they sleep: GOMP_SPINCOUNT's default of 300,000 spins is about 7 ms on this project's
CPU (`reports/studies/hand_over`). The last region of a segment leaves a case's workers spinning
after its end event; interleaved, the next case's segment started on cores they still held (its
run-queue wait, `noise.wait_share`, p90 0.11 where alone 0.002). `OMP_WAIT_POLICY=PASSIVE` would
stop the spinning inside the segments too, and slowed the smoke model's steps 30-60%.

What. After each segment an interleaved case waits, untimed, until no thread of its process but
the waiting one is running or runnable (Linux: each thread's state in `/proc/self/task/*/stat`),
for at most `PARK_LIMIT_S`. Threads that never park (`OMP_WAIT_POLICY=ACTIVE`, a busy thread of a
plugin) hit the limit once; the case then stops waiting and its line says so (`warning`).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PARK_LIMIT_S = 0.2  # libgomp's default spin is ~7 ms here; 30x that is "never parks"
POLL_S = 0.0002
_TASKS = Path("/proc/self/task")
WARNING_PREFIX = "hand-over: "


def running_threads(own: int | None = None) -> int | None:
    """How many threads of this process besides `own` (default: the calling thread) are running
    or runnable (state R); None where the kernel does not say (no `/proc`)."""
    own_id = str(threading.get_native_id() if own is None else own)
    try:
        tasks = os.listdir(_TASKS)
    except OSError:
        return None
    running = 0
    for task in tasks:
        if task == own_id:
            continue
        try:
            state = (_TASKS / task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
        running += state == "R"
    return running


class HandOver:
    """Waits after a case's segments until its process's other threads are parked; `enabled`
    false (`timing.hand_over: immediate`) never waits."""

    def __init__(self, enabled: bool, limit_s: float = PARK_LIMIT_S) -> None:
        self.enabled = enabled
        self.limit_s = limit_s
        self.unparked_ms: float | None = None  # set when a wait hit the limit: later segments do not wait

    def wait(self) -> float | None:
        """Milliseconds waited until the other threads parked; None when it did not wait
        (disabled, no thread states here, or an earlier wait hit the limit)."""
        if not self.enabled or self.unparked_ms is not None:
            return None
        started = time.perf_counter()
        while True:
            running = running_threads()
            if running is None:
                return None
            waited = time.perf_counter() - started
            if running == 0:
                return round(waited * 1e3, 3)
            if waited >= self.limit_s:
                self.unparked_ms = round(waited * 1e3, 1)
                return None
            time.sleep(POLL_S)

    def warning(self) -> str | None:
        """The line's `warnings` entry when the threads did not park, else None."""
        if self.unparked_ms is None:
            return None
        return (
            f"{WARNING_PREFIX}this process's threads were still running {self.unparked_ms:g} ms after a segment "
            "(OMP_WAIT_POLICY=ACTIVE, or a busy thread?); its later segments were handed over without waiting, "
            "so the next case of the group may have shared the cores with them"
        )
