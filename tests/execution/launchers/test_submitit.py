"""`launcher: {name: submitit}`: each case a job. The jobs run on submitit's local cluster here (a
process per job, ~5-10 s each on this machine: few jobs per test); Slurm's side is checked as the
sbatch file submitit would write."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from dstbench.execution.case_setup import CaseTask, failed_result
from dstbench.suite.plan import expand_cases
from dstbench.cli import main
from dstbench.execution.launchers.submitit.job import TimeLimit, run_job, time_limit_handler
from dstbench.execution.launchers.submitit.launcher import load_jobs, slurm_parameters, status_for_state
from dstbench.execution.launchers.submitit.local_jobs import cancel_local_jobs, descendants, ignores_sigint
from dstbench.results.record import CaseResult, iter_results
from dstbench.execution.orchestrator import plan_run, run_suite
from dstbench.suite.plan import resume_conflicts
from dstbench.util.files import RESULTS_FILE, slug
from dstbench.suite.loading import SuiteError, parse_suite
from tests.conftest import micro_suite
from tests.faults.processes import alive, reap_all, start_with_sigint, survivors, wait_for_file
from tests.execution.launchers.fault_methods import PLUGIN

ROOT = Path(__file__).resolve().parents[3]
TIMING = {"warmup_steps": 1, "segment_steps": 1, "segments": 2}
START_S = 240.0  # guard only: how long a loaded machine may take to start a job


def local(**keys: object) -> dict:
    return {"name": "submitit", "cluster": "local", **keys}


def hang_method(tmp_path: Path, label: str = "hang") -> dict:
    """A case that hangs while `tmp_path/hang` exists, after writing "pid parent" (the job's process
    and its local controller, whose pid is the job id) to `tmp_path/pids`."""
    params = {"hang_file": str(tmp_path / "hang"), "pid_file": str(tmp_path / "pids")}
    (tmp_path / "hang").touch()
    return {"name": "fault_hang", "label": label, "params": params}


def write_suite(path: Path, methods: list, launcher: dict) -> Path:
    path.write_text(yaml.safe_dump(micro_suite(plugins=[PLUGIN], methods=methods, densities=[0.5], timing=TIMING, launcher=launcher)))
    return path


def start_driver(suite: Path, out: Path, sigint: str = "default") -> subprocess.Popen:
    """`dstbench run` in a process of its own, its output in files beside the suite (local jobs
    inherit the driver's streams: a pipe would stay open while they run), SIGINT "default" or
    "ignored" in it (`start_with_sigint`)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "dstbench", "run", str(suite), "--out", str(out)]
    with open(suite.with_suffix(".out"), "w") as stdout, open(suite.with_suffix(".err"), "w") as stderr:
        return start_with_sigint(command, sigint, env=env, cwd=ROOT, stdout=stdout, stderr=stderr)


def stop_driver(driver: subprocess.Popen, signum: int, suite: Path) -> str:
    """Send `signum` to the driver, wait for it, and return what it printed to stderr."""
    driver.send_signal(signum)
    driver.wait(timeout=120)
    return suite.with_suffix(".err").read_text()


def run_suite_cancelling_the_hanging_job(suite: Path, tmp_path: Path) -> Path:
    """`run_suite` in this process while another thread cancels the hanging job from outside, as
    scancel would, once it has started."""

    def cancel_the_hanging_job() -> None:
        try:
            _, controller = wait_for_file(tmp_path / "pids", START_S, "the hanging job").split()
        except AssertionError:
            return  # the run's own assertions say what went wrong
        cancel_local_jobs([controller])

    canceller = threading.Thread(target=cancel_the_hanging_job, daemon=True)
    canceller.start()
    run_dir = run_suite(suite, out=tmp_path / "runs")
    canceller.join(timeout=5)
    return run_dir


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored in this process, as in one started from a background shell: the processes it
    starts (the local jobs' controllers) inherit that."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_failing_crashing_and_cancelled_jobs_each_get_their_status_and_one_line(tmp_path: Path) -> None:
    methods = ["fault_error", "fault_crash", hang_method(tmp_path)]
    suite = write_suite(tmp_path / "suite.yaml", methods, local(array_parallelism=3))

    run_dir = run_suite_cancelling_the_hanging_job(suite, tmp_path)
    lines = [json.loads(raw) for raw in (run_dir / RESULTS_FILE).read_text().splitlines()]
    statuses = {line["case_id"]: line["status"] for line in lines}
    assert len(lines) == 3 and statuses == {"fault_error@0.5": "error", "fault_crash@0.5": "crash", "hang@0.5": "cancelled"}
    by_case = {line["case_id"]: line for line in lines}
    assert "ValueError: injected failure" in by_case["fault_error@0.5"]["error"]  # failed inside the job: its own status
    assert "without a result" in by_case["fault_crash@0.5"]["error"].splitlines()[-1]
    assert "INTERRUPTED" in by_case["hang@0.5"]["error"]
    jobs = load_jobs(run_dir)
    assert {case: entry["job_id"] for case, entry in jobs.items()} == {c: line["env"]["job_id"] for c, line in by_case.items()}
    assert all(entry["cluster"] == "local" for entry in jobs.values())


@pytest.mark.slow
def test_a_job_whose_controller_ignores_sigint_is_still_cancelled(tmp_path: Path) -> None:
    # Started from a background shell, every local job's controller ignores SIGINT, submitit's own cancel.
    suite = write_suite(tmp_path / "suite.yaml", [hang_method(tmp_path)], local())
    with sigint_ignored():
        run_dir = run_suite_cancelling_the_hanging_job(suite, tmp_path)
    [line] = [json.loads(raw) for raw in (run_dir / RESULTS_FILE).read_text().splitlines()]
    assert line["status"] == "cancelled" and "INTERRUPTED" in line["error"]
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert survivors(pids, 10.0) == []  # the job's process and its controller


def test_a_process_tree_and_its_ignored_sigint_are_read_from_proc() -> None:
    # What cancel_local_jobs relies on: which processes ignore SIGINT, and the tree below a controller.
    script = (
        "import signal, subprocess, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "subprocess.run([sys.executable, '-c', 'import time; time.sleep(60)'])"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    children: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while not children and time.monotonic() < deadline:
            time.sleep(0.05)
            children = descendants(parent.pid)
        assert len(children) == 1
        assert ignores_sigint(parent.pid) and ignores_sigint(children[0])  # set in one, inherited by the other
        assert ignores_sigint(os.getpid()) == (signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
    finally:
        parent.kill()
        parent.wait()
        reap_all(children)


@pytest.mark.slow
def test_sighup_leaves_the_jobs_running_and_resume_reattaches_without_resubmitting(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "suite.yaml", ["dense", hang_method(tmp_path)], local(array_parallelism=2))
    out = tmp_path / "runs"
    driver = start_driver(suite, out)
    pids: list[int] = []
    try:
        pids = [int(p) for p in wait_for_file(tmp_path / "pids", START_S, "the hanging job").split()]
        err = stop_driver(driver, signal.SIGHUP, suite)  # the terminal went away: the jobs stay
        assert driver.returncode == 129, err
        [run_dir] = list(out.iterdir())
        submitted = {case: entry["job_id"] for case, entry in load_jobs(run_dir).items()}
        assert set(submitted) == {"dense@1", "hang@0.5"} and "re-attaches" in err
        assert all(alive(pid) for pid in pids)  # the hanging job's process and its controller
        (tmp_path / "hang").unlink()  # let it finish: only the re-attached driver sees it end
        run_suite(suite, out=out, resume=str(run_dir))
    finally:
        driver.kill()
        reap_all(pids)
    lines = [json.loads(raw) for raw in (run_dir / RESULTS_FILE).read_text().splitlines()]
    assert sorted(line["case_id"] for line in lines) == ["dense@1", "hang@0.5"]
    assert all(line["status"] == "ok" for line in lines), [line["error"] for line in lines]
    # Each line came from the job submitted first: nothing was submitted again.
    assert {line["case_id"]: line["env"]["job_id"] for line in lines} == submitted
    assert {case: entry["job_id"] for case, entry in load_jobs(run_dir).items()} == submitted
    assert str(pids[1]) == submitted["hang@0.5"]
    # The job's progress, which the driver forwards to its progress line.
    assert "segment 2 2" in (run_dir / "jobs" / f"{slug('dense@1', 'case')}.progress").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_cancels_the_submitted_jobs(tmp_path: Path, sigint: str) -> None:
    # "ignored": the driver started from a background shell; its jobs' controllers ignore SIGINT too.
    suite = write_suite(tmp_path / "suite.yaml", [hang_method(tmp_path)], local())
    out = tmp_path / "runs"
    driver = start_driver(suite, out, sigint)
    pids: list[int] = []
    try:
        pids = [int(p) for p in wait_for_file(tmp_path / "pids", START_S, "the hanging job").split()]
        assert ignores_sigint(pids[1]) == (sigint == "ignored")  # the controller
        err = stop_driver(driver, signal.SIGTERM, suite)
    finally:
        driver.kill()
        reap_all(pids)
    assert driver.returncode == 143, err
    assert survivors(pids, 10.0) == []  # the job's process and its controller
    [run_dir] = list(out.iterdir())
    assert list(iter_results(run_dir)) == []
    assert load_jobs(run_dir) == {}  # cancelled: --resume submits it again
    assert json.loads((run_dir / "run.json").read_text())["interruptions"][-1]["unfinished"] == ["hang@0.5"]


@pytest.mark.parametrize(
    "state, status",
    [("TIMEOUT", "timeout"), ("CANCELLED by 1042", "cancelled"), ("OUT_OF_MEMORY", "oom"), ("NODE_FAIL", "crash"),
     ("FAILED", "crash"), ("INTERRUPTED", "cancelled"), ("FINISHED", "crash"), (None, "crash")],
)
def test_a_job_that_ended_without_a_result_gets_its_status_from_the_cluster_state(state: str | None, status: str) -> None:
    assert status_for_state(state) == status


def test_the_time_limit_signal_ends_the_case_as_a_timeout_and_lets_a_requeue_exit() -> None:
    def submitit_timed_out(signum: int, frame: object) -> None:
        raise RuntimeError("Job not requeued because: timed-out and not checkpointable.")

    def submitit_requeued(signum: int, frame: object) -> None:
        raise SystemExit(-1)

    previous = signal.getsignal(signal.SIGUSR2)
    try:
        for handler, expected in ((submitit_timed_out, TimeLimit), (signal.SIG_DFL, TimeLimit), (submitit_requeued, SystemExit)):
            signal.signal(signal.SIGUSR2, time_limit_handler(handler))
            with pytest.raises(expected):
                os.kill(os.getpid(), signal.SIGUSR2)
                for _ in range(1000):  # the handler runs in this (the main) thread at its next check
                    time.sleep(0.001)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert issubclass(TimeLimit, BaseException) and not issubclass(TimeLimit, Exception)  # `except Exception` lets it by


def job_task(tmp_path: Path, methods: list, **launcher: object) -> tuple[CaseTask, dict]:
    suite = parse_suite(micro_suite(plugins=[PLUGIN], methods=methods, densities=[0.5], timing=TIMING, launcher=local(**launcher)))
    [case] = expand_cases(suite)
    return CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), str(tmp_path)), suite.launcher.model_dump(mode="json")


def test_a_job_near_its_time_limit_ends_its_case_as_a_timeout(tmp_path: Path) -> None:
    # In this process: run_job's own handler turns the time-limit signal into the case's status.
    task, launcher = job_task(tmp_path, [hang_method(tmp_path)])
    progress = tmp_path / "case.progress"

    def signal_once_hanging() -> None:
        wait_for_file(tmp_path / "pids", 120, "the hanging case")
        os.kill(os.getpid(), signal.SIGUSR2)

    sender = threading.Thread(target=signal_once_hanging, daemon=True)
    sender.start()
    line = run_job(task, launcher, str(progress))
    sender.join(timeout=5)
    assert line["status"] == "timeout" and "the job reached its time limit" in line["error"]
    assert progress.exists()  # the driver's sign that the case started
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL  # restored


def test_a_job_runs_a_case_with_ranks_under_torchrun_on_its_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dstbench.execution.launchers.torchrun.launcher import TorchrunLauncher

    seen = {}

    def fake_run(self: TorchrunLauncher, task: CaseTask, progress: object) -> CaseResult:
        seen.update(self.config.model_dump())
        return failed_result(task, "crash", "not started")

    monkeypatch.setattr(TorchrunLauncher, "run", fake_run)
    monkeypatch.setenv("DSTBENCH_LIFELINE_OWNER", "1")
    task, launcher = job_task(tmp_path, ["dense"], nproc_per_node=2, gpus_per_node=2)
    run_job(task, launcher, str(tmp_path / "case.progress"))
    assert (seen["name"], seen["nproc_per_node"], seen["nnodes"]) == ("torchrun", 2, 1)
    # The job is its own root: its agent must not end because the driver is gone (dstbench.execution.lifeline).
    assert "DSTBENCH_LIFELINE_OWNER" not in os.environ


def test_slurm_parameters_make_the_sbatch_file_the_suite_asks_for(tmp_path: Path) -> None:
    from submitit.slurm.slurm import _make_sbatch_string

    suite = parse_suite(micro_suite(launcher={
        "name": "submitit", "partition": "gpu", "account": "proj1", "constraint": "l40", "gpus_per_node": 4,
        "nproc_per_node": 4, "cpus_per_task": 16, "mem_gb": 64, "timeout_s": 7200, "array_parallelism": 8,
        "sbatch": {"exclusive": True, "mail-type": "END"}, "setup": ["module load cuda"],
    }))
    params = slurm_parameters(suite.launcher)
    text = _make_sbatch_string(command="python -m submitit.core._submit x", folder=tmp_path, map_count=21, **params)
    for line in ("--partition=gpu", "--account=proj1", "--constraint=l40", "--gpus-per-node=4", "--cpus-per-task=16",
                 "--mem=64GB", "--time=122", "--array=0-20%8", "--exclusive", "--mail-type=END", "--nodes=1", "--ntasks-per-node=1"):
        assert f"#SBATCH {line}" in text, line
    assert "module load cuda" in text and "--signal=USR2@90" in text


def test_submitit_keys_and_hosts_that_cannot_run_jobs_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SuiteError, match="partition: only for name: submitit"):
        parse_suite(micro_suite(launcher={"name": "subprocess", "partition": "gpu"}))
    with pytest.raises(SuiteError, match="nproc_per_node: 4 ranks need as many GPUs; gpus_per_node is 2"):
        parse_suite(micro_suite(launcher={"name": "submitit", "nproc_per_node": 4, "gpus_per_node": 2}))
    suite = tmp_path / "slurm.yaml"
    suite.write_text(yaml.safe_dump(micro_suite(launcher={"name": "submitit", "cluster": "slurm"})))
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(SuiteError, match="no sbatch and srun on PATH"):
        plan_run(suite, out=tmp_path / "runs")
    monkeypatch.setattr("dstbench.util.extras.missing", lambda *modules: list(modules))
    with pytest.raises(SuiteError, match=r"launcher submitit needs submitit, which is not installed: pip install 'dstbench\[cluster\]'"):
        plan_run(suite, out=tmp_path / "runs")


def test_a_submission_the_cluster_refuses_exits_2_with_its_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture) -> None:
    import submitit

    def refuse(self: object, submissions: list) -> list:
        raise RuntimeError("sbatch: error: invalid partition specified: nope")

    monkeypatch.setattr(submitit.LocalExecutor, "_internal_process_submissions", refuse)
    suite = write_suite(tmp_path / "suite.yaml", ["dense"], local())
    assert main(["run", str(suite), "--out", str(tmp_path / "runs")]) == 2
    assert "launcher: the jobs were not submitted: sbatch: error: invalid partition specified: nope" in capsys.readouterr().err


def test_resume_may_move_jobs_to_another_partition_but_not_change_what_they_measure() -> None:
    base = {"name": "submitit", "partition": "a", "gpus_per_node": 1}
    stored = parse_suite(micro_suite(launcher=base))
    assert resume_conflicts(stored, parse_suite(micro_suite(launcher={**base, "partition": "b", "timeout_min": 600}))) == []
    assert resume_conflicts(stored, parse_suite(micro_suite(launcher={**base, "gpus_per_node": 2}))) == ["launcher.gpus_per_node"]
