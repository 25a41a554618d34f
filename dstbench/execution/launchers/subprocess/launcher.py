"""Run each case in its own fresh process, with a timeout.

On Linux the processes come from a fork server that has imported torch and timm once, so a case
starts in well under a second instead of paying the ~5 s import; each case still gets a new process
(fresh allocator, fresh CUDA context, its own peak RSS). Elsewhere the start method is `spawn`.

The case process serves its parent over a pipe (`case_process_main`): it builds and warms up, says
"ready", then times one segment per "segment" command and, on "finish", sends its result and exits.
The parent (`SubprocessCase`) gives each case `timeout_s` of its own active time: the commands it
is running, not the time it waits while the other cases of its group run.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from dstbench.execution.lifeline import bind_to_parent
from dstbench.execution.case_setup import CaseTask, Progress, failed_result
from dstbench.execution.launchers.base import Launcher, register_launcher
from dstbench.execution.launchers.oom_kills import oom_kill_count, oom_kill_evidence
from dstbench.execution.launchers.subprocess.config import SubprocessConfig
from dstbench.execution.launchers.subprocess.main_module import main_module_withheld
from dstbench.execution.launchers.subprocess.placement import Placement
from dstbench.results.record import CaseResult, line_type
from dstbench.execution.rounds import run_alone
from dstbench.execution.case_session import CaseSession, SegmentTag, failure

_PRELOAD = ["dstbench.execution.launchers.subprocess.forkserver_preload", "dstbench.execution.case_session"]


def _context() -> Any:
    if sys.platform == "linux":
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        return ctx
    return mp.get_context("spawn")


def case_process_main(conn: Connection, task: CaseTask, placement: Placement | None = None) -> None:
    """The case process: one `CaseSession`, driven by the parent's commands over `conn`; pinned to
    `placement` (its GPU, its cores) when several cases run at once."""
    bind_to_parent()  # first: a case process never outlives the run (dstbench.execution.lifeline)
    # Ctrl-C to the process group is the parent's to handle: it ends this process (no traceback here).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if placement is not None:
        placement.apply()  # before anything starts CUDA or sizes a thread pool
    import torch

    def progress(stage: str, done: int, total: int) -> None:
        conn.send(("progress", (stage, done, total)))

    try:
        session = CaseSession(task, progress)
        torch.set_num_threads(session.threads)
        conn.send(("ready", session.open()))
        while True:
            try:
                command, payload = conn.recv()
            except EOFError:
                return  # the parent is gone
            if command == "segment":
                conn.send(("segment", session.segment(SegmentTag(**payload))))
            elif command == "finish":
                conn.send(("result", session.finish().to_dict()))
                return
    except Exception as exc:
        conn.send(("failed", failure(task, exc).to_dict()))
    finally:
        conn.close()


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code} before reporting a result"


class SubprocessCase:
    """A `dstbench.execution.launchers.base.CaseProcess` in a process of its own."""

    def __init__(self, ctx: Any, task: CaseTask, progress: Progress, timeout_s: float, placement: Placement | None = None) -> None:
        self.ctx, self.task, self.progress, self.timeout_s = ctx, task, progress, timeout_s
        self.placement = placement
        self.pid: int | None = None
        self.oom_kills_before: int | None = None
        self.ready: dict[str, Any] | None = None
        self.failed: CaseResult | None = None
        self.active_s = 0.0  # time spent in this case's own commands, what its timeout counts
        self.process: Any = None
        self.conn: Connection | None = None

    def _fail(self, status: str, error: str) -> None:
        self.failed = failed_result(self.task, status, error)
        self.close()

    def _await(self, expected: str) -> Any:
        """The reply `expected` to the command just sent; None (and `failed` set) if the case failed."""
        assert self.conn is not None
        started = time.monotonic()
        deadline = started + self.timeout_s - self.active_s
        try:
            while True:
                # Checked on every pass: a case that keeps reporting progress must time out too.
                if time.monotonic() > deadline:
                    self._fail("timeout", f"case exceeded its timeout of {self.timeout_s:g} s")
                    return None
                if self.conn.poll(0.2):
                    try:
                        kind, payload = self.conn.recv()
                    except EOFError:
                        break
                    if kind == "progress":
                        self.progress(*payload)
                    elif kind == "failed":
                        self.process.join(timeout=60)
                        self.failed = line_type().from_dict(payload)
                        self.close()
                        return None
                    elif kind == expected:
                        return payload
        finally:
            self.active_s += time.monotonic() - started
        self.process.join(timeout=60)
        self._died()
        return None

    def _died(self) -> None:
        """The process ended without a reply: an OOM kill where the kernel says so, else a crash."""
        evidence = oom_kill_evidence(self.process.exitcode, self.oom_kills_before)
        if evidence is not None:
            self._fail("oom", f"case process {evidence}")
        else:
            self._fail("crash", f"case process {_describe_exit(self.process.exitcode)}")

    def _send(self, command: str, payload: Any = None) -> bool:
        try:
            self.conn.send((command, payload))  # type: ignore[union-attr]
            return True
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.process.join(timeout=60)
            self._died()
            return False

    def start(self) -> None:
        self.oom_kills_before = oom_kill_count()
        self.conn, child = self.ctx.Pipe(duplex=True)
        self.process = self.ctx.Process(
            target=case_process_main, args=(child, self.task, self.placement), name=f"dstbench-case-{self.task.case['method']}"
        )
        try:
            with main_module_withheld():  # the caller's script never runs again in a case process
                self.process.start()
        except OSError as exc:  # no process (too many open files, a broken fork server): this case fails, the run goes on
            self._fail("crash", f"could not start the case process: {exc}")
            return
        finally:
            child.close()  # only the child holds this end: EOF on `conn` then means the child is gone
        self.pid = self.process.pid
        self.ready = self._await("ready")

    def segment(self, tag: SegmentTag) -> dict[str, Any] | None:
        if self.failed is not None or not self._send("segment", dataclasses.asdict(tag)):
            return None
        return self._await("segment")

    def finish(self) -> CaseResult:
        if self.failed is None and self._send("finish"):
            payload = self._await("result")
            if payload is not None:
                self.process.join(timeout=60)
                return line_type().from_dict(payload)
        assert self.failed is not None
        return self.failed

    def close(self) -> None:
        """End the process if it still runs (a failure, Ctrl-C, or the scheduler's clean-up)."""
        if self.process is not None and self.process.pid is not None and self.process.is_alive():
            self.process.kill()
            self.process.join()
        if self.conn is not None:
            self.conn.close()


@register_launcher("subprocess")
class SubprocessLauncher(Launcher):
    interleaves = True

    def __init__(self, timeout_s: float = 3600.0) -> None:
        self.timeout_s = timeout_s

    @classmethod
    def from_config(cls, config: SubprocessConfig) -> "SubprocessLauncher":
        return cls(timeout_s=config.timeout_s)

    def open(self, task: CaseTask, progress: Progress) -> SubprocessCase:
        return SubprocessCase(_context(), task, progress, self.timeout_s)

    def run(self, task: CaseTask, progress: Progress) -> CaseResult:
        return run_alone(self, task, progress)

