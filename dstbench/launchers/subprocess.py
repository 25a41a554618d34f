"""Run each case in its own fresh process, with a timeout.

On Linux the processes come from a fork server that has imported torch and timm once, so a case
starts in well under a second instead of paying the ~5 s import; each case still gets a new process
(fresh allocator, fresh CUDA context, its own peak RSS). Elsewhere the start method is `spawn`.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from dstbench.lifeline import bind_to_parent
from dstbench.results import CaseResult
from dstbench.build import CaseTask, Progress, failed_result
from dstbench.runner import execute_case

_PRELOAD = ["dstbench.launchers.forkserver_preload", "dstbench.runner"]


def _context() -> Any:
    if sys.platform == "linux":
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        return ctx
    return mp.get_context("spawn")


def _child(conn: Connection, task: CaseTask) -> None:
    bind_to_parent()  # a case process never outlives the run (dstbench.lifeline)

    def progress(stage: str, done: int, total: int) -> None:
        conn.send(("progress", (stage, done, total)))

    result = execute_case(task, progress)
    conn.send(("result", result.to_dict()))
    conn.close()


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code} before reporting a result"


class SubprocessLauncher:
    def __init__(self, timeout_s: float = 3600.0) -> None:
        self.timeout_s = timeout_s

    def run(self, task: CaseTask, progress: Progress) -> CaseResult:
        ctx = _context()
        receiver, sender = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_child, args=(sender, task), name=f"dstbench-case-{task.case['method']}")
        deadline = time.monotonic() + self.timeout_s
        try:
            process.start()
            sender.close()  # only the child writes; EOF on `receiver` then means the child is gone
            while True:
                # Checked on every pass: a case that keeps reporting progress must time out too.
                if time.monotonic() > deadline:
                    process.kill()
                    process.join()
                    return failed_result(task, "timeout", f"case exceeded its timeout of {self.timeout_s:g} s")
                if receiver.poll(0.2):
                    try:
                        kind, payload = receiver.recv()
                    except EOFError:
                        break
                    if kind == "progress":
                        progress(*payload)
                    elif kind == "result":
                        process.join(timeout=60)
                        return CaseResult.from_dict(payload)
        except BaseException:
            # Ctrl-C (or anything else) may arrive at any point, even while the process starts:
            # never leave a case process behind.
            if process.pid is not None and process.is_alive():
                process.kill()
                process.join()
            raise
        finally:
            receiver.close()
        process.join(timeout=60)
        return failed_result(task, "crash", f"case process {_describe_exit(process.exitcode)}")
