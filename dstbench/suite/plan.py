"""The plan of a run: which cases a suite has, which were selected, the groups they are timed in,
which cases several groups share, and, given the lines a run folder already holds, which groups are
still to time. Computed once from the suite, the selection and the resume state; reads no file.

A suite with a sweep (`dstbench.suite.sweep`) has its cases at every point: point by point in the
sweep's order, each point's cases in the usual order, named with the point (`Case.sweep`), timed in
groups of their own point (`point_suite` gives the suite a case runs with).

A `mode: both` run has two phases. The timing phase is planned exactly as `mode: speed` would plan
the timed cases (the first seed's, every seed's with `timing.per_seed`): each density's cases with
dense in interleaved rounds. The training phase trains every (case, seed) once, each in a process
of its own (`training_cases`; dense once per seed, not once per group). A (case, seed) is trained
when its line holds a curve (`dstbench.suite.groups.trained_line`).

The execution layer (`dstbench.execution.orchestrator`) loads the suite and the run folder, asks
the launcher what it can do, and hands both here (`make_plan`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any, Callable

from dstbench.suite.cases import Case, CaseKey, line_key
from dstbench.suite.groups import Group, by_point, group_done, plan_groups, shared_cases, trained_line
from dstbench.suite.loading import SuiteError
from dstbench.suite.schema import SuiteConfig
from dstbench.suite.sweep import sweep_values


# Suite keys that may change between a run and its --resume: none of them changes how a finished
# case was measured. Methods, densities and seeds may also be added (never removed or changed).
RESUME_MAY_CHANGE = ("description", "expect", "reference")


# Where and when a cluster job runs, not how its case is measured: a resumed run may move to
# another partition or account, or get a longer time limit.
RESUME_MAY_CHANGE_LAUNCHER = ("partition", "account", "qos", "constraint", "array_parallelism", "timeout_min", "sbatch", "setup")


def expand_cases(suite: SuiteConfig, only: list[str] | None = None, densities: list[float] | None = None) -> list[Case]:
    """Cases in run order: with `seeds:` seed by seed (so a run stopped half way has whole seeds),
    in each point by point of the sweep (one point without one), and within each density by
    density, methods in suite order within each. A later seed of a `mode: both` suite without
    `timing.per_seed` is not timed (`Case.timed`).

    `only` keeps the listed method labels; `densities` keeps the listed densities (dense is kept
    whenever it is selected, since it has no density of its own). Every point has the same cases:
    a sweep cannot change the methods or densities (`dstbench.suite.sweep.FIXED_KEYS`).
    """
    cases: list[Case] = []
    for spec in suite.methods:
        if only and spec.key not in only:
            continue
        kind = suite.method_kind(spec)
        wanted = suite.method_densities(spec)  # dense: 1.0; else the method's own or the suite's
        for density in wanted:
            if densities and kind != "dense" and density not in densities:
                continue
            cases.append(Case(spec.key, spec.name, kind, density, dict(spec.params)))
    # Dense first, then by descending density, so a long run has its baselines early.
    cases = sorted(cases, key=lambda c: (c.kind != "dense", -c.density))
    points = sweep_values(dict(suite.sweep), suite.sweep_mode)
    if points:
        cases = [dataclasses.replace(case, sweep=dict(values)) for values in points for case in cases]
    if suite.seeds is None:
        return cases
    first = suite.seeds[0]
    return [
        dataclasses.replace(case, seed=seed, timed=seed == first or suite.timing.per_seed)
        for seed in suite.seeds for case in cases
    ]


def run_line_key(suite: SuiteConfig) -> Callable[[dict[str, Any]], CaseKey]:
    """How a run of `suite` keys its folder's lines, as its cases are keyed (`Case.key`): `line_key`
    by case id, and with `seeds:` by seed too, a line without one (written before lines named their
    seed) counting as the suite's first seed."""
    return functools.partial(line_key, seeded=suite.seeds is not None, unseeded_as=suite.seed)


def point_suite(suite: SuiteConfig, case: Case) -> SuiteConfig:
    """The suite `case` runs with: its sweep point's (as validated, `SuiteConfig.points`), or
    `suite` itself for a case of a suite without a sweep."""
    if case.sweep is None:
        return suite
    for values, point in suite.points:
        if values == case.sweep:
            return point
    raise KeyError(f"{case.case_id}: no such point in the sweep of suite {suite.name!r}")


def check_selection(suite: SuiteConfig, suite_path: Path, only: list[str] | None, densities: list[float] | None) -> None:
    """`--only` and `--density` must name what the suite has (a typo would silently run nothing)."""
    problems = []
    known = [m.key for m in suite.methods]
    unknown = sorted(set(only or ()) - set(known))
    if unknown:
        problems.append(("--only", f"not in the suite: {unknown} (suite has: {', '.join(sorted(known))})"))
    strays = [d for d in densities or () if not any(math.isclose(d, s) for s in suite.densities)]
    if strays:
        allowed = ", ".join(f"{d:g}" for d in suite.densities)
        problems.append(("--density", f"not in the suite: {', '.join(f'{d:g}' for d in strays)} (suite has: {allowed})"))
    if problems:
        raise SuiteError(str(suite_path), problems)


def select_cases(suite: SuiteConfig, suite_path: Path, only: list[str] | None, densities: list[float] | None) -> list[Case]:
    """The selected cases, in run order; `SuiteError` when the selection is unusable."""
    check_selection(suite, suite_path, only, densities)
    cases = expand_cases(suite, only, densities)
    if not cases:
        raise SuiteError(str(suite_path), [("", "the selection leaves no case to run")])
    return cases


@dataclasses.dataclass
class RunPlan:
    """What `dstbench run` would do: the suite as validated, every case of it, the selected ones,
    the run folder to resume (None: a new one), the selected cases it still lacks (in either phase),
    the launcher, the groups the selected cases are timed in and, in `mode: both`, the (case, seed)
    pairs its training phase trains (`training`) and those still untrained (`todo_training`)."""

    suite: SuiteConfig
    suite_path: Path
    overrides: dict[str, Any]
    all_cases: list[Case]
    cases: list[Case]
    run_dir: Path | None
    todo: list[Case]
    launcher: Any
    groups: list[Group]
    shared: set[str]  # the cases timed in several groups of the whole suite (dense)
    training: list[Case] = dataclasses.field(default_factory=list)
    todo_training: list[Case] = dataclasses.field(default_factory=list)
    todo_groups: list[Group] = dataclasses.field(default_factory=list)  # the groups still to time


def timing_groups(suite: SuiteConfig, cases: list[Case], *, can_interleave: bool) -> list[Group]:
    """The groups to time (`dstbench.suite.groups`): interleaved in speed mode and in the timing
    phase of `mode: both` when the suite (at a sweep point: the point's suite) asks for it and the
    launcher can hold live cases side by side. A `both` point's untimed cases (later seeds without
    `timing.per_seed`) are in no group: they only train (`training_cases`); an `accuracy` point's
    cases are each a group of one, which trains."""
    groups = []
    for members in by_point(cases):
        point = point_suite(suite, members[0])
        if point.mode == "both":
            members = [c for c in members if c.timed]
        interleave = point.timing.interleave and point.mode in ("speed", "both") and can_interleave
        groups += plan_groups(members, suite.reference, interleave=interleave)
    return groups


def training_cases(suite: SuiteConfig, cases: list[Case]) -> list[Case]:
    """The training phase of `mode: both` (at a sweep point: the point's mode): every (case, seed)
    once, in run order, as a case that trains without timed segments (`Case.timed` False). Empty
    for a suite in speed or accuracy mode."""
    return [dataclasses.replace(c, timed=False) for c in cases if point_suite(suite, c).mode == "both"]


def pending_training(cases: list[Case], lines: dict[str, dict[str, Any]]) -> list[Case]:
    """The training cases whose line holds no training yet (`trained_line`), given the run folder's
    `lines` (by `run_line_key`)."""
    return [c for c in cases if not trained_line(lines.get(c.key))]


def make_plan(
    suite: SuiteConfig,
    suite_path: Path,
    overrides: dict[str, Any],
    *,
    only: list[str] | None,
    densities: list[float] | None,
    can_interleave: bool,
    launcher: Any,
    run_dir: Path | None,
    lines: dict[str, dict[str, Any]],
) -> RunPlan:
    """The plan for `suite` with this selection, for a launcher that can (or cannot) interleave,
    resuming a run folder that holds `lines` (by `run_line_key`; empty for a new run). Raises `SuiteError` when the
    selection names what the suite lacks or leaves nothing to run."""
    cases = select_cases(suite, suite_path, only, densities)
    groups = timing_groups(suite, cases, can_interleave=can_interleave)
    all_cases = expand_cases(suite)
    # Shared across the whole suite, not the selection: with one density selected dense sits in one
    # group, yet its line holds the other densities' segments too (`--resume --density`).
    shared = shared_cases(timing_groups(suite, all_cases, can_interleave=can_interleave))
    training = training_cases(suite, cases)
    todo_training = pending_training(training, lines)
    todo_groups = pending_groups(groups, lines, shared)
    todo = in_either(cases, todo_groups, todo_training)
    return RunPlan(
        suite, suite_path, overrides, all_cases, cases, run_dir, todo, launcher, groups, shared, training, todo_training, todo_groups,
    )



def pending_groups(groups: list[Group], lines: dict[str, dict[str, Any]], shared: set[str] | None = None) -> list[Group]:
    """The groups whose cases still need timing, given the run folder's `lines` (the last line of
    each case key, `run_line_key`): a group not done is timed again whole (dstbench.suite.groups), and its cases'
    lines are then replaced. `shared`: as `RunPlan.shared` (default: the cases shared by `groups`)."""
    shared = shared_cases(groups) if shared is None else shared
    return [g for g in groups if not group_done(g, lines, shared)]


def in_either(cases: list[Case], groups: list[Group], training: list[Case]) -> list[Case]:
    """The `cases` to time in `groups` or to train (`training`), in run order."""
    keys = {c.key for c in cases_of(groups)} | {c.key for c in training}
    return [c for c in cases if c.key in keys]


def cases_of(groups: list[Group]) -> list[Case]:
    """The distinct cases of `groups`, in order (dense belongs to several)."""
    return list({c.key: c for g in groups for c in g.cases}.values())


_ABSENT = object()


def _diff(old: Any, new: Any, key: str) -> list[str]:
    """Dotted keys whose values differ between two suite dumps."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new))
        return [k for sub in keys for k in _diff(old.get(sub, _ABSENT), new.get(sub, _ABSENT), f"{key}.{sub}" if key else sub)]
    return [] if old == new else [key]


def setup_changes(recorded: Any, suite: SuiteConfig) -> list[str]:
    """The dotted keys of `suite`'s setup (`SuiteConfig.setup_settings`) that differ from the one
    a run recorded in its run.json (`setup`); empty when none was recorded."""
    return _diff(recorded, suite.setup_settings(), "") if isinstance(recorded, dict) else []


def resume_conflicts(stored: SuiteConfig, current: SuiteConfig) -> list[str]:
    """Why `current` may not add cases to a run made with `stored`: each entry names a setting whose
    change would leave the run folder with cases measured under different settings. Empty when only
    `RESUME_MAY_CHANGE` keys changed and methods or densities were only added."""
    old, new = stored.model_dump(mode="json"), current.model_dump(mode="json")
    fixed = set(old) | set(new)
    fixed -= {*RESUME_MAY_CHANGE, "methods", "densities", "seed", "seeds"}
    for dump in (old, new):  # a target is read from the curves afterwards: it may change
        if isinstance(dump.get("accuracy"), dict):
            dump["accuracy"] = {k: v for k, v in dump["accuracy"].items() if k not in ("target_top1", "target_sweep")}
    conflicts = [k for key in sorted(fixed) for k in _diff(old.get(key, _ABSENT), new.get(key, _ABSENT), key)]
    free = {f"launcher.{k}" for k in RESUME_MAY_CHANGE_LAUNCHER}
    conflicts = [k for k in conflicts if not any(k == f or k.startswith(f + ".") for f in free)]
    old_specs = {m.key: m.model_dump(mode="json") for m in stored.methods}
    new_specs = {m.key: m.model_dump(mode="json") for m in current.methods}
    for key, spec in old_specs.items():
        if key not in new_specs:
            conflicts.append(f"methods: {key} removed (select methods with --only instead)")
        else:
            conflicts += [f"methods[{key}].{k}" for k in _diff(spec, new_specs[key], "")]
    for density in stored.densities:
        if not any(math.isclose(density, d) for d in current.densities):
            conflicts.append(f"densities: {density:g} removed (select densities with --density instead)")
    # Seeds may be added (the first one is the suite's `seed`, which the suite hash checks already).
    old_seeds, new_seeds = stored.run_seeds, current.run_seeds
    if old_seeds[0] != new_seeds[0]:
        conflicts.append(f"seeds: the first seed is {new_seeds[0]}, the run's was {old_seeds[0]}")
    removed = [seed for seed in old_seeds if seed not in new_seeds]
    if removed:
        conflicts.append(f"seeds: {', '.join(map(str, removed))} removed")
    return conflicts
