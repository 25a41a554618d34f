"""Whether the kernel's OOM killer ended a case process: a SIGKILL alone cannot tell an OOM kill
from `kill -9`, but the kernel counts its OOM kills (`oom_kill` in /proc/vmstat, Linux 4.13+)."""

from __future__ import annotations

import signal
from pathlib import Path

VMSTAT = Path("/proc/vmstat")


def oom_kill_count() -> int | None:
    """The kernel's count of OOM kills since boot; None where it is not kept (not Linux)."""
    try:
        for line in VMSTAT.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def oom_kill_evidence(exitcode: int | None, before: int | None) -> str | None:
    """Why a process that exited with `exitcode` was (most likely) OOM-killed: it died of SIGKILL
    and the kernel's OOM-kill count rose while it ran; None otherwise."""
    if exitcode != -signal.SIGKILL or before is None:
        return None
    after = oom_kill_count()
    if after is None or after <= before:
        return None
    return f"killed by SIGKILL while the kernel's OOM killer acted ({VMSTAT} oom_kill {before} -> {after})"
