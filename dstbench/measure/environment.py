"""The environment record stored with every result: hardware, clocks, versions, commit, the
settings that change numerics (TF32, matmul precision, cuDNN autotuning) and memory behaviour (the
allocator configuration), and the versions of method plugins. `torch.utils.collect_env`'s full
report is written once per run folder (`start_collect_env`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from dstbench.measure import nvml

# The dstbench source tree: the folder holding the `dstbench` package (a checkout, or an editable
# install's source; this module is dstbench/measure/environment.py). Its git state is recorded
# only when it is itself the top of a git work tree.
SOURCE_ROOT = Path(__file__).resolve().parents[2]
# What `git_state` says of where its commit came from (run.json's `source`).
GIT_CHECKOUT, NOT_A_CHECKOUT, FROM_ENVIRONMENT = "git checkout", "not a git checkout", "DSTBENCH_GIT_* variables"
# Set these where there is no checkout to ask (docker/Dockerfile sets them from build arguments);
# DSTBENCH_GIT_COMMIT wins over git. DSTBENCH_GIT_DIRTY: "1"/"true" or "0"/"false".
GIT_ENV = {
    "commit": "DSTBENCH_GIT_COMMIT", "branch": "DSTBENCH_GIT_BRANCH",
    "commit_time": "DSTBENCH_GIT_COMMIT_TIME", "dirty": "DSTBENCH_GIT_DIRTY",
}
ALLOCATOR_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
COLLECT_ENV_FILE = "collect_env.txt"
COLLECT_ENV_SWITCH = "DSTBENCH_COLLECT_ENV"  # "0": write no collect_env.txt (the test suite's runs)


def cpu_model() -> str:
    """The CPU model name (/proc/cpuinfo's "model name", else what platform says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(SOURCE_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _flag(text: str | None) -> bool | None:
    if text is None or text.strip() == "":
        return None
    return text.strip().lower() in ("1", "true", "yes")


@functools.lru_cache(maxsize=1)
def git_state() -> dict[str, Any]:
    """Commit, branch, commit time and dirty flag of the dstbench source (None where unknown), and
    `source`: where they came from ("git checkout", "DSTBENCH_GIT_* variables", or "not a git
    checkout").

    From the DSTBENCH_GIT_* variables when DSTBENCH_GIT_COMMIT is set; else from git, but only
    when the top of the enclosing work tree is the dstbench source itself: dstbench installed
    into a virtual environment inside another project's repository would otherwise record that
    project's commit."""
    if os.environ.get(GIT_ENV["commit"]):
        return {
            "commit": os.environ[GIT_ENV["commit"]], "branch": os.environ.get(GIT_ENV["branch"]) or None,
            "commit_time": os.environ.get(GIT_ENV["commit_time"]) or None, "dirty": _flag(os.environ.get(GIT_ENV["dirty"])),
            "source": FROM_ENVIRONMENT,
        }
    unknown: dict[str, Any] = {"commit": None, "branch": None, "commit_time": None, "dirty": None, "source": NOT_A_CHECKOUT}
    top = _git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != SOURCE_ROOT:
        return unknown
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return unknown
    branch = _git("rev-parse", "--abbrev-ref", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit,
        "branch": branch if branch and branch != "HEAD" else None,  # None when detached
        "commit_time": _git("show", "-s", "--format=%cI", "HEAD"),
        "dirty": None if status is None else bool(status),
        "source": GIT_CHECKOUT,
    }


def ram_bytes() -> int | None:
    """The machine's physical memory."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def distribution_version(module: str) -> str | None:
    """The version of the installed distribution that provides `module` (None: not from one)."""
    top = module.split(".")[0]
    for name in importlib.metadata.packages_distributions().get(top, []):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def plugin_versions(modules: list[str]) -> dict[str, str | None]:
    """Version of each method plugin: the suite's `plugins:` modules and the modules that
    entry points of the `dstbench.methods` group name, by distribution (None: not installed as one)."""
    from dstbench.methods import ENTRY_POINT_GROUP

    versions: dict[str, str | None] = {module: distribution_version(module) for module in modules}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(entry_point, "dist", None)
        versions[entry_point.module] = dist.version if dist is not None else distribution_version(entry_point.module)
    return versions


def cudnn_version() -> str | None:
    """cuDNN as 'major.minor.patch' (torch reports an integer: 8902 for 8.9.2, 90100 for 9.1.0)."""
    if not torch.backends.cudnn.is_available():
        return None
    number = torch.backends.cudnn.version()
    if number is None:
        return None
    if number >= 10000:
        major, rest = divmod(number, 10000)
    else:
        major, rest = divmod(number, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def numerics() -> dict[str, Any]:
    """Settings that change what a matmul or convolution computes and how fast."""
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }


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
        "cpu_model": cpu_model(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        # OpenMP's waiting policy and thread count change CPU step times severalfold on shared cores.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        "ram_bytes": ram_bytes(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cuda": None,
        "driver": None,
        # The caching allocator's settings change peaks and fragmentation (unset: torch's defaults).
        **{name: os.environ.get(name) for name in ALLOCATOR_ENV},
        **git_state(),
    }


def static_env(device: torch.device) -> dict[str, Any]:
    """What does not change during a case: `host_env` plus the device's own record."""
    env: dict[str, Any] = {
        "device_type": device.type,
        "device_name": platform.machine(),
        **host_env(),
        "cudnn": None,
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        **numerics(),
    }
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        env.update(
            # The CUDA and cuDNN torch was built with: recorded where they ran, on CUDA devices only.
            cuda=torch.version.cuda,
            cudnn=cudnn_version(),
            device_name=props.name,
            device_memory_bytes=props.total_memory,
            compute_capability=f"{props.major}.{props.minor}",
            driver=nvml.driver_version(),
            # Where NVML finds this GPU; a launcher's parent reads its clocks there without CUDA.
            nvml_index=nvml.index_of(device),
            # Which physical card: cases timed side by side (launcher.parallel) each have their own.
            gpu_uuid=nvml.gpu_uuid(index),
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


def start_collect_env(run_dir: str | Path) -> subprocess.Popen | None:
    """Write `torch.utils.collect_env`'s report to RUN_DIR/collect_env.txt from a separate process
    at the lowest CPU priority: it takes seconds (it runs pip, lscpu, nvidia-smi...), and at nice
    19 it barely competes with the cases measured meanwhile. None when the file exists already (a
    resumed run), when DSTBENCH_COLLECT_ENV=0, or when the process cannot start. Finish with
    `finish_collect_env`."""
    path = Path(run_dir) / COLLECT_ENV_FILE
    if path.exists() or os.environ.get(COLLECT_ENV_SWITCH, "1").strip() == "0":
        return None
    code = (
        "import os, sys\n"
        "from torch.utils.collect_env import get_pretty_env_info\n"
        "text = get_pretty_env_info()\n"
        "tmp = sys.argv[1] + '.tmp'\n"
        "open(tmp, 'w', encoding='utf-8').write(text + '\\n')\n"
        "os.replace(tmp, sys.argv[1])\n"
    )
    nice = (lambda: os.nice(19)) if hasattr(os, "nice") else None
    try:
        return subprocess.Popen(
            [sys.executable, "-c", code, str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL, preexec_fn=nice,  # noqa: PLW1509 - only os.nice, before exec
        )
    except OSError:
        return None


def finish_collect_env(process: subprocess.Popen | None, timeout_s: float = 120.0) -> None:
    """Wait for `start_collect_env`'s process (it has the CPU to itself once the cases are done);
    one that is still running after `timeout_s` is stopped, and the run folder has no report."""
    if process is None:
        return
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
