"""Where each of `launcher.parallel` cases at once runs: its own GPU, its own share of the cores.

Slot k of N gets the k-th GPU this process sees (CUDA) and the k-th of N equal, disjoint shares of
the cores in this process's affinity mask (always: N case processes that each default to every core
would run N OpenMP teams on the same cores). The case process applies its placement first thing
(`Placement.apply`, before CUDA starts), so its default `threads` follows the share
(`dstbench.util.threads`). The line records it: `env.cpu_affinity`, `env.cuda_visible_devices`,
`env.parallel` (and, from the case itself, `env.gpu_uuid`). The plan is made in the driver, which
never initialises CUDA (`torch.cuda.device_count` does not).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from dstbench.util.threads import affinity_cores

CPU_SIDE_BY_SIDE = (
    "timed side by side with {others} other case(s) on other cores of this CPU (launcher.parallel: {slots}), "
    "which share its memory bandwidth and caches: times are not comparable with a quiet run; byte counts, "
    "FLOPs and accuracy are unaffected"
)


@dataclasses.dataclass(frozen=True)
class Placement:
    """One slot of a parallel run: the cores and the GPU (`CUDA_VISIBLE_DEVICES` entry) its cases use."""

    slot: int
    slots: int
    cores: tuple[int, ...]
    cuda_device: str | None = None  # None: not on CUDA (the case sees what the driver sees)

    def apply(self) -> None:
        """Pin this process (a fresh case process, before CUDA is initialised)."""
        if self.cuda_device is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = self.cuda_device
        if self.cores and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, self.cores)

    def env(self) -> dict[str, Any]:
        """What a result line's `env` records about the placement."""
        return {
            "cpu_affinity": list(self.cores),
            "cuda_visible_devices": self.cuda_device,
            "parallel": {"slot": self.slot, "slots": self.slots},
        }


def resolve_device_type(device: str) -> str:
    """The device type a suite's `device` means on this host (`auto` as `dstbench.execution.case_setup` resolves it
    in a case process), without initialising CUDA here."""
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as `CUDA_VISIBLE_DEVICES` entries a child can be given (the
    driver's own list when it has one: indices or UUIDs)."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = [e.strip() for e in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if e.strip()]
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return listed[:count]
    return [str(i) for i in range(count)]


def plan_slots(
    slots: int, device_type: str, cores: list[int], gpus: list[str], threads: int | None = None
) -> tuple[list[Placement], list[str]]:
    """The placements of `slots` cases at once, or the problems that forbid it (each a sentence
    starting with the key to change)."""
    problems = []
    if device_type == "mps":
        problems.append("launcher.parallel: mps is one device; cases cannot run side by side on their own devices")
    if device_type == "cuda" and slots > len(gpus):
        problems.append(f"launcher.parallel: {slots} cases at once need {slots} GPUs, one each; this process sees {len(gpus)}")
    if slots > len(cores):
        problems.append(f"launcher.parallel: {slots} cases at once need a core each; this process may run on {len(cores)}")
    share = len(cores) // slots if slots <= len(cores) else 0
    if share and threads is not None and threads > share:
        problems.append(
            f"threads: {threads} threads per case would oversubscribe each case's share of {share} core(s) "
            f"({len(cores)} cores / parallel {slots}); leave threads unset to follow the share"
        )
    if problems:
        return [], problems
    placements = [
        Placement(k, slots, tuple(cores[k * share:(k + 1) * share]), gpus[k] if device_type == "cuda" else None)
        for k in range(slots)
    ]
    return placements, []


def placements_for(suite: Any) -> tuple[list[Placement], list[str], str]:
    """`plan_slots` for a validated suite on this host, and the device type it resolved. Interleaved
    speed groups side by side on the CPU are refused here when `device: auto` turned out to be it
    (a suite that says `cpu` was refused at validation, `dstbench.suite.schema`)."""
    from dstbench.execution.launchers.subprocess.config import PARALLEL_CPU_INTERLEAVED

    device_type = resolve_device_type(suite.device)
    gpus = visible_gpus() if device_type == "cuda" else []
    placements, problems = plan_slots(suite.launcher.parallel, device_type, affinity_cores(), gpus, suite.threads)
    if device_type == "cpu" and suite.mode in ("speed", "both") and suite.timing.interleave:
        problems.insert(0, PARALLEL_CPU_INTERLEAVED + " (device auto is the CPU here)")
    return placements, problems, device_type
