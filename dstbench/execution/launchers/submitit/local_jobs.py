"""Local submitit jobs as processes: whether one still runs, and cancelling it in a way that always
arrives.

A local job is a controller process (`python -m submitit.local._local`; its pid is the job id) that
starts the job's task and waits for it. submitit cancels one with SIGINT to the controller, which
then stops its task. A process started from a background shell ignores SIGINT, and so do the
controllers it starts (an ignored signal is inherited), so that cancel never arrives; SIGTERM does
not help, since the controller forwards it to the task and submitit's task ignores it. So a
controller that ignores SIGINT, or still runs after a grace period, is killed (SIGKILL), then its
descendants: the job ends killed by a signal, which submitit reports as INTERRUPTED (`cancelled`).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CANCEL_GRACE_S = 5.0  # how long a controller that heard SIGINT has to stop its task (submitit's takes ~1 s)


def local_job_running(job_id: str) -> bool:
    """Whether a local job's controller process (its id is the pid) still runs; a zombie or a
    reused pid does not count."""
    proc = Path(f"/proc/{job_id}")
    if not job_id.isdigit():
        return False
    if proc.parent.exists() and Path("/proc/self").exists():
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X") and b"submitit" in cmdline
    try:
        os.kill(int(job_id), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ignores_sigint(pid: int) -> bool:
    """Whether process `pid` ignores SIGINT (/proc's SigIgn mask; False where it cannot be read)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool((int(line.split()[1], 16) >> (signal.SIGINT - 1)) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (children, theirs, ...), read from /proc; none where there is none."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_ended(job_ids: list[str], within_s: float) -> list[str]:
    """The jobs of `job_ids` still running after waiting up to `within_s` for them to end."""
    deadline = time.monotonic() + within_s
    left = [j for j in job_ids if local_job_running(j)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [j for j in left if local_job_running(j)]
    return left


def cancel_local_jobs(job_ids: list[str], grace_s: float = CANCEL_GRACE_S, wait_s: float = 10.0) -> list[str]:
    """Cancel local jobs: SIGINT first (submitit's own cancel), SIGKILL to a controller that ignores
    it or outlives `grace_s`, then to its descendants. Returns the jobs still running after `wait_s`
    more (none, unless a process cannot be signalled)."""
    running = [j for j in job_ids if local_job_running(j)]
    heard = [j for j in running if not ignores_sigint(int(j))]
    for job_id in heard:
        _send(int(job_id), signal.SIGINT)
    left = _wait_ended(heard, grace_s) + [j for j in running if j not in heard]
    for job_id in left:
        if not local_job_running(job_id):
            continue
        # The tree is read before the controller dies (its children are then re-parented), and the
        # controller dies first: a task killed first would let it exit 0, read as a crash.
        below = descendants(int(job_id))
        _send(int(job_id), signal.SIGKILL)
        for pid in below:
            _send(pid, signal.SIGKILL)
    return _wait_ended(left, wait_s)
