"""Energy of the timed segments from NVML's total-energy counter (NVIDIA GPUs, Volta and newer) or,
on the CPU, the packages' RAPL counters where this process can read them (`dstbench.measure.rapl`).

The NVML counter is read at the start and the end of each window (a `with` block; a case alone on the
GPU reads once around all its segments, an interleaved one around each of its own segments, since
its group's other cases use the GPU in between). It counts the whole GPU (other processes on it
included) in millijoules, but the driver refreshes it only every so often, so a short window can
read a stale value at either end. Windows must last `MIN_WINDOW_S` or more on average (then one
missed refresh per window, of roughly 0.1 s, is at most ~5% of the time) and the counter must
advance; otherwise the result says "not measured" and why. RAPL counts whole CPU packages (every
process on them) in microjoules, updated about every millisecond, so its windows need only
`RAPL_MIN_WINDOW_S`. Everything here returns a reason rather than raising: a machine without a
driver or readable counters simply records no energy.

Merged lines: a case timed in several groups sums its groups' windows; a distributed case sums its
ranks' GPUs. Either only when every part was measured.
"""

from __future__ import annotations

import contextlib
import os
import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable

from dstbench.measure import nvml, rapl
from dstbench.measure.trackers.base import (
    CASE, SEGMENT, UNCHANGED, CaseContext, Cut, GroupRule, Joining, RankRule, Ranks, ResultField, Tracker,
)
from dstbench.measure.trackers.registry import register_tracker

if TYPE_CHECKING:  # torch is imported where it is used: the result record reads the declarations here without it
    import torch

MIN_WINDOW_S = 2.0
RAPL_MIN_WINDOW_S = 0.1
SOURCE = "NVML total-energy counter (whole GPU)"
RAPL_SOURCE = "RAPL package counters (whole CPU packages, Linux powercap)"


def _join_groups(old: dict[str, Any] | None, new: dict[str, Any] | None, joining: Joining) -> dict[str, Any] | None:
    if not (old and old.get("measured") and new and new.get("measured")):
        reason = next((e.get("reason") for e in (new, old) if e and not e.get("measured")), None)
        return {"measured": False, "reason": reason} if reason else (new or old)
    joules, seconds = old["joules"] + new["joules"], old["seconds"] + new["seconds"]
    steps, images = old["steps"] + new["steps"], old["images"] + new["images"]
    return {
        **new, "joules": joules, "seconds": seconds, "steps": steps, "images": images,
        "joules_per_step": joules / steps, "images_per_joule": images / joules, "mean_power_w": joules / seconds,
    }


def _strip_group(energy: Any, cut: Cut) -> Any:
    # Joules cannot be split by segment: a group timed again leaves the energy unmeasured.
    if cut.removes_samples and isinstance(energy, dict) and energy.get("measured"):
        return {"measured": False, "reason": f"group {cut.base} was timed again; its joules cannot be separated"}
    return UNCHANGED


def _combine_ranks(energies: list[Any], ranks: Ranks) -> dict[str, Any] | None:
    """The job's energy: every rank's GPU summed, when every rank measured its own."""
    if not all(e and e.get("measured") for e in energies):
        return energies[0]
    if any(e.get("source") == RAPL_SOURCE for e in energies):
        return {"measured": False, "reason": "RAPL counts whole CPU packages, which ranks on one host share: not summed over ranks"}
    joules = sum(e["joules"] for e in energies)
    seconds = max(e["seconds"] for e in energies)
    steps = energies[0]["steps"]
    images = sum(e["images"] for e in energies)
    return {
        **energies[0],
        "nvml_index": [e["nvml_index"] for e in energies],
        "joules": joules, "seconds": seconds, "images": images, "joules_per_step": joules / steps,
        "images_per_joule": images / joules, "mean_power_w": joules / seconds,
    }


def joules_per_step(energy: Any) -> Any:
    """What the report shows of a line's energy: joules per timed step where a counter measured
    them, "not measured" where it did not (None: a line without the field)."""
    if not isinstance(energy, dict):
        return None
    return energy.get("joules_per_step") if energy.get("measured") else "not measured"


ENERGY_OF_GROUPS = GroupRule("every group's windows summed, when each was measured", _join_groups, _strip_group)
ENERGY_OF_RANKS = RankRule("every rank's GPU summed, when each was measured", _combine_ranks)


@register_tracker("energy")
class EnergyMeter(Tracker):
    """Reads the energy counter around the work inside `with`; `result(steps, images)` gives the
    result line's `energy` field, which `write` puts into a line whose segments are timed. The
    caller synchronises the device at both ends (the warm-up ends in a sync and every timed segment
    ends in one).

    In a case session its window is one over all the timed segments when the case is alone on the
    device, one per segment when interleaved (`case`, `segment`). It follows the noise and compile
    trackers, so its windows sit closest to the segments' clock, and the segment times, since
    `write` divides by their steps. The counter is the whole GPU's: per process."""

    runs = frozenset({CASE, SEGMENT})
    per_process = True
    after = ("latency", "noise", "compile")
    fields = (
        ResultField("energy", dict[str, Any] | None, ENERGY_OF_GROUPS, ENERGY_OF_RANKS,
                    "joules of the timed segments, or why not measured (see the module docstring)", default=None,
                    unit="J", over_segments="window", summary=joules_per_step, summary_unit="J/step"),
    )

    def __init__(
        self,
        device: torch.device,
        *,
        min_seconds: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
        rapl_root: Any = None,
    ) -> None:
        import torch

        self.device = torch.device(device)
        self.min_seconds = min_seconds if min_seconds is not None else (
            RAPL_MIN_WINDOW_S if self.device.type == "cpu" else MIN_WINDOW_S)
        self._clock = clock
        self._index: int | None = None
        self._start_mj: int | None = None
        self._rapl_root = rapl_root  # the powercap folder (tests point it elsewhere)
        self._packages: list[Any] | None = None  # RAPL domains, on the CPU
        self._rapl_start: list[int] | None = None
        self._t0 = 0.0
        self._windows: list[tuple[float, float]] = []  # (millijoules, seconds) per window
        self.reason: str | None = None  # why not measured; None while it can still be
        self.spanning = True  # one window over all the segments (alone), else one per segment

    @classmethod
    def for_case(cls, context: CaseContext) -> "EnergyMeter | None":
        return cls(context.device) if context.timed else None

    def case(self, tag: Any) -> Any:
        # Interleaved, the group's other cases use the GPU between this one's segments.
        self.spanning = not set(getattr(tag, "group_pids", ())) - {os.getpid()}
        return self if self.spanning else contextlib.nullcontext()

    def segment(self, tag: Any) -> Any:
        return contextlib.nullcontext() if self.spanning else self

    @classmethod
    def unmeasured(cls, line: Any, reason: str) -> None:
        if isinstance(line.energy, dict) and line.energy.get("measured"):
            line.energy = {"measured": False, "reason": reason}

    def __enter__(self) -> "EnergyMeter":
        if self.reason is not None:
            pass
        elif self.device.type == "cpu":
            if self._packages is None:
                self._packages = rapl.packages(self._rapl_root)
            self._rapl_start = rapl.read_uj(self._packages) if self._packages else None
            if self._rapl_start is None:
                self.reason = f"device cpu: {rapl.unreadable_reason(self._rapl_root)}"
        elif self.device.type != "cuda":
            self.reason = f"device {self.device.type}: NVML's energy counter exists on NVIDIA GPUs only"
        elif not nvml.available():
            self.reason = "NVML not available (no NVIDIA driver or nvidia-ml-py)"
        else:
            if self._index is None:
                self._index = nvml.index_of(self.device)
            self._start_mj = nvml.total_energy_mj(self._index)
            if self._start_mj is None:
                self.reason = "this GPU's total-energy counter is not readable (needs Volta or newer)"
        self._t0 = self._clock()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        t1 = self._clock()
        if self.reason is None and self._packages and self._rapl_start is not None:
            end = rapl.read_uj(self._packages)
            if end is None:
                self.reason = "a RAPL counter could not be read after the segments"
            else:
                self._windows.append((rapl.joules_between(self._packages, self._rapl_start, end) * 1e3, t1 - self._t0))
        elif self.reason is None and self._index is not None and self._start_mj is not None:
            end_mj = nvml.total_energy_mj(self._index)
            if end_mj is None:
                self.reason = "the total-energy counter could not be read after the segments"
            else:
                self._windows.append((end_mj - self._start_mj, t1 - self._t0))

    @property
    def seconds(self) -> float:
        return sum(seconds for _, seconds in self._windows)

    def result(self, steps: int, images: int) -> dict[str, Any]:
        """Joules per step and images per joule, or `measured: False` with the reason."""
        if self.reason is not None:
            return {"measured": False, "reason": self.reason}
        assert self._windows, "result() before the with-block ended"
        mean_s = self.seconds / len(self._windows)
        if mean_s < self.min_seconds:
            what = "timed segments lasted" if len(self._windows) == 1 else "each window (one per segment) lasted on average"
            return {
                "measured": False,
                "reason": f"{what} {mean_s:.2f} s, under the {self.min_seconds:g} s "
                "the counter's resolution needs (lengthen the segments)",
            }
        joules = sum(mj for mj, _ in self._windows) / 1e3
        if joules <= 0:
            return {"measured": False, "reason": "the total-energy counter did not advance over the segments"}
        where = {"source": RAPL_SOURCE, "rapl_packages": len(self._packages)} if self._packages else {
            "source": SOURCE, "nvml_index": self._index}
        return {
            "measured": True,
            **where,
            "joules": joules,
            "seconds": self.seconds,
            "steps": steps,
            "images": images,
            "joules_per_step": joules / steps,
            "images_per_joule": images / joules,
            "mean_power_w": joules / self.seconds,
        }

    def write(self, line: Any) -> None:
        """The energy of the line's timed steps (written after the segment times), if any."""
        if line.segment_ms:
            steps = len(line.segment_ms) * line.segment_steps
            line.energy = self.result(steps, line.batch_size * steps)
