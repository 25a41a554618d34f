"""Launchers decide where a case runs; what is measured is `dstbench.execution.case_session`'s business.

- `inprocess`: in this process (debugging, tests); a crash or hang takes the run down with it.
- `subprocess` (default): a fresh process per case with a timeout, so a crash, a hang or an
  out-of-memory error fails that case alone and memory peaks never leak between cases.
- `torchrun`: the case's process starts `torchrun` for a distributed case.
- `subprocess` with `parallel: N` (`parallel`): N groups at once, each pinned to its own GPU or
  share of the cores.
- `submitit` (`submitit_launcher`, `submitit_job`): each case a cluster job (Slurm, or this machine with `cluster: local`).

`inprocess` and `subprocess` hand out live cases (`open`: a `dstbench.execution.rounds.CaseProcess` that
starts, times one segment per command and finishes), which the scheduler interleaves; `run` is a
case alone, start to end. `torchrun` only has `run`. `parallel` and `submitit` place cases
themselves: their `run_groups` yields each group as it ends, in the order they end, and their
`preflight(suite)` lists what forbids the run on this host before anything is written.
"""

from __future__ import annotations

from typing import Protocol

from dstbench.suite.schema import LauncherConfig
from dstbench.results.record import CaseResult
from dstbench.execution.case_setup import CaseTask, Progress


class Launcher(Protocol):
    def run(self, task: CaseTask, progress: Progress) -> CaseResult: ...


def make_launcher(config: LauncherConfig) -> Launcher:
    if config.name == "inprocess":
        from dstbench.execution.launchers.inprocess.launcher import InProcessLauncher

        return InProcessLauncher()
    if config.name == "torchrun":
        from dstbench.execution.launchers.torchrun.launcher import TorchrunLauncher

        return TorchrunLauncher(config)
    if config.name == "submitit":
        from dstbench.execution.launchers.submitit.launcher import SubmititLauncher

        return SubmititLauncher(config)
    if config.parallel > 1:
        from dstbench.execution.launchers.subprocess.parallel import ParallelLauncher

        return ParallelLauncher(timeout_s=config.timeout_s, parallel=config.parallel)
    from dstbench.execution.launchers.subprocess.launcher import SubprocessLauncher

    return SubprocessLauncher(timeout_s=config.timeout_s)
