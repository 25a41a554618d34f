"""Which cases are timed together, and how their result lines are kept when they are.

A *group* is the cases that are compared with each other: every method at one density plus dense
(which belongs to every density's group) with `timing.interleave`, a case alone without it (and in
`accuracy` mode, whose training would keep the other processes idle in device memory for hours;
`mode: both` times its cases in groups first and trains each alone afterwards:
`dstbench.suite.plan`). The scheduler (`dstbench.execution.rounds`) times a group's segments in rounds; its result lines
are written together when the group ends.

Group ids. Each time a group is timed it gets an id `KEY#TOKEN`: KEY is `d=<density>` for a
density's group (`d=0.1|barter` for a (method, reference) pair split from it when it would not fit
in device memory) or the case id of a case timed alone; TOKEN is fresh each time. In a suite with
a sweep a group holds the cases of one point only, and its key names the point: `d=0.1[embed_dim=192]`
(dense belongs to every density's group of its own point). With `seeds:` a group holds one seed's
cases, and its key names the seed: `d=0.1 seed=1`, `rigl@0.1 seed=1` (`Case.key`). Every segment
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

from dstbench.suite.cases import Case, density_text, seed_tag


@dataclasses.dataclass(frozen=True)
class Group:
    key: str  # "d=0.1", "d=0.1|barter" (a split pair) or a case key (timed alone)
    cases: tuple[Case, ...]

    @property
    def base(self) -> str:
        return base_key(self.key)


def base_key(group_id: str) -> str:
    """The planned group's key a group id belongs to: "d=0.1" for "d=0.1|barter#5f3a", "d=0.1#9c1e"."""
    head = group_id.split("|", 1)[0] if group_id.startswith("d=") else group_id
    return head.rsplit("#", 1)[0] if "#" in head else head


ADDED_SET = "+set"


def added_set_key(key: str, index: int) -> str:
    """The key of process set `index` added to a planned group after its run
    (`dstbench.execution.more_sets`): "d=0.5+set3", a key no planned group has."""
    return f"{key}{ADDED_SET}{index}"


def is_added_set(group_id: str) -> bool:
    """Whether a group id is a process set added after its run (`added_set_key`)."""
    return ADDED_SET in group_id.rsplit("#", 1)[0]


def new_group_id(key: str) -> str:
    return f"{key}#{secrets.token_hex(3)}"


def density_key(density: float, point: str = "", seed: int | None = None) -> str:
    """A density's group key, `d=0.1[point] seed=1` (a group's, not a case's: `CaseKey` keys cases)."""
    # As case ids do: `:g` would put 0.5 and 0.5000001 in one group.
    return f"d={density_text(density)}" + (f"[{point}]" if point else "") + seed_tag(seed)


def by_point(cases: Iterable[Case]) -> list[list[Case]]:
    """`cases` split by sweep point and seed, in the order they come (one list without a sweep or seeds)."""
    points: OrderedDict[tuple[str, int | None], list[Case]] = OrderedDict()
    for case in cases:
        points.setdefault((case.point, case.seed), []).append(case)
    return list(points.values())


def plan_groups(cases: list[Case], reference: str, *, interleave: bool) -> list[Group]:
    """The groups to time, in run order (the cases' order: point by point, densities descending).
    Within a group the reference comes first, then dense, then the others in suite order: the order
    of each round. A group never spans two sweep points or seeds."""
    if not interleave:
        return [Group(c.key, (c,)) for c in cases]
    return [group for members in by_point(cases) for group in _density_groups(members, reference)]


def _density_groups(cases: list[Case], reference: str) -> list[Group]:
    """The interleaved groups of one point's cases: one per density, dense in each."""
    point, seed = (cases[0].point, cases[0].seed) if cases else ("", None)
    dense = [c for c in cases if c.kind == "dense"]
    by_density: OrderedDict[str, list[Case]] = OrderedDict()
    for case in cases:
        if case.kind != "dense":
            by_density.setdefault(density_key(case.density, point, seed), []).append(case)
    if not by_density:
        return [Group(density_key(1.0, point, seed), tuple(dense))] if dense else []
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
    """Case keys (`Case.key`) that belong to more than one group (dense, in an interleaved plan)."""
    seen: dict[str, int] = {}
    for group in groups:
        for case in group.cases:
            seen[case.key] = seen.get(case.key, 0) + 1
    return {key for key, n in seen.items() if n > 1}


def trained_line(line: dict[str, Any] | None) -> bool:
    """Whether a line of a case that trains (`mode: accuracy` or `both`) holds its training: its
    curve, or a failure (a failed line is done, as in timing, unless `--retry-failed`). The timing
    phase of `mode: both` writes a line without a curve; its training adds one."""
    return line is not None and (line.get("status") != "ok" or isinstance(line.get("curve"), list))


def group_done(group: Group, lines: dict[str, dict[str, Any]], shared: set[str]) -> bool:
    """Whether every member has its line from this group (lines without `groups`, written before
    groups existed, count as done). `lines` and `shared` are keyed by `Case.key`."""
    for case in group.cases:
        line = lines.get(case.key)
        if line is None:
            return False
        ids = line.get("groups") or []
        if case.key in shared and ids and not any(base_key(g) == group.base for g in ids):
            return False
    return True


