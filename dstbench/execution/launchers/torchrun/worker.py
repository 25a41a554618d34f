"""One rank of a distributed case, started by `torchrun` (see `dstbench.execution.launchers.torchrun.launcher`).

    python -m torch.distributed.run ... -m dstbench.execution.launchers.torchrun.worker TASK_JSON WORKDIR

The rank joins the process group (NCCL on its own GPU, `cuda:LOCAL_RANK`, when the suite runs on
CUDA; gloo on the CPU otherwise), runs the ordinary case and writes `rank<r>.json`. On success rank
0 gathers every rank's result into `gathered.json`; on failure the rank exits at once with code 1,
so torchrun stops the peers that may be waiting for it in a collective.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from dstbench.execution.launchers.progress_file import ProgressFile
from dstbench.execution.launchers.torchrun.launcher import GATHERED, rank_file, write_json_atomic
from dstbench.execution.lifeline import bind_to_parent
from dstbench.execution.case_setup import CaseTask
from dstbench.execution.case_session import execute_case


def main(task_file: str, workdir: str) -> int:
    bind_to_parent()  # a rank never outlives its torchrun agent (dstbench.execution.lifeline)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    task = CaseTask(**json.loads(Path(task_file).read_text()))
    use_cuda = task.suite["device"] in ("cuda", "auto") and torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local_rank)  # before NCCL starts: each rank on its own GPU
    dist.init_process_group("nccl" if use_cuda else "gloo")
    out = Path(workdir)
    progress_file = ProgressFile(out / "progress")

    def progress(stage: str, done: int, total: int) -> None:
        if rank == 0:  # the ranks move in step; one voice is enough
            progress_file.write(stage, done, total)

    result = execute_case(task, progress)
    # When it ended tells the launcher which failure came first (the cause, not its echoes).
    result.env.update(rank=rank, local_rank=local_rank, finished_at=time.time())
    write_json_atomic(rank_file(out, rank), result.to_dict())
    if result.status != "ok":
        # Peers may wait in a collective for this rank forever: exit hard so torchrun stops them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    everyone = [None] * dist.get_world_size() if rank == 0 else None
    # Rank 0 is on node 0, where the case's line is written: it collects the other nodes' ranks.
    dist.gather_object(result.to_dict(), everyone, dst=0)
    if rank == 0:
        write_json_atomic(out / GATHERED, everyone)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
