"""`dstbench run SUITE`: validate, expand into cases, time them group by group, write their lines.

A run folder (`dstbench.rundir`) holds `suite.yaml` (the suite as validated, defaults filled in),
`run.json` (when, where, which commit) and `results.jsonl` (one line per finished case). Cases are
timed in groups (`dstbench.groups`, `dstbench.scheduler`): interleaved, the cases compared with each
other; otherwise one by one. `--resume` times the groups that are not done (a group interrupted
half way again, whole), and only with the settings the finished ones ran with.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any, Callable

import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from dstbench.cases import Case, expand_cases
from dstbench.config import SuiteConfig, SuiteError, load_suite
from dstbench.env import git_state
from dstbench.fmt import last_line
from dstbench.groups import Group, base_key, group_done, merge_shared, plan_groups, shared_cases, strip_group
from dstbench.launchers import make_launcher
from dstbench.results import CaseResult, append_result, iter_results, replace_results
from dstbench.rundir import RUN_FILE, SUITE_FILE, load_run_meta, slug
from dstbench.build import CaseTask
from dstbench.scheduler import GroupRun, run_groups

# Suite keys that may change between a run and its --resume: none of them changes how a finished
# case was measured. Methods and densities may also be added (never removed or changed).
RESUME_MAY_CHANGE = ("description", "expect", "reference")


def new_run_dir(out: Path, suite: SuiteConfig) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = f"{slug(suite.name, 'suite')}-{stamp}"
    run_dir = out / base
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = out / f"{base}-{suffix}"
    run_dir.mkdir(parents=True)
    return run_dir


def latest_run_dir(out: Path, suite: SuiteConfig) -> Path | None:
    """The newest run folder under `out` made from a suite with the same name and setup."""
    found = []
    for meta_path in out.glob(f"*/{RUN_FILE}"):
        meta = load_run_meta(meta_path.parent)
        if meta.get("suite") == suite.name and meta.get("suite_hash") == suite.setup_hash():
            found.append((meta.get("created", ""), meta_path.parent))
    return max(found)[1] if found else None


def write_suite_file(run_dir: Path, suite: SuiteConfig, suite_path: Path) -> None:
    (run_dir / SUITE_FILE).write_text(
        f"# {suite_path} as validated by dstbench, every default filled in\n"
        + yaml.safe_dump(suite.model_dump(mode="json"), sort_keys=False)
    )


def write_run_files(run_dir: Path, suite: SuiteConfig, suite_path: Path) -> None:
    write_suite_file(run_dir, suite, suite_path)
    meta = {
        "suite": suite.name,
        "suite_hash": suite.setup_hash(),
        "suite_path": str(suite_path),
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **git_state(),
    }
    (run_dir / RUN_FILE).write_text(json.dumps(meta, indent=2) + "\n")


_ABSENT = object()


def _diff(old: Any, new: Any, key: str) -> list[str]:
    """Dotted keys whose values differ between two suite dumps."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new))
        return [k for sub in keys for k in _diff(old.get(sub, _ABSENT), new.get(sub, _ABSENT), f"{key}.{sub}" if key else sub)]
    return [] if old == new else [key]


def resume_conflicts(stored: SuiteConfig, current: SuiteConfig) -> list[str]:
    """Why `current` may not add cases to a run made with `stored`: each entry names a setting whose
    change would leave the run folder with cases measured under different settings. Empty when only
    `RESUME_MAY_CHANGE` keys changed and methods or densities were only added."""
    old, new = stored.model_dump(mode="json"), current.model_dump(mode="json")
    fixed = set(old) | set(new)
    fixed -= {*RESUME_MAY_CHANGE, "methods", "densities"}
    conflicts = [k for key in sorted(fixed) for k in _diff(old.get(key, _ABSENT), new.get(key, _ABSENT), key)]
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
    return conflicts


def resolve_run_dir(out: Path, suite: SuiteConfig, suite_path: Path, resume: bool | str | None) -> Path:
    """A new run folder, or with `resume` the one to continue (checked against the current suite)."""
    if not resume:
        run_dir = new_run_dir(out, suite)
        write_run_files(run_dir, suite, suite_path)
        return run_dir
    run_dir = Path(resume) if isinstance(resume, str) else latest_run_dir(out, suite)
    if run_dir is None or not (run_dir / RUN_FILE).exists() or not (run_dir / SUITE_FILE).exists():
        where = run_dir if run_dir is not None else f"{out} (no run of suite {suite.name!r} with these settings)"
        raise SuiteError(str(suite_path), [("--resume", f"nothing to resume in {where}")])
    stored = load_suite(run_dir / SUITE_FILE)
    conflicts = resume_conflicts(stored, suite)
    if conflicts:
        raise SuiteError(
            str(suite_path),
            [("--resume", f"{run_dir} ran with other settings; changed: {', '.join(conflicts)}. Its finished "
              f"cases would mix with cases measured differently: start a new run, or resume with the suite in "
              f"{run_dir / SUITE_FILE}. Only {', '.join(RESUME_MAY_CHANGE)} may change, and methods or "
              "densities be added.")],
        )
    if stored.model_dump(mode="json") != suite.model_dump(mode="json"):
        # Added methods or densities (or new expectations): the folder's suite now describes every
        # case it will hold, and `dstbench check` uses the current expectations.
        write_suite_file(run_dir, suite, suite_path)
    return run_dir


def _status_line(result: CaseResult) -> str:
    if result.status != "ok":
        return f"[red]{result.status}[/red] {escape(last_line(result.error))}"
    parts = []
    if result.median_ms is not None:
        parts.append(f"median {result.median_ms:.1f} ms/segment")
    if result.top1 is not None:
        parts.append(f"top1 {result.top1:.3f}")
    if result.density_achieved is not None:
        parts.append(f"density {result.density_achieved:.3f}")
    warn = "".join(f"\n  [yellow]warning[/yellow] {escape(w)}" for w in result.warnings)
    return "[green]ok[/green] " + ", ".join(parts) + warn


def _latest_lines(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The last line of each case in the run folder (a later line for a case wins, as in reports)."""
    return {str(line.get("case_id")): line for line in iter_results(run_dir)}


def plan(suite: SuiteConfig, cases: list[Case], launcher: Any) -> list[Group]:
    """The groups to time (`dstbench.groups`): interleaved in speed mode when the launcher can."""
    interleave = suite.timing.interleave and suite.mode == "speed" and hasattr(launcher, "open")
    return plan_groups(cases, suite.reference, interleave=interleave)


def write_group(run_dir: Path, timed: GroupRun, shared: set[str], written: set[str]) -> list[CaseResult]:
    """A finished group's lines. A case timed in several groups (dense; the reference of pairs split
    from a group) merges with its line from the other groups, less what an earlier, interrupted
    timing of this group left; a group timed again replaces its old lines; other lines are
    appended. `written`: the ids of the groups written so far by this run (updated)."""
    lines = _latest_lines(run_dir)
    results = []
    for result in timed.results:
        old = lines.get(result.case_id)
        if old is not None:
            earlier = [g for g in old.get("groups") or [] if g in written]
            if result.case_id in shared or earlier:
                if not any(base_key(g) == timed.group.base for g in earlier):
                    old = strip_group(old, timed.group.base)
                result = merge_shared(old, result)
        results.append(result)
    written.update([timed.group_id, *(g for r in results for g in r.groups)])
    replaced = {r.case_id for r in results} & set(lines)
    if replaced:
        replace_results(run_dir, replaced, results)
    else:
        for result in results:
            append_result(run_dir, result)
    return results


def run_cases(
    suite: SuiteConfig, suite_path: Path, run_dir: Path, groups: list[Group], console: Console, resume: bool = False,
    launcher: Any = None, shared: set[str] | None = None,
) -> list[CaseResult]:
    """Time the groups one after another with a live progress line; write each group's lines as it
    ends and print one line per case. `shared`: the cases that belong to several groups of the
    whole plan (default: of `groups`)."""
    launcher = launcher or make_launcher(suite.launcher)
    suite_data = suite.model_dump(mode="json")
    shared = shared_cases(groups) if shared is None else shared
    cases = list({c.case_id: c for g in groups for c in g.cases}.values())
    tasks = {c.case_id: CaseTask(suite_data, str(suite_path), c.to_dict(), str(run_dir), resume=resume) for c in cases}
    index = {c.case_id: i for i, c in enumerate(cases, 1)}
    results = []
    columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[detail]}"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        overall = progress.add_task("cases", total=len(cases), detail="")

        def progress_for(case: Case) -> Callable[[str, int, int], None]:
            label = f"case {index[case.case_id]}/{len(cases)} {case.case_id}"
            progress.update(overall, description=label, detail="starting")

            def on_progress(stage: str, done: int, total: int) -> None:
                progress.update(overall, description=label, detail=f"{stage} {done}/{total}")

            return on_progress

        written_ids: set[str] = set()
        counted: set[str] = set()  # dense is printed after each of its groups, counted once
        for timed in run_groups(launcher, groups, tasks, progress_for, suite.reference):
            written = write_group(run_dir, timed, shared, written_ids)
            for result in written:
                if result.case_id not in counted:
                    counted.add(result.case_id)
                    progress.advance(overall)
                label = f"case {index.get(result.case_id, '?')}/{len(cases)} {result.case_id}"
                console.print(f"{escape(label)}: {_status_line(result)}")
            results += written
    return results


def _check_selection(suite: SuiteConfig, suite_path: Path, only: list[str] | None, densities: list[float] | None) -> None:
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
) -> Path:
    """Run a suite (or the missing cases of an earlier run) and return its run folder.

    Raises `SuiteError` before anything is written when the suite, the selection or the run folder
    to resume is unusable.
    """
    console = console or Console(stderr=True, soft_wrap=True)
    suite_path = Path(suite_path)
    overrides = dict(overrides or {})
    if device:
        overrides["device"] = device
    suite = load_suite(suite_path, overrides)
    _check_selection(suite, suite_path, only, densities)
    cases = expand_cases(suite, only, densities)
    if not cases:
        raise SuiteError(str(suite_path), [("", "the selection leaves no case to run")])
    run_dir = resolve_run_dir(Path(out), suite, suite_path, resume)
    launcher = make_launcher(suite.launcher)
    groups = plan(suite, cases, launcher)
    lines, shared = _latest_lines(run_dir), shared_cases(groups)
    # A group not done is timed again whole (dstbench.groups): its cases' lines are replaced.
    todo = [g for g in groups if not group_done(g, lines, shared)]
    count = len({c.case_id for g in todo for c in g.cases})
    console.print(f"run folder: {run_dir}  ({count} of {len(cases)} cases to run)")
    run_cases(suite, suite_path, run_dir, todo, console, resume=bool(resume), launcher=launcher, shared=shared)
    return run_dir
