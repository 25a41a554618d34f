"""Run cases in the calling process: the same session protocol as a case process, without the
process (tests, debugging). Interleaved cases are objects side by side; no time-out."""

from __future__ import annotations

import os
from typing import Any, Callable

from dstbench.build import CaseTask, Progress
from dstbench.results import CaseResult
from dstbench.runner import CaseSession, SegmentTag, failure
from dstbench.threads import use_threads


class InProcessCase:
    """A `dstbench.scheduler.CaseProcess` living in this process."""

    def __init__(self, task: CaseTask, progress: Progress) -> None:
        self.task = task
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

    def start(self) -> None:
        try:
            self.session = CaseSession(self.task, self.progress)
        except Exception as exc:
            self.failed = failure(self.task, exc)
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
                return result
        assert self.failed is not None
        return self.failed

    def close(self) -> None:
        if self.session is not None:
            self.session.close()


class InProcessLauncher:
    def open(self, task: CaseTask, progress: Progress) -> InProcessCase:
        return InProcessCase(task, progress)

    def run(self, task: CaseTask, progress: Progress) -> CaseResult:
        from dstbench.scheduler import run_alone

        return run_alone(self, task, progress)
