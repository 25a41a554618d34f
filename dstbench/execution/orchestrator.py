"""`dstbench run SUITE`: validate, expand into cases, time them group by group, write their lines.

A run folder (`dstbench.results.run_folder`) holds `suite.yaml` (the suite as validated, defaults filled in),
`run.json` (when, where, which commit, the `--set` overrides, the suite's cases and those selected),
`results.jsonl` (one line per finished case) and `collect_env.txt` (torch's environment report).
Cases are timed in groups (`dstbench.suite.groups`, `dstbench.execution.rounds`): interleaved, the cases
compared with each other; otherwise one by one. A launcher that places cases itself (`parallel`
slots, `submitit` jobs: `schedule_groups`) hands groups back as they end, in any order; this process
writes every line either way. `--resume` times the groups that are not done (a group interrupted
half way again, whole), and only with the settings the finished ones ran with.

One process writes a run folder at a time (`RunLock`). A run ended by Ctrl-C or SIGTERM keeps its
finished lines; the cases it was running get no line (so `--resume` runs them) and are recorded in
`run.json`'s `interruptions`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import shlex
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml
from rich.console import Console

from dstbench.execution.case_setup import CaseTask
from dstbench.suite.cases import Case
from dstbench.suite.plan import (
    RESUME_MAY_CHANGE, RunPlan, cases_of, in_either, make_plan, pending_groups, pending_training, point_suite,
    resume_conflicts, run_line_key, select_cases, setup_changes,
)
from dstbench.suite.schema import SuiteConfig
from dstbench.results.coverage import record_cases
from dstbench.results.gate_metrics import unknown_metrics, unknown_text
from dstbench.measure.environment import finish_collect_env, git_state, start_collect_env
from dstbench.util.text import clip
from dstbench.execution.group_lines import failed_in, latest_lines, write_group
from dstbench.suite.groups import Group, shared_cases
from dstbench.execution.launchers.factory import make_launcher
from dstbench.execution.lifeline import Terminated
from dstbench.execution.progress import RunProgress
from dstbench.results.record import CaseResult
from dstbench.results.rejected_lines import REJECTED_FILE, set_aside_unusable
from dstbench.results.run_files import RunDirError, RunLock, load_run_meta, update_run_meta, write_run_meta
from dstbench.util.files import RUN_FILE, SUITE_FILE, make_unique_dir, output_place_problem, slug, write_atomic
from dstbench.execution.resume_machine import other_machine_lines, refusal, this_machine
from dstbench.execution.rounds import GroupRun, run_groups
from dstbench.suite.loading import SuiteError, load_suite


def new_run_dir(out: Path, suite: SuiteConfig) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return make_unique_dir(out, f"{slug(suite.name, 'suite')}-{stamp}")


def latest_run_dir(out: Path, suite: SuiteConfig) -> Path | None:
    """The newest run folder under `out` made from a suite with the same name and setup."""
    found = []
    for meta_path in out.glob(f"*/{RUN_FILE}"):
        meta = load_run_meta(meta_path.parent)
        if meta.get("suite") == suite.name and meta.get("suite_hash") == suite.setup_hash():
            found.append((meta.get("created", ""), meta_path.parent))
    return max(found)[1] if found else None


def overrides_text(overrides: dict[str, Any] | None) -> str:
    """`--set` overrides as typed: `timing.segments=10 model.depth=2`."""
    return " ".join(f"{key}={json.dumps(value)}" for key, value in (overrides or {}).items())


def resume_command(suite_path: Path, run_dir: Path, overrides: dict[str, Any] | None) -> str:
    """The command that resumes `run_dir` as it was run, its `--set` overrides replayed (quoted for
    a POSIX shell). `--device` is one of them (`device=...`)."""
    words = ["dstbench", "run", str(suite_path), "--resume", str(run_dir)]
    for key, value in (overrides or {}).items():
        words += ["--set", f"{key}={json.dumps(value)}"]
    return shlex.join(words)


def write_suite_file(run_dir: Path, suite: SuiteConfig, suite_path: Path, overrides: dict[str, Any] | None = None) -> None:
    source = f"{suite_path} with --set {overrides_text(overrides)}" if overrides else str(suite_path)
    write_atomic(
        run_dir / SUITE_FILE,
        f"# {source} as validated by dstbench, every default filled in\n"
        + yaml.safe_dump(suite.model_dump(mode="json"), sort_keys=False),
    )


def write_run_files(run_dir: Path, suite: SuiteConfig, suite_path: Path, overrides: dict[str, Any] | None = None) -> None:
    write_suite_file(run_dir, suite, suite_path, overrides)
    meta = {
        "run_id": run_dir.name,
        "suite": suite.name,
        "suite_hash": suite.setup_hash(),
        "suite_path": str(suite_path),
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "overrides": dict(overrides or {}),  # `--set` and `--device`, as given
        # What the hash is made of, so that a resume with a changed suite can name what changed.
        "setup": suite.setup_settings(),
        # A sweep's lines carry their point's hash (`dstbench.suite.sweep`): the run's own, too.
        **({"point_hashes": [point.setup_hash() for _, point in suite.points]} if suite.sweep else {}),
        **git_state(),
    }
    write_run_meta(run_dir, meta)


def record_interruption(run_dir: Path, unfinished: list[str], reason: BaseException) -> None:
    """Add to `run.json` that the run was stopped (by what, when) while `unfinished` had no line."""
    by = "SIGINT" if isinstance(reason, KeyboardInterrupt) else str(reason).removeprefix("terminated by ")
    entry = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "by": by, "unfinished": unfinished}
    update_run_meta(run_dir, lambda meta: meta.update(interruptions=[*meta.get("interruptions", []), entry]), required=False)


def find_resumed_run_dir(out: Path, suite: SuiteConfig, suite_path: Path, resume: bool | str) -> Path:
    """The run folder `--resume` continues, checked against the current suite; writes nothing."""
    run_dir = Path(resume) if isinstance(resume, str) else latest_run_dir(out, suite)
    if run_dir is None or not (run_dir / RUN_FILE).exists() or not (run_dir / SUITE_FILE).exists():
        where = run_dir if run_dir is not None else f"{out} (no run of suite {suite.name!r} with these settings)"
        raise SuiteError(str(suite_path), [("--resume", f"nothing to resume in {where}")])
    try:
        meta = load_run_meta(run_dir, required=True)  # a damaged run.json is refused, never rewritten
    except RunDirError as exc:
        raise SuiteError(str(suite_path), [("--resume", str(exc))]) from None
    recorded = meta.get("suite_hash")
    if recorded and recorded != suite.setup_hash():
        # Checked against run.json, not only the stored suite.yaml: an edited suite.yaml would
        # otherwise put cases of two setups into one folder.
        changed = setup_changes(meta.get("setup"), suite)
        what = f"changed: {', '.join(changed)}" if changed else "its run.json records no settings to name the change"
        raise SuiteError(
            str(suite_path),
            [("--resume", f"{run_dir} holds cases of suite hash {recorded} (run.json) and this suite's is "
              f"{suite.setup_hash()} ({what}); a run folder holds one suite's cases: start a new run")],
        )
    stored = load_suite(run_dir / SUITE_FILE)
    conflicts = resume_conflicts(stored, suite)
    if conflicts:
        raise SuiteError(
            str(suite_path),
            [("--resume", f"{run_dir} ran with other settings; changed: {', '.join(conflicts)}. Its finished "
              f"cases would mix with cases measured differently: start a new run, or resume with the suite in "
              f"{run_dir / SUITE_FILE}. Only {', '.join(RESUME_MAY_CHANGE)} may change, and methods, "
              "densities or seeds be added.")],
        )
    return run_dir


def resolve_run_dir(
    out: Path,
    suite: SuiteConfig,
    suite_path: Path,
    resume: bool | str | None,
    overrides: dict[str, Any] | None = None,
    lock: RunLock | None = None,
) -> Path:
    """A new run folder, or with `resume` the one to continue (checked against the current suite).

    With `lock`, the folder is locked (`RunLock.acquire` on it; `RunDirError` when another run
    writes it) before anything in it is written or read.
    """
    if not resume:
        run_dir = new_run_dir(out, suite)
        if lock is not None:
            lock.acquire(run_dir)
        write_run_files(run_dir, suite, suite_path, overrides)
        return run_dir
    run_dir = find_resumed_run_dir(out, suite, suite_path, resume)
    if lock is not None:
        try:
            lock.acquire(run_dir)
        except RunDirError as exc:  # another run writes this folder: two would run every missing case
            raise SuiteError(str(suite_path), [("--resume", str(exc))]) from None
    stored = load_suite(run_dir / SUITE_FILE)
    if stored.model_dump(mode="json") != suite.model_dump(mode="json"):
        # Added methods or densities (or new expectations): the folder's suite now describes every
        # case it will hold, and `dstbench check` uses the current expectations.
        write_suite_file(run_dir, suite, suite_path, overrides)
    record_resume(run_dir, overrides)
    return run_dir


def record_resume(run_dir: Path, overrides: dict[str, Any] | None) -> None:
    """Add this resume (when, its `--set` overrides) to run.json, and its overrides to the run's."""
    entry = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "overrides": dict(overrides or {})}

    def add(meta: dict[str, Any]) -> None:
        meta["resumes"] = [*meta.get("resumes", []), entry]
        meta["overrides"] = {**meta.get("overrides", {}), **(overrides or {})}

    update_run_meta(run_dir, add)


def run_cases(
    suite: SuiteConfig, suite_path: Path, run_dir: Path, groups: list[Group], console: Console, resume: bool = False,
    launcher: Any = None, shared: set[str] | None = None, retry_failed: bool = False, here: dict[str, Any] | None = None,
    training: list[Case] | None = None,
) -> list[CaseResult]:
    """Time the groups (one after another, or as the launcher places them: `schedule_groups`),
    reporting progress (`dstbench.execution.progress`); write each group's lines as it ends and print one
    line per case. `shared`: the cases that belong to several groups of the
    whole plan (default: of `groups`). `here`: this machine (`this_machine`), whose lines alone merge.
    `training` (`mode: both`, `dstbench.suite.plan.training_cases`): the (case, seed) pairs to train
    after every group is timed, each in a process of its own; the groups then only time."""
    launcher = launcher or make_launcher(suite.launcher)
    shared = shared_cases(groups) if shared is None else shared
    training = list(training or [])
    # The two phases, one after the other: the groups (which only time at a `mode: both` point),
    # then the trainings of `mode: both`.
    phases = [("timing", groups), ("training", [Group(c.key, (c,)) for c in training])]
    # Each case runs with its own sweep point's suite (the suite itself without a sweep).
    point_data = {case.point: point_suite(suite, case).model_dump(mode="json") for case in [*cases_of(groups), *training]}

    def task_phase(case: Case, phase: str) -> str:
        """The task's phase (`CaseTask.phase`): "timing" only at a `mode: both` point (a sweep may
        vary the mode), "" for the groups of a speed or accuracy point."""
        return phase if phase == "training" or point_data[case.point].get("mode") == "both" else ""

    # The suite's path made absolute: a case process finds `plugins:` beside it wherever it starts.
    task_path = str(suite_path.absolute())
    key = run_line_key(suite)
    results = []
    total = len({c.key for c in [*cases_of(groups), *training]})
    with RunProgress(console, suite, total_cases=total) as progress:

        def progress_for(case: Case) -> Callable[[str, int, int], None]:
            progress.case_started(case.key)
            return progress.for_case(case.key)

        written_ids: set[str] = set()
        counted: set[str] = set()  # dense is reported after each of its groups, counted once
        for phase, phase_groups in phases:
            if phase == "training" and written_ids:
                # A case whose timing failed in this run has its failure for a line: no training.
                now = latest_lines(run_dir, suite)
                phase_groups = [g for g in phase_groups if not failed_in(now.get(g.key), written_ids)]
            tasks = {c.key: CaseTask(point_data[c.point], task_path, c.to_dict(), str(run_dir), resume=resume,
                                     phase=task_phase(c, phase)) for c in cases_of(phase_groups)}
            # Closed however the loop ends: a launcher that runs cases elsewhere (jobs, slots) stops them.
            with contextlib.closing(schedule_groups(launcher, phase_groups, tasks, progress_for, suite.reference)) as timed_groups:
                for timed in timed_groups:
                    written = write_group(run_dir, suite, timed, shared, written_ids, retry_failed, here,
                                          task_phase(timed.group.cases[0], phase))
                    for result in written:
                        result_key = key({"case_id": result.case_id, "seed": result.seed})
                        progress.case_finished(result_key, result, count=result_key not in counted)
                        counted.add(result_key)
                    results += written
    return results


def schedule_groups(
    launcher: Any, groups: list[Group], tasks: dict[str, CaseTask], progress_for: Callable[[Case], Any], reference: str
) -> Iterator[GroupRun]:
    """The groups as they end: a launcher that places cases itself (several at once, or as cluster
    jobs) has `run_groups`; the others are timed one group after another (`dstbench.execution.rounds`)."""
    if launcher.places_groups:
        return launcher.run_groups(groups, tasks, progress_for, reference)
    return run_groups(launcher, groups, tasks, progress_for, reference)


def plan_run(
    suite_path: str | Path,
    *,
    out: str | Path = "runs",
    device: str | None = None,
    resume: bool | str | None = None,
    only: list[str] | None = None,
    densities: list[float] | None = None,
    overrides: dict[str, Any] | None = None,
    retry_failed: bool = False,
    allow_other_machine: bool = False,
) -> RunPlan:
    """Validate the suite (with `overrides` and `device`) and the selection, and list the cases;
    writes nothing. Raises `SuiteError` when any of it is unusable, or when the run to resume holds
    lines timed on another machine (unless `allow_other_machine`: their groups are then planned
    again: `dstbench.execution.resume_machine`)."""
    suite_path = Path(suite_path)
    overrides = dict(overrides or {})
    if device:
        overrides["device"] = device
    suite = load_suite(suite_path, overrides, recorded=False)  # even a run folder's suite.yaml: `run` needs its methods
    select_cases(suite, suite_path, only, densities)  # the selection's errors come first
    unknown = unknown_metrics(list(suite.expect))  # a tracker's field: known once the plugins are imported
    if unknown:
        raise SuiteError(str(suite_path), [("expect", unknown_text(unknown).removeprefix("expect: "))])
    out = Path(out)
    blocking = next((p for p in (out, *out.parents) if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise SuiteError(str(suite_path), [("--out", f"{blocking} is a file, not a folder for run folders")])
    nested = output_place_problem(out, "--out")  # a run folder never holds another
    if nested:
        raise SuiteError(str(suite_path), [("--out", nested.removeprefix("--out: "))])
    run_dir = find_resumed_run_dir(Path(out), suite, suite_path, resume) if resume else None
    launcher = make_launcher(suite.launcher)
    # What only this host can say (GPUs and cores for `parallel`, submitit and Slurm for jobs).
    problems = launcher.preflight(suite)
    if problems:
        raise SuiteError(str(suite_path), problems)
    lines = latest_lines(run_dir, suite, ok_only=retry_failed) if run_dir else {}
    foreign = other_machine_lines(lines, this_machine(suite.device)) if run_dir else {}
    if foreign and not allow_other_machine:
        raise SuiteError(str(suite_path), [("--resume", refusal(run_dir, foreign))])
    return make_plan(
        suite, suite_path, overrides, only=only, densities=densities, can_interleave=launcher.interleaves,
        launcher=launcher, run_dir=run_dir, lines={k: v for k, v in lines.items() if k not in foreign},
    )


def run_suite(
    suite_path: str | Path,
    *,
    out: str | Path = "runs",
    device: str | None = None,
    resume: bool | str | None = None,
    only: list[str] | None = None,
    densities: list[float] | None = None,
    overrides: dict[str, Any] | None = None,
    console: Console | None = None,
    retry_failed: bool = False,
    allow_other_machine: bool = False,
) -> Path:
    """Run a suite (or the missing cases of an earlier run) and return its run folder.

    `overrides` set suite keys before validation (dotted keys, as `dstbench run --set`); they are
    recorded in run.json and named in the stored suite.yaml. Raises `SuiteError` before anything
    is written when the suite, the selection or the run folder to resume is unusable.
    """
    console = console or Console(stderr=True, soft_wrap=True)
    plan = plan_run(
        suite_path, out=out, device=device, resume=resume, only=only, densities=densities, overrides=overrides,
        retry_failed=retry_failed, allow_other_machine=allow_other_machine,
    )
    suite, suite_path, cases = plan.suite, plan.suite_path, plan.cases
    lock = RunLock()
    try:
        run_dir = resolve_run_dir(Path(out), suite, suite_path, resume, plan.overrides, lock)
        # Which cases the suite has and which this run was asked for: reports and `check` tell an
        # unfinished run from one that selected fewer cases (dstbench.results.coverage).
        record_cases(run_dir, plan.all_cases, [c.key for c in cases])
        set_aside = set_aside_unusable(run_dir) if resume else []
        if set_aside:  # their cases count as not run, so this resume runs them again
            console.print(f"set aside {len(set_aside)} unusable line(s) of results.jsonl (line {clip(', '.join(set_aside), 300)}) "
                          f"in {run_dir / REJECTED_FILE}; their cases run again", highlight=False, markup=False)
        shared = plan.shared
        here = this_machine(suite.device)
        kept = latest_lines(run_dir, suite, ok_only=retry_failed)  # again, under the lock
        foreign = other_machine_lines(kept, here)
        if foreign and not allow_other_machine:
            raise SuiteError(str(suite_path), [("--resume", refusal(run_dir, foreign))])
        if foreign:
            console.print(f"timing again here every group holding a line from another machine: {', '.join(sorted(foreign))}")
        usable = {k: v for k, v in kept.items() if k not in foreign}
        todo_groups = pending_groups(plan.groups, usable, shared)
        todo_training = pending_training(plan.training, usable)
        todo = in_either(cases, todo_groups, todo_training)
        console.print(f"run folder: {run_dir}  ({len(todo)} of {len(cases)} cases to run)")
        collector = start_collect_env(run_dir)
        try:
            run_cases(
                suite, suite_path, run_dir, todo_groups, console, resume=bool(resume), launcher=plan.launcher, shared=shared,
                retry_failed=retry_failed, here=here, training=todo_training,
            )
        except (KeyboardInterrupt, Terminated) as stop:
            finish_collect_env(collector, timeout_s=0)  # interrupted: stop it, never wait
            # The cases without a line were running or not started: none is half-recorded, and
            # `--resume` runs them. Which were left is noted in run.json and said here.
            now = latest_lines(run_dir, suite)
            unfinished = [c.key for c in in_either(cases, pending_groups(todo_groups, now, shared), pending_training(todo_training, now))]
            try:
                record_interruption(run_dir, unfinished, stop)
            except OSError:
                pass  # a full disk must not hide why the run stopped; the message below says it
            console.print(
                f"stopped ({'Ctrl-C' if isinstance(stop, KeyboardInterrupt) else stop}): {len(cases) - len(unfinished)} of "
                f"{len(cases)} cases have a line in {run_dir / 'results.jsonl'}; not run: {clip(', '.join(unfinished), 300)}. "
                f"Run them with: {resume_command(suite_path, run_dir, load_run_meta(run_dir).get('overrides', plan.overrides))}",
                highlight=False, markup=False,
            )
            raise
        except BaseException:
            finish_collect_env(collector, timeout_s=0)
            raise
        finish_collect_env(collector)
    finally:
        lock.release()
    return run_dir
