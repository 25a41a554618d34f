"""RAPL: the CPU packages' energy counters, read through Linux powercap
(`/sys/class/powercap/intel-rapl:N/energy_uj`, the interface AMD's counters use too).

A package domain counts the whole package (every process on it) in microjoules and wraps at its
`max_energy_range_uj`; it updates about every millisecond. Where the folder is absent (a VM, macOS)
or the files are not readable (recent kernels let only root read them), nothing is measured and
`unreadable_reason` says why. Nothing here raises.
"""

from __future__ import annotations

import re
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")
PACKAGE = re.compile(r"^intel-rapl:\d+$")  # a package; intel-rapl:N:M are its sub-domains (core, dram)


def packages(root: Path | None = None) -> list[Path]:
    """The package domains whose counter this process can read."""
    root = POWERCAP if root is None else root
    try:
        domains = sorted(p for p in root.iterdir() if PACKAGE.match(p.name))
    except OSError:
        return []
    return [d for d in domains if _read_int(d / "energy_uj") is not None]


def unreadable_reason(root: Path | None = None) -> str:
    root = POWERCAP if root is None else root
    if not root.is_dir():
        return f"no RAPL counters here ({root} is absent: a virtual machine, or not Linux)"
    return f"no readable RAPL package counter under {root} (reading energy_uj may need root)"


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def read_uj(domains: list[Path]) -> list[int] | None:
    """Each package's counter, or None when one cannot be read."""
    values = [_read_int(d / "energy_uj") for d in domains]
    return None if any(v is None for v in values) else [int(v) for v in values if v is not None]


def joules_between(domains: list[Path], start: list[int], end: list[int]) -> float:
    """Joules over the packages from `start` to `end`, a counter that wrapped once counted round."""
    total = 0
    for domain, before, after in zip(domains, start, end):
        step = after - before
        if step < 0:
            step += _read_int(domain / "max_energy_range_uj") or 0
        total += max(step, 0)
    return total / 1e6
