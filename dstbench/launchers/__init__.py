"""Launchers decide where a case runs; what is measured is `dstbench.runner`'s business.

- `inprocess`: in this process (debugging, tests); a crash or hang takes the run down with it.
- `subprocess` (default): a fresh process per case with a timeout, so a crash, a hang or an
  out-of-memory error fails that case alone and memory peaks never leak between cases.
- `torchrun`: the case's process starts `torchrun` for a distributed case.

`inprocess` and `subprocess` hand out live cases (`open`: a `dstbench.scheduler.CaseProcess` that
starts, times one segment per command and finishes), which the scheduler interleaves; `run` is a
case alone, start to end. `torchrun` only has `run`.
"""

from __future__ import annotations

from typing import Protocol

from dstbench.config import LauncherConfig
from dstbench.results import CaseResult
from dstbench.build import CaseTask, Progress


class Launcher(Protocol):
    def run(self, task: CaseTask, progress: Progress) -> CaseResult: ...


def make_launcher(config: LauncherConfig) -> Launcher:
    if config.name == "inprocess":
        from dstbench.launchers.inprocess import InProcessLauncher

        return InProcessLauncher()
    if config.name == "torchrun":
        from dstbench.launchers.torchrun import TorchrunLauncher

        return TorchrunLauncher(config)
    from dstbench.launchers.subprocess import SubprocessLauncher

    return SubprocessLauncher(timeout_s=config.timeout_s)
