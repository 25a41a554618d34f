"""How many intra-op threads a case process trains with (the suite's `threads:`).

torch's CPU kernels run on an OpenMP team of `torch.get_num_threads()` threads that meet at a
barrier after every parallel op. When another process takes one of the team's cores, every op
waits for the thread stuck there, so a step slows by far more than the core's share
(docs/concepts/measurement.md). The default is therefore the cores this process may run on (its affinity mask,
which `taskset` or a cgroup cpuset narrows), not every core of the machine.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch


def affinity_cores() -> list[int]:
    """The CPU cores this process may run on (every core where the OS has no affinity call)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def resolve_threads(requested: int | None) -> int:
    """The suite's `threads`, or the number of cores in the affinity mask."""
    return int(requested) if requested else len(affinity_cores())


@contextlib.contextmanager
def use_threads(count: int) -> Iterator[None]:
    """Train with `count` intra-op threads inside the block, then restore the previous count: cases
    that share one process (the in-process launcher) leave the caller's setting as they found it."""
    before = torch.get_num_threads()
    if count != before:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
