"""The environment record stored with every result: hardware, clocks, versions, commit."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from dstbench.trackers import nvml


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def git_state() -> dict[str, Any]:
    """Commit and dirty flag of the checkout dstbench runs from (None outside a git checkout)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return {"commit": None, "dirty": None}
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:
        return None


def host_env() -> dict[str, Any]:
    """What the machine and the software are, without touching an accelerator: safe in a launcher's
    parent process, where initialising CUDA would hold GPU memory during every case."""
    return {
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "timm": _version("timm"),
        "dstbench": _version("dstbench"),
        "cpu_model": _cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        # OpenMP's waiting policy and thread count change CPU step times severalfold on shared cores.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cuda": torch.version.cuda,
        "driver": None,
        **git_state(),
    }


def static_env(device: torch.device) -> dict[str, Any]:
    """What does not change during a case: `host_env` plus the device's own record."""
    env: dict[str, Any] = {
        "device_type": device.type,
        "device_name": platform.machine(),
        **host_env(),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
    }
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        env.update(
            device_name=props.name,
            device_memory_bytes=props.total_memory,
            compute_capability=f"{props.major}.{props.minor}",
            driver=nvml.driver_version(),
            # Where NVML finds this GPU; a launcher's parent reads its clocks there without CUDA.
            nvml_index=nvml.index_of(device),
        )
    elif device.type == "cpu":
        env["device_name"] = env["cpu_model"]
    elif device.type == "mps":
        env["device_name"] = "Apple MPS"
    return env


def gpu_snapshot(device: torch.device) -> dict[str, Any] | None:
    """Clocks, temperature, power limit and throttle reasons now (None without a GPU or NVML)."""
    if device.type != "cuda":
        return None
    return nvml.snapshot(nvml.index_of(device))
