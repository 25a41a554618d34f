"""How lines of one case combine: a case timed in several groups (dense, in every density's group),
and a distributed case's ranks.

Groups: `merge_shared` joins a case's line from one more group with its line so far; `strip_group`
takes out what one group contributed (it is about to be timed again). Phases: `merge_phases` joins a
`mode: both` case's timing line and its training. Ranks: `merge_ranks` makes one
line from every rank's. Each goes field by field by the rules the field's declaration gives
(`dstbench.measure.trackers.base`); what the status of a failed line decides is here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dstbench.measure.trackers.base import UNCHANGED, Cut, Joining, Ranks, declared_fields
from dstbench.results.record import line_type as current_line_type
from dstbench.suite.groups import base_key


def strip_group(line: dict[str, Any], base: str, line_type: type | None = None) -> dict[str, Any] | None:
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
    samples = list(line.get("segment_group") or [])
    cut = Cut(base, len(samples), tuple(i for i, g in enumerate(samples) if base_key(g) != base))
    for spec in declared_fields(line_type or current_line_type()):
        if spec.name == "groups":
            continue  # its ids are the ones left, above
        value = spec.groups.strip(line.get(spec.name), cut)
        if value is not UNCHANGED:
            out[spec.name] = value
    return out


def merge_shared(old: dict[str, Any] | None, new: Any) -> Any:
    """The line of a case timed in several groups: its samples from every group, figures that do
    not depend on the group (memory, bytes, density) from the latest; a failure in any group wins."""
    if old is None:
        return new
    line_type = type(new)
    specs = declared_fields(line_type)
    previous = line_type.from_dict(old)
    groups = next(s for s in specs if s.name == "groups").groups.join(previous.groups, new.groups, None)
    if previous.status != "ok":
        return dataclasses.replace(previous, groups=groups)
    if new.status != "ok":
        where = f"in group {new.groups[-1]}: " if new.groups else ""
        return dataclasses.replace(new, groups=groups, error=f"{where}{new.error}")
    merged = dataclasses.replace(new)
    joining = Joining(previous, new, merged)
    for derived in (False, True):  # derived fields are recomputed from the merged others
        for spec in specs:
            if spec.groups.derived == derived:
                value = spec.groups.join(getattr(previous, spec.name), getattr(new, spec.name), joining)
                setattr(merged, spec.name, value)
    return merged


# What the training phase of a `mode: both` run writes into a (case, seed)'s line: its accuracy
# figures and what the method did over the whole training (density, loss, extras such as BARTER's
# topology history), not over the short timed segments.
TRAINING_FIELDS = ("top1", "top5", "epochs", "train_time_s", "curve", "density_achieved", "loss", "method_extras")


def merge_phases(timing: Any, training: Any, line_type: type | None = None) -> Any:
    """The line of a `mode: both` (case, seed) from its timing phase's line and its training's
    (lines or dicts): the timing's fields (segments, memory, the groups it was timed in, its mode)
    with the training's `TRAINING_FIELDS`; both data loadings, warnings and durations; a failure of
    either is the line's status, a training failure's error saying so."""
    line_type = line_type or current_line_type()
    timing = line_type.from_dict(timing) if isinstance(timing, dict) else timing
    training = line_type.from_dict(training) if isinstance(training, dict) else training
    if timing.status != "ok":
        return timing
    merged = dataclasses.replace(timing, warnings=list(dict.fromkeys([*timing.warnings, *training.warnings])))
    for name in TRAINING_FIELDS:
        setattr(merged, name, getattr(training, name))
    # A line joined before (timed again after its training) names both already: keep its accuracy part.
    accuracy = (training.data_loading or "").split("; accuracy: ", 1)[-1] or None
    if timing.data_loading and accuracy and timing.data_loading != accuracy:
        merged.data_loading = f"speed: {timing.data_loading}; accuracy: {accuracy}"
    else:
        merged.data_loading = timing.data_loading or accuracy
    if timing.duration_s is not None and training.duration_s is not None:
        merged.duration_s = timing.duration_s + training.duration_s
    if training.status != "ok":
        merged.status, merged.error = training.status, f"in training: {training.error}"
    return merged


def merge_ranks(results: list[Any], world_size: int | None = None) -> Any:
    """One case result from every rank's: slowest rank per segment, largest memory, per-rank detail.

    The line keeps rank 0's identity, profile and accuracy curve (the ranks hold the same model);
    `segment_ms[i]` is the slowest rank's i-th segment, `images_per_s` the whole job's throughput
    (every rank trains its own batch), `loss` the mean over ranks (the global batch's, since the
    ranks' batches are the same size), energy the sum over ranks' GPUs; `ranks` lists each rank's
    own figures (the fields declared `per_rank`).
    """
    lines = sorted(results, key=lambda r: r.env.get("rank", 0))
    specs = declared_fields(type(lines[0]))
    merged = dataclasses.replace(lines[0])
    ranks = Ranks(tuple(lines), world_size or len(lines), merged, tuple(s.name for s in specs if s.per_rank))
    for derived in (False, True):  # derived fields are recomputed from the merged others
        for spec in specs:
            if spec.ranks.derived == derived:
                setattr(merged, spec.name, spec.ranks.combine([getattr(r, spec.name) for r in lines], ranks))
    return merged
