"""NVML through nvidia-ml-py, optional: without a driver every call returns None, never raises."""

from __future__ import annotations

import functools
from typing import Any

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
