"""What a cluster job runs (`dstbench.execution.launchers.submitit.launcher` submits it): its case alone, start
to end, in the job's process (`dstbench.execution.case_session.execute_case`), or on the job's node under the torchrun
launcher when `nproc_per_node > 1`; it returns the case's line as plain data, with `env.job_id`.
"""

from __future__ import annotations

import os
import signal
from typing import Any, Callable

from dstbench.execution.case_setup import CaseTask, failed_result
from dstbench.execution.launchers.progress_file import ProgressFile
from dstbench.execution.launchers.submitit.config import SubmititConfig
from dstbench.execution.launchers.torchrun.config import TorchrunConfig
from dstbench.execution.lifeline import OWNER_ENV


class TimeLimit(BaseException):
    """The job's time limit is near. A BaseException, so the case's `except Exception` lets it through
    to `run_job`, which ends the case as `timeout`."""


def time_limit_handler(previous: Any) -> Callable[[int, Any], None]:
    """A handler for submitit's time-limit signal: submitit's own (`previous`) decides; a preempted
    job it requeues exits as submitit made it, a timed-out one raises `TimeLimit`."""

    def handler(signum: int, frame: Any) -> None:
        if callable(previous):
            try:
                previous(signum, frame)
            except Exception as exc:  # submitit: "Job not requeued because: timed-out and not checkpointable"
                raise TimeLimit(str(exc)) from None
            return
        raise TimeLimit(f"signal {signum}")

    return handler


def _job_id() -> str | None:
    try:
        from submitit import JobEnvironment

        return str(JobEnvironment().job_id)
    except Exception:  # not inside a submitit job (a test calling run_job directly)
        return None


def run_job(task: CaseTask, launcher: dict[str, Any], progress_path: str) -> dict[str, Any]:
    """A job's entry point (submitit pickles it by reference): run the case, return its line."""
    # The job is its own root: the driver that submitted it may be gone (a later --resume
    # re-attaches), and a torchrun agent must not end because of that (dstbench.execution.lifeline).
    os.environ.pop(OWNER_ENV, None)
    config = SubmititConfig(**launcher)
    progress = ProgressFile(progress_path)
    progress.path.touch()  # tells the driver the case started
    from submitit import JobEnvironment

    signum = JobEnvironment._usr_sig()
    previous = signal.getsignal(signum)
    signal.signal(signum, time_limit_handler(previous))
    try:
        if config.nproc_per_node > 1:
            from dstbench.execution.launchers.torchrun.launcher import TorchrunLauncher

            ranks = TorchrunConfig(timeout_s=config.timeout_s, nproc_per_node=config.nproc_per_node)  # this node only
            result = TorchrunLauncher(ranks).run(task, progress.write)
        else:
            from dstbench.execution.case_session import execute_case

            result = execute_case(task, progress.write)
    except TimeLimit as exc:
        result = failed_result(task, "timeout", f"the job reached its time limit ({config.job_minutes:g} min): {exc}")
    finally:
        signal.signal(signum, previous)
    result.env["job_id"] = _job_id()
    return result.to_dict()
