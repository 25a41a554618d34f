"""Run a case in the calling process."""

from __future__ import annotations

from dstbench.results import CaseResult
from dstbench.build import CaseTask, Progress
from dstbench.runner import execute_case


class InProcessLauncher:
    def run(self, task: CaseTask, progress: Progress) -> CaseResult:
        return execute_case(task, progress)
