"""`launcher: {name: submitit}`: each case a cluster job through submitit (`pip install 'dstbench[cluster]'`).

`cluster: slurm` submits the cases a run still needs as one Slurm job array (`array_parallelism`
of them at once); `cluster: local` runs them as jobs on this machine (submitit's LocalExecutor,
`array_parallelism` at once, default 1): a way to try a cluster suite, and what the tests run.

The driver (`dstbench run`, on a login node) records each job's id in `RUN_DIR/jobs.json` as soon as
it is submitted, then polls; when a job ends it writes its case's line (`dstbench.execution.orchestrator.write_group`,
an all-or-nothing append), so each case gets one line, as its job finishes. A job runs its case
alone, start to end (`dstbench.execution.launchers.submitit.job`), and returns the line; its progress reaches
the driver through a file (`RUN_DIR/jobs/<case>.progress`). Its logs are in `RUN_DIR/jobs/`.

Statuses. A case that fails inside its job gets its usual status (`oom`, `error`, and under
torchrun `crash`). The job's time limit (`timeout_min`; default the case's `timeout_s` plus 2 min)
ends the case as `timeout` (Slurm's warning signal, `signal_delay_s` before the limit). A job that
ends without a result gets its status from the cluster's state: `cancelled` (scancel, a
preemption that is not requeued, a local job killed by a signal), `timeout`, `oom` (the job's
memory limit), else `crash`, with the end of the job's log. Every line records `env.job_id`.

`--resume` re-attaches: a case recorded in `jobs.json` is not submitted again; the driver waits
for its job (still queued or running, or finished while no driver watched) and writes its line.
Ctrl-C and SIGTERM cancel the jobs this driver watches and drop them from `jobs.json` (so
`--resume` submits them again); SIGHUP (the terminal that started the driver went away) and
SIGKILL leave them running for `--resume` to re-attach to, and so does a submission the cluster
refuses (exit 2 with sbatch's reason: an unknown partition, account or option). A job always
starts its case with `resume` on, so a job that Slurm requeues after a preemption continues an
accuracy case from its last checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

from dstbench.util import extras
from dstbench.execution.case_setup import CaseTask, Progress, failed_result
from dstbench.suite.cases import Case
from dstbench.util.text import clip
from dstbench.suite.groups import Group, new_group_id
from dstbench.execution.launchers.base import GroupRun, Launcher, register_launcher
from dstbench.execution.launchers.submitit.config import SubmititConfig
from dstbench.execution.launchers.subprocess.placement import visible_gpus
from dstbench.execution.launchers.progress_file import ProgressFile
from dstbench.execution.launchers.submitit.job import run_job
from dstbench.execution.launchers.submitit.local_jobs import cancel_local_jobs, local_job_running
from dstbench.execution.lifeline import Terminated
from dstbench.results.record import CaseResult, line_type
from dstbench.util.files import slug, write_atomic
from dstbench.suite.loading import SuiteError
from dstbench.suite.schema import SuiteConfig

JOBS_FILE = "jobs.json"
JOBS_FOLDER = "jobs"
POLL_S = {"local": 0.5, "slurm": 5.0}
CANCEL_WAIT_S = 15.0  # how long Ctrl-C waits for cancelled local jobs to end, once killed where SIGINT failed
# Slurm job states (sacct) in which a job ends without its case's result, and the case's status.
STATE_STATUS = {
    "TIMEOUT": "timeout", "DEADLINE": "timeout", "CANCELLED": "cancelled", "PREEMPTED": "cancelled",
    "INTERRUPTED": "cancelled",  # a local job killed by a signal (how submitit cancels one)
    "OUT_OF_MEMORY": "oom",
}


def status_for_state(state: str | None) -> str:
    """A job's final state ("CANCELLED by 1234", "TIMEOUT", ...) as a case's status."""
    word = (state or "").split()[0].upper() if (state or "").strip() else ""
    return STATE_STATUS.get(word, "crash")


# -- the record of submitted jobs -------------------------------------------------------------------


def load_jobs(run_dir: Path) -> dict[str, dict[str, Any]]:
    """`jobs.json`'s entries by case key (`Case.key`: the case id, and its seed with `seeds:`): {"job_id", "cluster", "submitted_at"}."""
    path = Path(run_dir) / JOBS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        warnings.warn(f"{path}: unreadable ({exc}); its jobs are not re-attached")
        return {}
    jobs = data.get("jobs") if isinstance(data, dict) else None
    return {k: v for k, v in (jobs or {}).items() if isinstance(v, dict) and v.get("job_id")}


def save_jobs(run_dir: Path, jobs: dict[str, dict[str, Any]]) -> None:
    write_atomic(Path(run_dir) / JOBS_FILE, json.dumps({"jobs": jobs}, indent=2) + "\n")


# -- the driver -------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Watched:
    case: Case
    job: Any  # a submitit Job
    job_id: str
    progress_file: ProgressFile
    progress: Progress | None = None  # set once the job said it started
    attached: bool = False  # re-attached from jobs.json (a local one then has no process handle)


def slurm_parameters(config: SubmititConfig) -> dict[str, Any]:
    """The SlurmExecutor parameters (sbatch options) of a suite's launcher."""
    seconds = config.job_minutes * 60
    params: dict[str, Any] = {
        "job_name": "dstbench", "time": math.ceil(config.job_minutes), "nodes": 1, "ntasks_per_node": 1,
        "signal_delay_s": int(min(90, max(10, seconds // 4))),
    }
    for key in ("partition", "account", "qos", "constraint", "cpus_per_task", "array_parallelism"):
        if getattr(config, key) is not None:
            params[key] = getattr(config, key)
    if config.gpus_per_node:
        params["gpus_per_node"] = config.gpus_per_node
    if config.mem_gb is not None:
        params["mem"] = f"{int(config.mem_gb)}GB" if config.mem_gb == int(config.mem_gb) else f"{int(config.mem_gb * 1024)}MB"
    if config.sbatch:
        params["additional_parameters"] = dict(config.sbatch)
    if config.setup:
        params["setup"] = list(config.setup)
    return params


@contextlib.contextmanager
def _submission_env() -> Iterator[None]:
    """The environment jobs inherit (a local job's process, sbatch's default export): this
    process's import path, so a job imports the same dstbench and suite plugins."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


@register_launcher("submitit")
class SubmititLauncher(Launcher):
    """Cases as cluster jobs (see the module docstring)."""

    places_groups = True

    def __init__(self, config: SubmititConfig) -> None:
        self.config = config
        self.cluster = config.cluster
        self.poll_s = POLL_S[config.cluster]

    def preflight(self, suite: SuiteConfig) -> list[tuple[str, str]]:
        """What forbids the run here: submitit not installed, no Slurm to submit to."""
        absent = extras.missing("submitit")
        if absent:
            return [("", extras.message("launcher submitit", absent))]
        if self.cluster == "slurm" and (shutil.which("sbatch") is None or shutil.which("srun") is None):
            return [("launcher.cluster", "slurm: no sbatch and srun on PATH (run from a Slurm login node), "
                     "or cluster: local to run the jobs on this machine")]
        return []

    def executor(self, folder: Path) -> Any:
        import submitit

        if self.cluster == "slurm":
            executor = submitit.SlurmExecutor(folder)
            executor.update_parameters(**slurm_parameters(self.config))
            return executor
        executor = submitit.LocalExecutor(folder)
        seconds = self.config.job_minutes * 60
        params: dict[str, Any] = {"timeout_min": self.config.job_minutes, "signal_delay_s": int(max(1, min(90, seconds // 4)))}
        # submitit sets a local job's CUDA_VISIBLE_DEVICES from gpus_per_node (none: no GPU): give it
        # the GPUs this process sees (the first gpus_per_node of them), by their physical numbers.
        gpus = visible_gpus()
        params["gpus_per_node"] = min(self.config.gpus_per_node or len(gpus), len(gpus))
        if gpus and all(g.isdigit() for g in gpus):
            params["visible_gpus"] = [int(g) for g in gpus]
        executor.update_parameters(**params)
        return executor

    def run(self, task: CaseTask, progress: Progress) -> CaseResult:
        """One case as a job, waited for."""
        case = Case.from_dict(task.case)
        runs = self.run_groups([Group(case.key, (case,))], {case.key: task}, lambda c: progress, "")
        with contextlib.closing(runs):
            return next(iter(runs)).results[0]

    def run_groups(
        self, groups: list[Group], tasks: dict[str, CaseTask], progress_for: Callable[[Case], Progress], reference: str
    ) -> Iterator[GroupRun]:
        """Submit the groups' cases (re-attaching to those `jobs.json` records) and yield each as
        its job ends. Leaving early (Ctrl-C, SIGTERM, `close()`) cancels the jobs still watched."""
        cases = list({c.key: c for g in groups for c in g.cases}.values())
        if not cases:
            return
        run_dir = Path(tasks[cases[0].key].run_dir)
        folder = run_dir / JOBS_FOLDER
        folder.mkdir(exist_ok=True)
        recorded = load_jobs(run_dir)
        watched: dict[str, _Watched] = {}
        for case in cases:
            entry = recorded.get(case.key)
            if entry and entry.get("cluster") == self.cluster:
                watched[case.key] = self._watch(case, self._attach(folder, str(entry["job_id"])), folder, attached=True)
        queued = [c for c in cases if c.key not in watched]
        executor = self.executor(folder) if queued else None
        at_once = self.config.array_parallelism or (1 if self.cluster == "local" else len(queued))
        try:
            while watched or queued:
                if queued and (self.cluster == "slurm" or len(watched) < at_once):
                    # Slurm: the whole array at once (Slurm runs `array_parallelism`); local: as slots free up.
                    batch = queued if self.cluster == "slurm" else queued[: at_once - len(watched)]
                    queued = queued[len(batch):]
                    for w in self._submit(executor, batch, tasks, folder, recorded, run_dir):
                        watched[w.case.key] = w
                for key, w in list(watched.items()):
                    if w.progress is None and w.progress_file.exists():
                        w.progress = progress_for(w.case)
                    if w.progress is not None:
                        w.progress_file.forward(w.progress)
                    if self._ended(w):
                        del watched[key]
                        result = self._collect(w, tasks[key])
                        yield GroupRun(Group(key, (w.case,)), result.groups[0], [result])
                if watched or queued:
                    time.sleep(self.poll_s)
        except BaseException as stop:
            hangup = isinstance(stop, Terminated) and stop.signum == getattr(signal, "SIGHUP", None)
            if hangup or isinstance(stop, SuiteError):  # the terminal went away; a later array was refused
                ids = ", ".join(w.job_id for w in watched.values())
                if ids:
                    warnings.warn(f"jobs left running: {ids}; `dstbench run --resume {run_dir}` re-attaches to them")
            else:
                self._cancel(list(watched.values()), recorded, run_dir)
            raise

    # -- helpers -------------------------------------------------------------------------------------

    def _watch(self, case: Case, job: Any, folder: Path, attached: bool = False) -> _Watched:
        progress_file = ProgressFile(folder / f"{slug(case.key, 'case')}.progress")
        return _Watched(case, job, str(job.job_id), progress_file, attached=attached)

    def _attach(self, folder: Path, job_id: str) -> Any:
        import submitit

        if self.cluster == "slurm":
            return submitit.SlurmJob(folder, job_id)
        return submitit.LocalJob(folder, job_id)

    def _submit(
        self, executor: Any, batch: list[Case], tasks: dict[str, CaseTask], folder: Path,
        recorded: dict[str, dict[str, Any]], run_dir: Path,
    ) -> list[_Watched]:
        """Submit `batch` (one array on Slurm) and record the job ids before anything else."""
        config = self.config.model_dump(mode="json")
        watched = []
        try:
            with _submission_env(), executor.batch():
                jobs = []
                for case in batch:
                    progress_file = folder / f"{slug(case.key, 'case')}.progress"
                    progress_file.unlink(missing_ok=True)  # a cancelled attempt's
                    task = dataclasses.replace(tasks[case.key], resume=True)  # a requeued job continues
                    jobs.append(executor.submit(run_job, task, config, str(progress_file)))
        except Exception as exc:  # sbatch refused them (an unknown partition, account, option)
            raise SuiteError(tasks[batch[0].key].suite_path, [("launcher", clip(f"the jobs were not submitted: {exc}", 2000))]) from None
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        for case, job in zip(batch, jobs):
            recorded[case.key] = {"job_id": str(job.job_id), "cluster": self.cluster, "submitted_at": now}
            watched.append(self._watch(case, job, folder))
        save_jobs(run_dir, recorded)
        return watched

    def _ended(self, w: _Watched) -> bool:
        if w.job.paths.result_pickle.exists():
            return True
        if self.cluster == "local" and w.attached:
            return not local_job_running(w.job_id)
        return bool(w.job.done())

    def _collect(self, w: _Watched, task: CaseTask) -> CaseResult:
        """The case's line from what its job left: its result, or a status from the job's state."""
        from submitit.core.utils import pickle_load

        path = w.job.paths.result_pickle
        if not path.exists() and self.cluster == "slurm":
            time.sleep(2)  # a shared file system may show the result a moment late
        if path.exists():
            outcome, value = pickle_load(path)
            if outcome == "success":
                result = line_type().from_dict(value)
            else:  # the job raised outside the case: submitit's time-limit error, or a broken install
                status = "timeout" if "timed-out" in str(value) else "error"
                result = failed_result(task, status, f"job {w.job_id} failed:\n{value}")
        else:
            state = None if (self.cluster == "local" and w.attached) else str(w.job.state)
            why = f"ended ({state})" if state else "ended"
            # The log first, the verdict last: the terminal shows an error's last line.
            result = failed_result(task, status_for_state(state), f"{self._log_tail(w)}job {w.job_id} {why} without a result")
        if not result.env.get("job_id"):
            result.env["job_id"] = w.job_id
        result.groups = result.groups or [new_group_id(w.case.key)]
        return result

    @staticmethod
    def _log_tail(w: _Watched) -> str:
        for path in (w.job.paths.stderr, w.job.paths.stdout):
            try:
                text = Path(path).read_text(encoding="utf-8", errors="replace")[-3000:]
            except OSError:
                continue
            if text.strip():
                return f"the end of {path}:\n{text.rstrip()}\n"
        return ""

    def _cancel(self, jobs: list[_Watched], recorded: dict[str, dict[str, Any]], run_dir: Path) -> None:
        """Cancel the jobs still watched; those cancelled leave `jobs.json` (`--resume` submits them again)."""
        if not jobs:
            return
        cancelled: list[_Watched] = []
        if self.cluster == "slurm":
            try:
                done = subprocess.run(["scancel", *(w.job_id for w in jobs)], capture_output=True, timeout=60)
                cancelled = jobs if done.returncode == 0 else []
            except (OSError, subprocess.SubprocessError):
                cancelled = []
        else:
            # SIGINT first, SIGKILL where it cannot arrive (a background shell's ignored SIGINT): local_jobs.
            cancel_local_jobs([w.job_id for w in jobs], wait_s=CANCEL_WAIT_S)
            for w in jobs:
                process = getattr(w.job, "_process", None)
                if process is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(timeout=0.1)  # reap it
            cancelled = [w for w in jobs if not local_job_running(w.job_id)]
        for w in cancelled:
            recorded.pop(w.case.key, None)
        with contextlib.suppress(OSError):
            save_jobs(run_dir, recorded)

