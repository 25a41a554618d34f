"""Run cases in the calling process: the same session protocol as a case process, without the
process (tests, debugging). Interleaved cases are objects side by side; no time-out.

A case's code that calls `sys.exit` (SystemExit) fails its case as `crash`, as a case process that
exits does; `os._exit` cannot be caught in a process and ends the whole run here: run such methods
with the subprocess launcher (the default).

Some trackers' figures are per process (the allocator's and RSS high-water marks, the GPU's energy
counter: those that declare `per_process`), so a case that was alive beside others here cannot have
its own: its line leaves them unmeasured and says why in `warnings`. Time, exact byte counts and
FLOPs are per case as usual.
"""

from __future__ import annotations

import os
import traceback
from typing import Any, Callable

from dstbench.execution.case_setup import CaseTask, Progress, failed_result
from dstbench.execution.launchers.base import Launcher, register_launcher
from dstbench.execution.launchers.inprocess.config import InProcessConfig
from dstbench.measure.trackers.registry import registered_trackers
from dstbench.results.record import CaseResult
from dstbench.execution.rounds import run_alone
from dstbench.execution.case_session import CaseSession, SegmentTag, failure
from dstbench.util.threads import use_threads


class InProcessCase:
    """A `dstbench.execution.launchers.base.CaseProcess` living in this process."""

    def __init__(self, task: CaseTask, progress: Progress, live: list["InProcessCase"] | None = None) -> None:
        self.task = task
        self.live = live if live is not None else []  # the launcher's cases alive in this process
        self.beside_others = False
        self.progress = progress
        self.pid: int | None = os.getpid()
        self.ready: dict[str, Any] | None = None
        self.failed: CaseResult | None = None
        self.session: CaseSession | None = None

    def _call(self, step: Callable[..., Any], *args: Any) -> Any:
        assert self.session is not None
        # Each step with the case's threads, the caller's restored after: cases share this process.
        with use_threads(self.session.threads):
            try:
                return step(*args)
            except Exception as exc:
                self.failed = failure(self.task, exc)
                self.session.close()
                return None
            except SystemExit as exc:  # the case's code exited: its case crashed, not the run
                self.failed = exited(self.task, exc)
                self.session.close()
                return None

    def start(self) -> None:
        for other in self.live:
            other.beside_others = True
        self.beside_others = self.beside_others or bool(self.live)
        self.live.append(self)
        try:
            self.session = CaseSession(self.task, self.progress)
        except Exception as exc:
            self.failed = failure(self.task, exc)
            return
        except SystemExit as exc:
            self.failed = exited(self.task, exc)
            return
        self.ready = self._call(self.session.open)

    def segment(self, tag: SegmentTag) -> dict[str, Any] | None:
        if self.failed is not None or self.session is None:
            return None
        return self._call(self.session.segment, tag)

    def finish(self) -> CaseResult:
        if self.failed is None and self.session is not None:
            result = self._call(self.session.finish)
            if result is not None:
                if self.beside_others:
                    unmeasured_per_process(result)
                return result
        assert self.failed is not None
        return self.failed

    def close(self) -> None:
        if self in self.live:
            self.live.remove(self)
        if self.session is not None:
            self.session.close()


def exited(task: CaseTask, exc: SystemExit) -> CaseResult:
    """The result of a case whose code raised SystemExit (`sys.exit`, `exit()`): `crash`, with where."""
    code = exc.code
    return failed_result(
        task, "crash",
        f"the case's code exited (sys.exit({code!r})) in the run's own process (launcher inprocess); "
        f"a case process would have ended the same way:\n{traceback.format_exc()}",
    )


SHARED_PROCESS = "timed in one process beside other cases (launcher inprocess): peaks and energy are the process's, not the case's"


def unmeasured_per_process(result: CaseResult) -> None:
    """Mark the figures of every tracker declared `per_process` as not the case's own."""
    for tracker in registered_trackers():
        if tracker.per_process:
            tracker.unmeasured(result, SHARED_PROCESS)
    result.warnings = [*(result.warnings or []), SHARED_PROCESS]


@register_launcher("inprocess")
class InProcessLauncher(Launcher):
    interleaves = True

    def __init__(self) -> None:
        self.live: list[InProcessCase] = []

    @classmethod
    def from_config(cls, config: InProcessConfig) -> "InProcessLauncher":
        return cls()  # no time-out to enforce in this process

    def open(self, task: CaseTask, progress: Progress) -> InProcessCase:
        return InProcessCase(task, progress, self.live)

    def run(self, task: CaseTask, progress: Progress) -> CaseResult:
        return run_alone(self, task, progress)
