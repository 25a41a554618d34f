"""How lines of one case combine: a case timed in several groups (dense, in every density's group),
and a distributed case's ranks.

Groups: `merge_shared` joins a case's line from one more group with its line so far; `strip_group`
takes out what one group contributed (it is about to be timed again). Ranks: `merge_ranks` makes one
line from every rank's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dstbench.measure.trackers.latency import summarize_ms
from dstbench.measure.trackers.noise import assess, contention_warning
from dstbench.results.record import CaseResult
from dstbench.suite.groups import base_key

SEGMENT_LISTS = ("segment_ms", "segment_group", "segment_round", "segment_start_s")


NOISE_LISTS = ("cpu_share", "wait_share", "involuntary_switches", "gpu_other_processes")


# What each rank's entry of `CaseResult.ranks` holds (the merged line keeps rank 0's identity).
RANK_FIELDS = ("device", "segment_ms", "median_ms", "images_per_s", "peak_memory_bytes", "reserved_memory_bytes",
               "rss_peak_bytes", "state_bytes", "activation_bytes", "density_achieved", "loss", "topology_ms",
               "train_time_s", "top1")


# Memory figures of the case: the largest rank's (the GPU that must fit the job).
MAX_FIELDS = ("peak_memory_bytes", "reserved_memory_bytes", "rss_peak_bytes", "topology_ms", "train_time_s", "duration_s")


def strip_group(line: dict[str, Any], base: str) -> dict[str, Any] | None:
    """A shared case's line without what group `base` contributed (it is about to be timed
    again); None when nothing else is left."""
    ids = [g for g in line.get("groups") or [] if base_key(g) != base]
    if not ids:
        return None
    if line.get("status") != "ok":
        # A failed line holds no samples and may have failed in this very group: timed again, the
        # group's result replaces it (a later --resume times the other groups again).
        return None if len(ids) < len(line.get("groups") or []) else line
    out = dict(line, groups=ids)
    groups = list(line.get("segment_group") or [])
    keep = [i for i, g in enumerate(groups) if base_key(g) != base]
    if groups and len(keep) < len(groups):
        # Totals over the whole line lose the stripped group's share. Each group runs the case from
        # step 0 with the same schedule, so updates split evenly by segments; their time and the
        # wall time nearly so. Joules cannot be split: energy is left unmeasured.
        share = len(keep) / len(groups)
        for key in ("topology_updates", "topology_ms", "duration_s"):
            if isinstance(line.get(key), (int, float)):
                out[key] = round(line[key] * share) if key == "topology_updates" else line[key] * share
        if isinstance(line.get("topology_detail_ms"), dict):
            out["topology_detail_ms"] = {k: v * share for k, v in line["topology_detail_ms"].items()}
        if isinstance(line.get("energy"), dict) and line["energy"].get("measured"):
            out["energy"] = {"measured": False, "reason": f"group {base} was timed again; its joules cannot be separated"}
    for key in SEGMENT_LISTS:
        values = list(line.get(key) or [])
        if len(values) == len(groups):
            out[key] = [values[i] for i in keep]
    noise = line.get("noise")
    if isinstance(noise, dict):
        noise = dict(noise)
        for key in (*NOISE_LISTS, "starved"):
            values = noise.get(key)
            if isinstance(values, list) and len(values) == len(groups):
                noise[key] = [values[i] for i in keep]
        out["noise"] = noise
    return out


def _energy(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any] | None:
    if not (old and old.get("measured") and new and new.get("measured")):
        reason = next((e.get("reason") for e in (new, old) if e and not e.get("measured")), None)
        return {"measured": False, "reason": reason} if reason else (new or old)
    joules, seconds = old["joules"] + new["joules"], old["seconds"] + new["seconds"]
    steps, images = old["steps"] + new["steps"], old["images"] + new["images"]
    return {
        **new, "joules": joules, "seconds": seconds, "steps": steps, "images": images,
        "joules_per_step": joules / steps, "images_per_joule": images / joules, "mean_power_w": joules / seconds,
    }


def _merge_noise(old: dict[str, Any] | None, new: dict[str, Any] | None, device_type: str) -> dict[str, Any] | None:
    if not old or not new:
        return new or old
    merged = dict(new)
    for key in NOISE_LISTS:
        if key in old or key in new:
            merged[key] = list(old.get(key) or []) + list(new.get(key) or [])
    merged["loadavg_start"] = old.get("loadavg_start")
    return assess(merged, device_type)


def merge_shared(old: dict[str, Any] | None, new: CaseResult) -> CaseResult:
    """The line of a case timed in several groups: its samples from every group, figures that do
    not depend on the group (memory, bytes, density) from the latest; a failure in any group wins."""
    if old is None:
        return new
    previous = CaseResult.from_dict(old)
    groups = list(previous.groups) + [g for g in new.groups if g not in previous.groups]
    if previous.status != "ok":
        return dataclasses.replace(previous, groups=groups)
    if new.status != "ok":
        where = f"in group {new.groups[-1]}: " if new.groups else ""
        return dataclasses.replace(new, groups=groups, error=f"{where}{new.error}")
    merged = dataclasses.replace(new, groups=groups, started_at=previous.started_at)
    for key in SEGMENT_LISTS:
        setattr(merged, key, list(getattr(previous, key)) + list(getattr(new, key)))
    if merged.segment_ms:
        merged.median_ms, merged.iqr_ms = summarize_ms(merged.segment_ms)
        if merged.batch_size and merged.segment_steps:
            merged.images_per_s = merged.batch_size * merged.segment_steps / (merged.median_ms / 1e3)
    merged.topology_updates = (previous.topology_updates or 0) + (new.topology_updates or 0)
    merged.topology_ms = (previous.topology_ms or 0.0) + (new.topology_ms or 0.0)
    detail = dict(previous.topology_detail_ms or {})
    for key, ms in (new.topology_detail_ms or {}).items():
        detail[key] = detail.get(key, 0.0) + ms
    merged.topology_detail_ms = detail
    for key in ("peak_memory_bytes", "reserved_memory_bytes", "rss_peak_bytes"):
        values = [v for v in (getattr(previous, key), getattr(new, key)) if v is not None]
        setattr(merged, key, max(values) if values else None)
    merged.duration_s = (previous.duration_s or 0.0) + (new.duration_s or 0.0)
    merged.energy = _energy(previous.energy, new.energy)
    merged.noise = _merge_noise(previous.noise, new.noise, str(new.env.get("device_type") or "cpu"))
    others = [w for w in list(previous.warnings) + list(new.warnings) if not w.startswith("contended:")]
    contention = contention_warning(merged.noise)
    merged.warnings = list(dict.fromkeys(others + ([contention] if contention else [])))
    return merged


def _energy_ranks(results: list[CaseResult]) -> dict[str, Any] | None:
    """The job's energy: every rank's GPU summed, when every rank measured its own."""
    energies = [r.energy for r in results]
    if not all(e and e.get("measured") for e in energies):
        return results[0].energy
    joules = sum(e["joules"] for e in energies)  # type: ignore[index]
    seconds = max(e["seconds"] for e in energies)  # type: ignore[index]
    steps = energies[0]["steps"]  # type: ignore[index]
    images = sum(e["images"] for e in energies)  # type: ignore[index]
    return {
        **energies[0],  # type: ignore[dict-item]
        "nvml_index": [e["nvml_index"] for e in energies],  # type: ignore[index]
        "joules": joules, "seconds": seconds, "images": images, "joules_per_step": joules / steps,
        "images_per_joule": images / joules, "mean_power_w": joules / seconds,
    }


def merge_ranks(results: list[CaseResult], world_size: int | None = None) -> CaseResult:
    """One case result from every rank's: slowest rank per segment, largest memory, per-rank detail.

    The line keeps rank 0's identity, profile and accuracy curve (the ranks hold the same model);
    `segment_ms[i]` is the slowest rank's i-th segment, `images_per_s` the whole job's throughput
    (every rank trains its own batch), `loss` the mean over ranks (the global batch's, since the
    ranks' batches are the same size), energy the sum over ranks' GPUs; `ranks` lists each rank's
    own figures.
    """
    results = sorted(results, key=lambda r: r.env.get("rank", 0))
    merged = dataclasses.replace(results[0], env=dict(results[0].env))
    merged.world_size = world_size or len(results)
    merged.ranks = [
        {"rank": r.env.get("rank", i), "local_rank": r.env.get("local_rank"), "host": r.env.get("host"),
         **{k: getattr(r, k) for k in RANK_FIELDS}}
        for i, r in enumerate(results)
    ]
    if merged.segment_ms and all(len(r.segment_ms) == len(merged.segment_ms) for r in results):
        merged.segment_ms = [max(samples) for samples in zip(*(r.segment_ms for r in results))]
        merged.median_ms, merged.iqr_ms = summarize_ms(merged.segment_ms)
        images = merged.world_size * merged.batch_size * merged.segment_steps  # type: ignore[operator]
        merged.images_per_s = images / (merged.median_ms / 1e3)
    for key in MAX_FIELDS:
        values = [getattr(r, key) for r in results if getattr(r, key) is not None]
        setattr(merged, key, max(values) if values else None)
    losses = [r.loss for r in results if r.loss is not None]
    merged.loss = sum(losses) / len(losses) if losses else None
    merged.energy = _energy_ranks(results)
    merged.env.pop("finished_at", None)
    return merged
