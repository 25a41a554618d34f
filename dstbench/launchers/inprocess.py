"""Run a case in the calling process."""

from __future__ import annotations

from dstbench.results import CaseResult
from dstbench.runner import CaseTask, Progress, execute_case


class InProcessLauncher:
    def run(self, task: CaseTask, progress: Progress) -> CaseResult:
        return execute_case(task, progress)
