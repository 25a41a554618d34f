"""Which cases are timed together, and how their result lines are kept when they are.

A *group* is the cases that are compared with each other: every method at one density plus dense
(which belongs to every density's group) with `timing.interleave`, a case alone without it (and in
`accuracy` or `both` mode, whose training would keep the other processes idle in device memory for
hours). The scheduler (`dstbench.execution.rounds`) times a group's segments in rounds; its result lines
are written together when the group ends.

Group ids. Each time a group is timed it gets an id `KEY#TOKEN`: KEY is `d=<density>` for a
density's group (`d=0.1|barter` for a (method, reference) pair split from it when it would not fit
in device memory) or the case id of a case timed alone; TOKEN is fresh each time. Every segment
sample carries its group id and round (`segment_group`, `segment_round`), so reports pair a
method's round r with its reference's round r of the same group id, and every line lists the ids
it was timed in (`groups`).

Shared cases. Dense belongs to every density's group: each group times it in a fresh process, and
its line holds the segments of every group it was timed in (`merge_shared`), rewritten when each
group ends. A failure in any group is the line's status.

Resume. A group is done when every member has a line and a shared member's line lists an id of
that group's key. `--resume` times a group that is not done again, whole: its members' lines are
replaced (a shared member keeps the segments of its other groups) in one atomic rewrite of
`results.jsonl` when the group ends, so no line of an interrupted group survives beside the new ones.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections import OrderedDict
from typing import Any, Iterable

from dstbench.suite.cases import Case, density_text
from dstbench.results.record import CaseResult
from dstbench.measure.trackers.latency import summarize_ms
from dstbench.measure.trackers.noise import assess, contention_warning

SEGMENT_LISTS = ("segment_ms", "segment_group", "segment_round", "segment_start_s")
NOISE_LISTS = ("cpu_share", "wait_share", "involuntary_switches", "gpu_other_processes")


@dataclasses.dataclass(frozen=True)
class Group:
    key: str  # "d=0.1", "d=0.1|barter" (a split pair) or a case id (timed alone)
    cases: tuple[Case, ...]

    @property
    def base(self) -> str:
        return base_key(self.key)


def base_key(group_id: str) -> str:
    """The planned group a group id belongs to: "d=0.1" for "d=0.1|barter#5f3a", "d=0.1#9c1e"."""
    head = group_id.split("|", 1)[0] if group_id.startswith("d=") else group_id
    return head.rsplit("#", 1)[0] if "#" in head else head


def new_group_id(key: str) -> str:
    return f"{key}#{secrets.token_hex(3)}"


def density_key(density: float) -> str:
    # As case ids do: `:g` would put 0.5 and 0.5000001 in one group.
    return f"d={density_text(density)}"


def plan_groups(cases: list[Case], reference: str, *, interleave: bool) -> list[Group]:
    """The groups to time, in run order (the cases' order: densities descending). Within a group the
    reference comes first, then dense, then the others in suite order: the order of each round."""
    if not interleave:
        return [Group(c.case_id, (c,)) for c in cases]
    dense = [c for c in cases if c.kind == "dense"]
    by_density: OrderedDict[str, list[Case]] = OrderedDict()
    for case in cases:
        if case.kind != "dense":
            by_density.setdefault(density_key(case.density), []).append(case)
    if not by_density:
        return [Group(density_key(1.0), tuple(dense))] if dense else []
    groups = []
    for key, members in by_density.items():
        ordered = [c for c in members if c.method == reference] + dense + [c for c in members if c.method != reference]
        groups.append(Group(key, tuple(ordered)))
    return groups


def split(group: Group, reference: str) -> list[Group]:
    """A group that would not fit in device memory: (reference, method) pairs, or single cases when
    it is a pair already (or has no reference)."""
    refs = [c for c in group.cases if c.method == reference]
    others = [c for c in group.cases if c.method != reference]
    if len(group.cases) > 2 and refs:
        return [Group(f"{group.base}|{c.method}", (refs[0], c)) for c in others]
    return [Group(f"{group.base}|{c.method}", (c,)) for c in group.cases]


def shared_cases(groups: Iterable[Group]) -> set[str]:
    """Case ids that belong to more than one group (dense, in an interleaved plan)."""
    seen: dict[str, int] = {}
    for group in groups:
        for case in group.cases:
            seen[case.case_id] = seen.get(case.case_id, 0) + 1
    return {case_id for case_id, n in seen.items() if n > 1}


def group_done(group: Group, lines: dict[str, dict[str, Any]], shared: set[str]) -> bool:
    """Whether every member has its line from this group (lines without `groups`, written before
    groups existed, count as done)."""
    for case in group.cases:
        line = lines.get(case.case_id)
        if line is None:
            return False
        ids = line.get("groups") or []
        if case.case_id in shared and ids and not any(base_key(g) == group.base for g in ids):
            return False
    return True


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
