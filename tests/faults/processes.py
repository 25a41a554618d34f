"""Helpers of the fault tests that watch processes without psutil: /proc where there is one."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any


def alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie (dead, not yet reaped by whoever adopted it) counts as gone."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.exists() and Path("/proc/self/stat").exists():
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def survivors(pids: list[int], within_s: float = 10.0) -> list[int]:
    """The processes of `pids` still running after waiting up to `within_s` for them to end."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [pid for pid in pids if alive(pid)]
        if not left:
            return []
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def wait_for_file(path: Path, within_s: float, what: str) -> str:
    """The text of `path` once it exists; AssertionError naming `what` after `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {within_s:g} s")


def reap_all(pids: list[int]) -> None:
    """Kill whatever a failed test left running (only the processes it started)."""
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass



def start_with_sigint(command: list[str], sigint: str = "default", **popen: Any) -> subprocess.Popen:
    """`command` started with SIGINT "default", as a terminal's foreground command has it (a test's
    SIGINT is then Ctrl-C), or "ignored", as a background shell leaves it; whichever way this test
    process was started, since the processes it starts would inherit its own."""
    disposition = {"default": signal.SIG_DFL, "ignored": signal.SIG_IGN}[sigint]
    return subprocess.Popen(command, preexec_fn=lambda: signal.signal(signal.SIGINT, disposition), **popen)
