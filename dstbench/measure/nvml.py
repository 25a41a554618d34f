"""NVML through nvidia-ml-py, optional: without a driver every call returns None, never raises.

NVML numbers GPUs its own way (PCI bus order, every GPU of the machine); CUDA may number them
differently (`CUDA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER=FASTEST_FIRST`). Whatever reads NVML about
a CUDA device first maps it with `index_of`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

try:
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency, but stay importable without it
    pynvml = None


@functools.lru_cache(maxsize=1)
def available() -> bool:
    if pynvml is None:
        return False
    try:
        pynvml.nvmlInit()
        return True
    except Exception:  # NVMLError_LibraryNotFound and friends on machines without a driver
        return False


def handle(index: int) -> Any | None:
    if not available():
        return None
    try:
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None


def _normalise_uuid(uuid: Any) -> str:
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid or "")
    return text.strip().lower().removeprefix("gpu-")


def gpu_uuid(cuda_index: int) -> str | None:
    """A CUDA device's UUID as nvidia-smi prints it ("GPU-..."), from torch (no NVML needed)."""
    import torch

    uuid = _normalise_uuid(getattr(torch.cuda.get_device_properties(cuda_index), "uuid", ""))
    return f"GPU-{uuid}" if uuid else None


def index_of(device: torch.device) -> int:
    """NVML's index of a CUDA device, matched by UUID when torch and NVML both report one; else the
    CUDA index (right whenever CUDA sees every GPU in bus order)."""
    import torch

    cuda_index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = _normalise_uuid(getattr(torch.cuda.get_device_properties(cuda_index), "uuid", ""))
    if uuid and available():
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                if _normalise_uuid(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))) == uuid:
                    return i
        except Exception:  # noqa: BLE001 - any NVML failure: keep the CUDA index
            pass
    return cuda_index


def _call(fn: str, *args: Any) -> Any | None:
    try:
        return getattr(pynvml, fn)(*args)
    except Exception:
        return None


def _throttle_reasons(h: Any) -> list[str] | None:
    mask = _call("nvmlDeviceGetCurrentClocksEventReasons", h)
    if mask is None:
        mask = _call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
    if mask is None:
        return None
    names = [
        name.removeprefix("nvmlClocksEventReason").removeprefix("nvmlClocksThrottleReason")
        for name in dir(pynvml)
        if name.startswith(("nvmlClocksEventReason", "nvmlClocksThrottleReason"))
        and not name.endswith(("None", "All"))
        and isinstance(getattr(pynvml, name), int)
        and getattr(pynvml, name) & mask
    ]
    return sorted(set(names))


def snapshot(index: int) -> dict[str, Any] | None:
    """Clocks, temperature, power and throttle reasons of GPU `index` now; None without NVML."""
    h = handle(index)
    if h is None:
        return None
    power_limit = _call("nvmlDeviceGetEnforcedPowerLimit", h)
    power = _call("nvmlDeviceGetPowerUsage", h)
    return {
        "sm_clock_mhz": _call("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_SM),
        "mem_clock_mhz": _call("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_MEM),
        "max_sm_clock_mhz": _call("nvmlDeviceGetMaxClockInfo", h, pynvml.NVML_CLOCK_SM),
        "temperature_c": _call("nvmlDeviceGetTemperature", h, pynvml.NVML_TEMPERATURE_GPU),
        "power_limit_w": power_limit / 1000 if power_limit is not None else None,
        "power_w": power / 1000 if power is not None else None,
        "throttle_reasons": _throttle_reasons(h),
    }


def driver_version() -> str | None:
    if not available():
        return None
    version = _call("nvmlSystemGetDriverVersion")
    return version.decode() if isinstance(version, bytes) else version


def total_energy_mj(index: int) -> int | None:
    """The GPU's total-energy counter in millijoules (Volta and newer); None when not readable."""
    h = handle(index)
    return _call("nvmlDeviceGetTotalEnergyConsumption", h) if h is not None else None


def process_ids(index: int) -> list[int] | None:
    """Pids of the processes holding a compute or graphics context on GPU `index` (NVML's view:
    in a container they may be the host's pids); None without NVML."""
    h = handle(index)
    if h is None:
        return None
    pids: set[int] = set()
    for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for info in _call(fn, h) or []:
            pid = getattr(info, "pid", None)
            if isinstance(pid, int):
                pids.add(pid)
    return sorted(pids)
