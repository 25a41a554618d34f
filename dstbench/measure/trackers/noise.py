"""Contention on record: what the machine did to each timed segment, and a rule for starved ones.

Per segment (`SegmentNoise`, a context manager outside the segment's timer):

- `cpu_share`: the process's CPU time (every thread) / (wall time x the threads that should have
  been busy: the intra-op threads on the CPU, the one host thread that launches and waits on CUDA
  or MPS).
- `wait_share` (Linux): the time the process's threads sat runnable on a run queue waiting for a
  core (`/proc/self/task/*/schedstat`, summed over threads) / (wall time x those threads). It counts
  only time taken by others: a thread that sleeps (OpenMP's passive wait, a GPU sync that blocks)
  is not waiting for a core.
- `involuntary_switches`: times the kernel took a core from the process (preemptions).
- `steal_share` (Linux VMs): the machine's hypervisor steal time over the segment (`/proc/stat`,
  every CPU) / (wall time x the online CPUs): cores the host gave to other guests, which the
  run-queue wait of the guest's own scheduler never shows.
- `gpu_other_processes` (CUDA with NVML): processes on the GPU besides the case's own group.
- `hand_over_ms` (interleaved, Linux): after the segment, untimed, how long its process's other
  threads took to park before the next case's segment (`dstbench.measure.hand_over`); null where
  it did not wait.

Per case: the load average (1, 5, 15 min) before the first and after the last segment.

`assess` applies the rule (docs/concepts/measurement.md). A segment is *starved* when its
`wait_share` exceeds `STARVED_WAIT_SHARE` or its `steal_share` exceeds `STARVED_STEAL_SHARE`; where the kernel gives no run-queue figures, on the CPU
when its `cpu_share` is below `STARVED_CPU_SHARE` (valid with OpenMP's default, spinning wait
only: a passive wait lowers it on an idle machine too); on CUDA also when another process held the
GPU at its start or end. A case is *contended* when at least `CONTENDED_FRACTION` of its segments
are starved: fewer move a median (of segment times or of paired ratios) too little to matter.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Iterable

from dstbench.measure import nvml
from dstbench.measure.trackers.base import (
    RANK0, SEGMENT, UNCHANGED, CaseContext, Cut, GroupRule, Joining, ResultField, SegmentOutcome, Tracker,
)
from dstbench.measure.trackers.registry import register_tracker

if TYPE_CHECKING:  # light on purpose: reports and gates read the rule without importing torch
    import torch

# Measured with the smoke suite's rigl@0.1 and barter@0.1 on this project's 2-core machine
# (docs/concepts/measurement.md), two threads: idle, wait_share 0.001-0.02 and cpu_share 0.98-1.00; a
# busy loop on one of the two cores, wait_share 0.26-0.66 and cpu_share 0.35-0.75; idle with
# OMP_WAIT_POLICY=PASSIVE, wait_share 0.0002-0.03 but cpu_share 0.72-0.77.
STARVED_WAIT_SHARE = 0.10
STARVED_CPU_SHARE = 0.85
STARVED_STEAL_SHARE = 0.10
CONTENDED_FRACTION = 0.25
_TASKS = Path("/proc/self/task")
_STAT = Path("/proc/stat")


def steal_seconds() -> float | None:
    """Seconds of hypervisor steal time summed over the machine's CPUs since boot (`/proc/stat`'s
    eighth `cpu` column); None where the kernel does not say."""
    try:
        fields = _STAT.read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def run_queue_wait_ns() -> dict[str, int] | None:
    """Nanoseconds each thread of this process has spent runnable but not running, by thread id
    (schedstat's second field); None where the kernel does not say."""
    waits = {}
    try:
        for task in os.listdir(_TASKS):
            try:
                waits[task] = int((_TASKS / task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended meanwhile
    except OSError:
        return None
    return waits or None


class SegmentNoise:
    """Measures one segment's contention; `sample` holds the figures after the block."""

    def __init__(self, device: torch.device, threads: int, group_pids: Iterable[int] = ()) -> None:
        self.device = device
        # The threads that should be busy: the intra-op team on the CPU, the launching thread else.
        self.busy_threads = threads if device.type == "cpu" else 1
        self.group_pids = set(group_pids) | {os.getpid()}
        self.sample: dict[str, Any] = {}

    def _gpu_others(self) -> int | None:
        if self.device.type != "cuda":
            return None
        pids = nvml.process_ids(nvml.index_of(self.device))
        if pids is None:
            return None
        if not self.group_pids & set(pids):
            # NVML reports another pid namespace's ids (a container): count past the group's size.
            return max(0, len(pids) - len(self.group_pids))
        return len(set(pids) - self.group_pids)

    def __enter__(self) -> "SegmentNoise":
        self._others = self._gpu_others()
        self._usage = resource.getrusage(resource.RUSAGE_SELF)
        self._waits = run_queue_wait_ns()
        self._steal = steal_seconds()
        self._cpu = time.process_time()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        wall = time.perf_counter() - self._wall
        cpu = time.process_time() - self._cpu
        waits = run_queue_wait_ns()
        steal = steal_seconds()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        if exc_type is not None:
            return
        others = [x for x in (self._others, self._gpu_others()) if x is not None]
        wait_share = None
        if waits is not None and self._waits is not None and wall > 0:
            waited = sum(ns - self._waits.get(task, 0) for task, ns in waits.items())
            wait_share = round(waited / 1e9 / (wall * self.busy_threads), 4)
        self.sample = {
            "cpu_share": round(cpu / (wall * self.busy_threads), 4) if wall > 0 else None,
            "wait_share": wait_share,
            "involuntary_switches": int(usage.ru_nivcsw - self._usage.ru_nivcsw),
            "steal_share": (round((steal - self._steal) / (wall * (os.cpu_count() or 1)), 4)
                            if steal is not None and self._steal is not None and wall > 0 else None),
            "gpu_other_processes": max(others) if others else None,
        }


# A noise record's per-segment lists (aligned with the line's segment_ms).
NOISE_LISTS = ("cpu_share", "wait_share", "involuntary_switches", "steal_share", "gpu_other_processes", "hand_over_ms")


def _join_noise(old: dict[str, Any] | None, new: dict[str, Any] | None, joining: Joining) -> dict[str, Any] | None:
    """Every group's samples, the first group's starting load, and the rule applied again."""
    if not old or not new:
        return new or old
    merged = dict(new)
    for key in NOISE_LISTS:
        if key in old or key in new:
            merged[key] = list(old.get(key) or []) + list(new.get(key) or [])
    merged["loadavg_start"] = old.get("loadavg_start")
    return assess(merged, str(joining.current.env.get("device_type") or "cpu"))


def _strip_noise(noise: Any, cut: Cut) -> Any:
    # The verdict (`starved_segments`, `contended`) is kept: the group's next timing adds its own.
    if not isinstance(noise, dict):
        return UNCHANGED
    noise = dict(noise)
    for key in (*NOISE_LISTS, "starved"):
        values = noise.get(key)
        if isinstance(values, list) and len(values) == cut.segments:
            noise[key] = [values[i] for i in cut.keep]
    return noise


def _join_warnings(old: list[str], new: list[str], joining: Joining) -> list[str]:
    # Sibling trackers' rules: outliers among the segments that compiled nothing, and the recompile note.
    from dstbench.measure.trackers.compile import RECOMPILE_NOTE_PREFIX, recompile_note, segments_without_recompiles
    from dstbench.measure.trackers.latency import OUTLIER_PREFIX, outlier_warning

    merged = joining.merged
    recompiles = list(getattr(merged, "segment_recompiles", None) or [])
    others = [w for w in list(old) + list(new) if not w.startswith(("contended:", OUTLIER_PREFIX, RECOMPILE_NOTE_PREFIX))]
    said = [
        outlier_warning(segments_without_recompiles(list(merged.segment_ms or []), recompiles)),
        recompile_note(recompiles, getattr(merged, "recompile_ms", None)),
        contention_warning(merged.noise),
    ]
    return list(dict.fromkeys(others + [w for w in said if w]))


NOISE_OF_GROUPS = GroupRule("every group's samples, assessed again", _join_noise, _strip_noise)
# The rule of the line's `warnings` (a core field): every group's, each once, with the contention
# line said again for the merged noise.
WARNINGS_OF_GROUPS = GroupRule("every group's, each once; outliers and contention said for the merged line", _join_warnings, derived=True)


@register_tracker("noise")
class NoiseRecord(Tracker):
    """A case's `noise` field, built segment by segment (a `SegmentNoise` around each, outside its
    clock); `write` adds it to the line with the contention warning when the case was contended.
    Each segment's sample goes back to the launcher with the segment's time (`noise`)."""

    runs = frozenset({SEGMENT})
    fields = (
        ResultField("noise", dict[str, Any] | None, NOISE_OF_GROUPS, RANK0,
                    "contention per segment and the rule's verdict (see the module docstring)", default=None,
                    over_segments="each"),
    )

    def __init__(self, device: torch.device, threads: int) -> None:
        self.device = device
        self.threads = threads
        self.samples: list[dict[str, Any]] = []
        self.loadavg_start: list[float] | None = None
        self.loadavg_end: list[float] | None = None
        self._meter: SegmentNoise | None = None

    @classmethod
    def for_case(cls, context: CaseContext) -> "NoiseRecord | None":
        return cls(context.device, context.threads) if context.timed else None

    def segment(self, tag: Any = None) -> SegmentNoise:
        if self.loadavg_start is None:
            self.loadavg_start = _loadavg()
        self._meter = SegmentNoise(self.device, self.threads, getattr(tag, "group_pids", ()))
        return self._meter

    def add(self, outcome: SegmentOutcome) -> None:
        assert self._meter is not None, "add() without a segment window"
        sample = self._meter.sample
        # After the segment, untimed: how long its threads took to park (dstbench.measure.hand_over).
        sample["hand_over_ms"] = outcome.hand_over_ms
        self.samples.append(sample)
        self.loadavg_end = _loadavg()
        outcome.report["noise"] = sample

    def to_dict(self) -> dict[str, Any]:
        noise: dict[str, Any] = {
            "threads": self.threads,
            "busy_threads": self.threads if self.device.type == "cpu" else 1,
            "cpu_share": [s.get("cpu_share") for s in self.samples],
            "wait_share": [s.get("wait_share") for s in self.samples],
            "involuntary_switches": [s.get("involuntary_switches") for s in self.samples],
            "steal_share": [s.get("steal_share") for s in self.samples],
            # After the segment, untimed: how long its threads took to park (dstbench.measure.hand_over).
            "hand_over_ms": [s.get("hand_over_ms") for s in self.samples],
            "loadavg_start": self.loadavg_start,
            "loadavg_end": self.loadavg_end,
        }
        if self.device.type == "cuda":
            noise["gpu_other_processes"] = [s.get("gpu_other_processes") for s in self.samples]
        return assess(noise, self.device.type)

    def write(self, line: Any) -> None:
        line.noise = self.to_dict()
        warning = contention_warning(line.noise)
        if warning:
            line.warnings.append(warning)


def _uses_wait_share(noise: dict[str, Any]) -> bool:
    waits = noise.get("wait_share") or []
    return bool(waits) and all(w is not None for w in waits)


def starved(noise: dict[str, Any], device_type: str) -> list[bool]:
    """Which segments the rule calls starved (see the module docstring)."""
    shares = list(noise.get("cpu_share") or [])
    if _uses_wait_share(noise):
        flags = [w > STARVED_WAIT_SHARE for w in noise["wait_share"]]
    elif device_type == "cpu":
        flags = [s is not None and s < STARVED_CPU_SHARE for s in shares]
    else:
        flags = [False] * len(shares)
    steals = list(noise.get("steal_share") or [])
    if len(steals) == len(flags):
        flags = [f or (t is not None and t > STARVED_STEAL_SHARE) for f, t in zip(flags, steals)]
    if device_type == "cuda":
        others = list(noise.get("gpu_other_processes") or [None] * len(flags))
        flags = [f or bool(o) for f, o in zip(flags, others)]
    return flags


def criterion(noise: dict[str, Any], device_type: str) -> str:
    """What makes a segment starved here, e.g. "wait_share > 0.1" ("" where nothing can)."""
    if _uses_wait_share(noise):
        rule = f"wait_share > {STARVED_WAIT_SHARE:g}"
    elif device_type == "cpu":
        rule = f"cpu_share < {STARVED_CPU_SHARE:g}"
    else:
        rule = ""
    if any(t is not None for t in noise.get("steal_share") or []):
        rule = " or ".join(r for r in (rule, f"steal_share > {STARVED_STEAL_SHARE:g}") if r)
    if device_type == "cuda":
        rule = " or ".join(r for r in (rule, "another process on the GPU") if r)
    return rule


def rule_text(noise: dict[str, Any], device_type: str) -> str:
    rule = criterion(noise, device_type)
    if not rule:
        return f"no rule on {device_type} without run-queue figures: recorded only"
    return f"starved: {rule}; contended: >= {CONTENDED_FRACTION:.0%} of segments starved"


def assess(noise: dict[str, Any], device_type: str) -> dict[str, Any]:
    """`noise` with `starved` (per segment), `starved_segments`, `contended` and the `rule` applied."""
    flags = starved(noise, device_type)
    count = sum(flags)
    return {
        **noise,
        "starved": flags,
        "starved_segments": count,
        "contended": bool(flags) and count >= CONTENDED_FRACTION * len(flags),
        "rule": rule_text(noise, device_type),
    }


def contention_warning(noise: dict[str, Any] | None) -> str | None:
    """The result line's `warnings` entry for a contended case, or None."""
    if not noise or not noise.get("contended"):
        return None
    key = "wait_share" if _uses_wait_share(noise) else "cpu_share"
    values = sorted(v for v in noise.get(key) or [] if v is not None)
    median = f", median {key} {values[len(values) // 2]:.2f}" if values else ""
    rule = noise.get("rule", "")
    rule = rule.removeprefix("starved: ").split(";")[0]
    return f"contended: {noise['starved_segments']} of {len(noise.get('starved') or [])} segments starved ({rule}{median})"
