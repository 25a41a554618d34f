"""Run a case under `torchrun`: one process per rank, `torch.distributed` (NCCL on CUDA, gloo on CPU).

Each rank runs the ordinary case (`dstbench.execution.launchers.torchrun.worker`) with its model wrapped in
DistributedDataParallel and its own shard of the data, and writes its result to a rank file
(`RUN_DIR/ranks/<case>/rank<r>.json`); when every rank succeeded, rank 0 also writes all of them,
gathered over the process group, to `gathered.json`, which is how node 0 of a multi-node job
sees the other nodes' ranks. This launcher merges them into the case's line (`merge_ranks`).

A rank that fails writes its error and exits at once, so torchrun stops its peers (which may be
waiting for it in a collective); the case then takes the status and traceback of the rank that
failed first. Ranks that died without a word (a signal, a failed start) make the case `crash`,
with the tail of torchrun's log.

Multi-node: every node runs the same `dstbench run`; `DSTBENCH_NODE_RANK`, `DSTBENCH_MASTER_ADDR`
and `DSTBENCH_MASTER_PORT` override the suite's `node_rank`, `master_addr` and `master_port`, so
one suite file serves every node (under Slurm: from `SLURM_NODEID` and the first host of the job).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dstbench.suite.cases import Case
from dstbench.execution.launchers.base import Launcher, register_launcher
from dstbench.execution.launchers.progress_file import ProgressFile
from dstbench.execution.launchers.torchrun.config import TorchrunConfig
from dstbench.results.record import CaseResult, line_type
from dstbench.util.files import slug
from dstbench.execution.case_setup import CaseTask, Progress, failed_result
from dstbench.results.merge import merge_ranks

GATHERED = "gathered.json"


def rank_file(workdir: Path, rank: int) -> Path:
    return workdir / f"rank{rank}.json"


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def first_failure(results: list[CaseResult], world_size: int) -> CaseResult:
    """The failed rank whose failure came first: the cause (its peers then fail in collectives)."""
    failed = sorted((r for r in results if r.status != "ok"), key=lambda r: r.env.get("finished_at", float("inf")))
    worst = dataclasses.replace(failed[0])
    others = [f"rank {r.env.get('rank', '?')}: {r.status}" for r in failed[1:]]
    also = f"\n(then {', '.join(others)})" if others else ""
    worst.error = f"rank {worst.env.get('rank', '?')} of {world_size} failed:\n{worst.error}{also}"
    worst.world_size = world_size
    return worst


@register_launcher("torchrun")
class TorchrunLauncher(Launcher):
    """Each case whole under torchrun: it neither interleaves nor places groups."""

    def __init__(self, config: TorchrunConfig) -> None:
        self.config = config

    @property
    def node_rank(self) -> int:
        return int(os.environ.get("DSTBENCH_NODE_RANK", self.config.node_rank))

    @property
    def world_size(self) -> int:
        return self.config.nproc_per_node * self.config.nnodes

    def command(self, task_file: Path, workdir: Path) -> list[str]:
        c = self.config
        if c.nnodes == 1:
            rendezvous = ["--standalone"]  # a free port on this host: no clash between concurrent runs
        else:
            addr = os.environ.get("DSTBENCH_MASTER_ADDR", c.master_addr)
            port = os.environ.get("DSTBENCH_MASTER_PORT", str(c.master_port))
            rendezvous = [
                f"--nnodes={c.nnodes}", f"--node_rank={self.node_rank}", f"--master_addr={addr}", f"--master_port={port}",
            ]
        # The agent runs bound to this process (dstbench.execution.lifeline), its ranks bound to the agent: a
        # killed run takes torchrun and every rank with it, though they run in their own session.
        return [
            sys.executable, "-m", "dstbench.execution.lifeline", "torch.distributed.run", *rendezvous,
            f"--nproc_per_node={c.nproc_per_node}",
            "-m", "dstbench.execution.launchers.torchrun.worker", str(task_file), str(workdir),
        ]

    def run(self, task: CaseTask, progress: Progress) -> CaseResult:
        workdir = Path(task.run_dir) / "ranks" / slug(Case.from_dict(task.case).key, "case")
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        task_file = workdir / "task.json"
        task_file.write_text(json.dumps(dataclasses.asdict(task)))
        log_path = workdir / "torchrun.log"
        with open(log_path, "w") as log:
            # The workers import what this process imports (suite plugins included).
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            process = subprocess.Popen(
                self.command(task_file, workdir), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )
            outcome = self._wait(process, workdir, progress)
        if outcome == "timeout":
            result = failed_result(task, "timeout", f"case exceeded its timeout of {self.config.timeout_s:g} s")
            result.world_size = self.world_size
            return result
        return self.collect(task, workdir, process.returncode)

    def collect(self, task: CaseTask, workdir: Path, returncode: int | None) -> CaseResult:
        """The case's result from what the ranks left in `workdir`."""
        gathered = workdir / GATHERED
        if gathered.exists():  # every rank of the job succeeded (rank 0 lives on this node)
            results = [line_type().from_dict(d) for d in json.loads(gathered.read_text())]
            return merge_ranks(results, self.world_size)
        n = self.config.nproc_per_node
        local = range(self.node_rank * n, (self.node_rank + 1) * n)
        files = [rank_file(workdir, r) for r in local]
        results = [line_type().from_dict(json.loads(f.read_text())) for f in files if f.exists()]
        if any(r.status != "ok" for r in results):
            return first_failure(results, self.world_size)
        if len(results) == n and returncode == 0 and self.node_rank > 0:
            # A node other than node 0: rank 0 gathered the job's result there; here, the local ranks.
            return merge_ranks(results, self.world_size)
        tail = (workdir / "torchrun.log").read_text(errors="replace")[-4000:]
        result = failed_result(task, "crash", f"torchrun exited with code {returncode} before every rank reported:\n{tail}")
        result.world_size = self.world_size
        return result

    def _wait(self, process: subprocess.Popen, workdir: Path, progress: Progress) -> str:
        deadline = time.monotonic() + self.config.timeout_s
        progress_file = ProgressFile(workdir / "progress")
        try:
            while process.poll() is None:
                if time.monotonic() > deadline:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    return "timeout"
                progress_file.forward(progress)
                time.sleep(0.2)
            progress_file.forward(progress)
        except BaseException:
            # Ctrl-C (or anything else): never leave torchrun or its ranks behind.
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            raise
        return "exited"
