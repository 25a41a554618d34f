"""More process sets for some cases of a finished run: `dstbench run SUITE --resume RUN
--more-processes N` and `dstbench compare --decide` (`dstbench.gates.decide`).

A run's interval for a case shrinks with its process sets (`dstbench.results.intervals`: one unit per
group and set). An undecided case can be given more of them without timing the rest again: each
added set times the case, interleaved as usual, with its density group's references (dense and
the suite's `reference`), in fresh processes, into the same run folder. Its rounds repeat those of
one of the run's own sets (added set k repeats set k mod `timing.processes`: it trains untimed up to
that set's first round), so round r covers the same training steps as before. Each added set is a
group of its own (`d=0.5+set3#...`: a key no planned group has), so its samples join the cases'
lines (`merge_shared`) and never replace the run's; run.json lists every addition
(`added_process_sets`: when, which cases, which groups).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from pathlib import Path
from typing import Any, Callable

from dstbench.execution.case_setup import CaseTask
from dstbench.execution.group_lines import latest_lines, write_group
from dstbench.execution.launchers.base import GroupRun
from dstbench.execution.launchers.factory import make_launcher
from dstbench.execution.resume_machine import other_machine_lines, this_machine
from dstbench.execution.rounds import time_process_set, process_shares
from dstbench.results.record import iter_results
from dstbench.results.run_files import RunLock, load_run_meta, update_run_meta
from dstbench.suite.cases import Case
from dstbench.suite.groups import Group, added_set_key, new_group_id, plan_groups
from dstbench.suite.loading import SuiteError, load_suite
from dstbench.suite.plan import expand_cases, point_suite, run_line_key
from dstbench.util.files import SUITE_FILE

ADDED_KEY = "added_process_sets"


@dataclasses.dataclass
class AddedSet:
    """One added process set of one group: its id, its cases and how long it took."""

    group_id: str
    cases: list[str]
    wall_s: float
    failed: list[str]  # cases whose line is no longer ok after it


def timing_wall_s(run_dir: Path) -> float | None:
    """How long the run took, from its run.json's `created` to its last line's end (its cases'
    `started_at` + `duration_s`), added process sets left out; None where the folder does not say."""
    meta = load_run_meta(run_dir)
    if isinstance(meta.get("timing_wall_s"), (int, float)):  # kept by the first addition: merged lines end later
        return float(meta["timing_wall_s"])
    try:
        created = dt.datetime.fromisoformat(str(meta["created"]))
        first_added = min((dt.datetime.fromisoformat(e["at"]) for e in meta.get(ADDED_KEY) or []), default=None)
        ends = [dt.datetime.fromisoformat(str(line["started_at"])) + dt.timedelta(seconds=float(line["duration_s"]))
                for line in iter_results(run_dir) if line.get("started_at") and line.get("duration_s") is not None]
    except (KeyError, TypeError, ValueError):
        return None
    ends = [end for end in ends if first_added is None or end <= first_added]
    return max(1.0, (max(ends) - created).total_seconds()) if ends else None


def added_sets(run_dir: Path) -> int:
    """How many process sets were added to the run so far (over every addition)."""
    return sum(len(entry.get("groups") or []) for entry in load_run_meta(run_dir).get(ADDED_KEY) or [])


def groups_for(run_dir: Path, suite: Any, lines: dict[str, dict[str, Any]], case_ids: list[str]) -> list[Group]:
    """For each density group holding one of `case_ids` (case keys, or case ids: every timed seed
    of theirs): those cases with the group's references
    (dense, the suite's reference), in the group's order; `SuiteError` for a case the run has no
    ok line of, or a run that was not timed interleaved. `suite`, `lines`: the run's, as read."""
    if not suite.timing.interleave or suite.mode == "accuracy":
        raise SuiteError(str(run_dir / SUITE_FILE), [("--more-processes", "needs a timed run (mode speed or both) with "
                                                       "interleaved timing (timing.interleave: true)")])
    key = run_line_key(suite)
    ok = {key(line) for line in lines.values() if line.get("status") == "ok"}
    planned = [c for c in expand_cases(suite) if c.timed]
    wanted = {c.key for c in planned if c.key in case_ids or c.case_id in case_ids}  # a case id: its timed seeds
    unknown = [i for i in case_ids if not any(i in (c.key, c.case_id) and c.key in ok for c in planned)]
    if unknown:
        raise SuiteError(str(run_dir), [("--more-processes", f"no ok timed line to add process sets to: {', '.join(unknown)}")])
    groups = []
    for group in plan_groups(planned, suite.reference, interleave=True):
        chosen = {c.key for c in group.cases if c.key in wanted}
        if not chosen:
            continue
        references = {c.key for c in group.cases if c.kind == "dense" or c.method == suite.reference}
        members = tuple(c for c in group.cases if c.key in chosen | references and c.key in ok)
        groups.append(Group(group.key, members))
    return groups


def add_process_sets(
    run_dir: Path, case_ids: list[str], sets: int, *, say: Callable[[str], None] = lambda text: None,
    launcher: Any = None, budget_s: float | None = None, by: str = "dstbench run --more-processes",
) -> list[AddedSet]:
    """Time `sets` more process sets of each group holding one of `case_ids` (see the module
    docstring) and write them into `run_dir`; with `budget_s`, stop before a set that the last
    one's time says would not fit in what is left. Returns the sets timed."""
    suite = load_suite(run_dir / SUITE_FILE, recorded=False)  # about to run: its methods must be here
    launcher = launcher or make_launcher(suite.launcher)
    if not launcher.interleaves:
        raise SuiteError(str(run_dir / SUITE_FILE), [("--more-processes", f"launcher {suite.launcher.name} does not interleave")])
    lines = latest_lines(run_dir, suite)
    groups = groups_for(run_dir, suite, lines, case_ids)
    here = this_machine(suite.device)
    foreign = other_machine_lines({k: lines[k] for g in groups for k in (c.key for c in g.cases)}, here)
    if foreign:
        raise SuiteError(str(run_dir), [("--more-processes", f"lines timed on another machine ({', '.join(sorted(foreign))}): "
                                         "add process sets on the machine that timed the run")])
    shares = process_shares(suite.timing.segments, suite.timing.processes)
    lock = RunLock()
    lock.acquire(run_dir)
    wall = timing_wall_s(run_dir)  # before any line ends later
    added: list[AddedSet] = []
    started = time.monotonic()
    try:
        index = suite.timing.processes + added_sets(run_dir)  # process indices the run has not used
        for _ in range(sets):
            for group in groups:
                last = added[-1].wall_s if added else 0.0
                if budget_s is not None and added and time.monotonic() - started + last > budget_s:
                    return added
                added.append(_time_one_set(run_dir, suite, group, index, shares[index % len(shares)], launcher, here, say))
            index += 1
    finally:
        if added:
            _record(run_dir, added, by, wall)
        lock.release()
    return added


def _time_one_set(
    run_dir: Path, suite: Any, group: Group, index: int, share: tuple[int, int], launcher: Any, here: dict[str, Any],
    say: Callable[[str], None],
) -> AddedSet:
    first_round, rounds = share
    extra = Group(added_set_key(group.key, index), group.cases)
    group_id = new_group_id(extra.key)
    # The suite file the run came from, where it still is: a case process finds `plugins:` beside it.
    source = Path(str(load_run_meta(run_dir).get("suite_path") or ""))
    path = str((source if source.name and source.is_file() else run_dir / SUITE_FILE).absolute())
    tasks = [
        CaseTask(point_suite(suite, case).model_dump(mode="json"), path, case.to_dict(), str(run_dir), process=index,
                 first_round=first_round, rounds=rounds, extras=False)
        for case in extra.cases
    ]
    began = time.monotonic()
    say(f"process set {index} of {', '.join(c.case_id for c in extra.cases)} (rounds {first_round}-{first_round + rounds - 1})")
    timed = time_process_set(launcher, extra, group_id, tasks, lambda case: (lambda stage, done, total: None))
    assert timed is not None  # on the CPU a set always fits; on CUDA the group fitted when the run timed it
    for result in timed.results:
        result.groups = [group_id]
    written = write_group(run_dir, suite, GroupRun(extra, group_id, timed.results), {c.key for c in extra.cases}, set(), here=here)
    failed = [r.case_id for r in written if r.status != "ok"]
    return AddedSet(group_id, [c.case_id for c in extra.cases], round(time.monotonic() - began, 1), failed)


def _record(run_dir: Path, added: list[AddedSet], by: str, wall: float | None) -> None:
    entry = {
        "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "by": by,
        "cases": sorted({c for a in added for c in a.cases}), "groups": [a.group_id for a in added],
        "wall_s": [a.wall_s for a in added],
    }

    def add(meta: dict[str, Any]) -> None:
        if wall is not None:
            meta.setdefault("timing_wall_s", round(wall, 1))
        meta[ADDED_KEY] = [*meta.get(ADDED_KEY, []), entry]

    update_run_meta(run_dir, add)


def selected_cases(run_dir: Path, only: list[str] | None, densities: list[float] | None) -> list[str]:
    """The case ids of `--only` / `--density` among the run's ok lines, its references left out
    (they come with every added set)."""
    suite = load_suite(run_dir / SUITE_FILE)
    cases: list[Case] = expand_cases(suite, only, densities)
    return [c.key for c in cases if c.kind != "dense" and c.method != suite.reference]
