"""`dstbench run SUITE`: validate, expand into cases, launch each, append its result line.

A run folder holds `suite.yaml` (the suite as validated, defaults filled in), `run.json` (when,
where, which commit) and `results.jsonl` (one line per finished case). `--resume` runs the cases
that have no line yet.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from dstbench.cases import Case, expand_cases
from dstbench.config import SuiteConfig, SuiteError, load_suite
from dstbench.env import git_state
from dstbench.launchers import make_launcher
from dstbench.results import CaseResult, append_result, iter_results
from dstbench.runner import CaseTask

SUITE_FILE = "suite.yaml"
RUN_FILE = "run.json"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "suite"


def new_run_dir(out: Path, suite: SuiteConfig) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = out / f"{_slug(suite.name)}-{stamp}"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = out / f"{_slug(suite.name)}-{stamp}-{suffix}"
    run_dir.mkdir(parents=True)
    return run_dir


def latest_run_dir(out: Path, suite: SuiteConfig) -> Path | None:
    """The newest run folder under `out` made from a suite with the same name and setup."""
    found = []
    for meta_path in out.glob(f"*/{RUN_FILE}"):
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if meta.get("suite") == suite.name and meta.get("suite_hash") == suite.setup_hash():
            found.append((meta.get("created", ""), meta_path.parent))
    return max(found)[1] if found else None


def write_run_files(run_dir: Path, suite: SuiteConfig, suite_path: Path) -> None:
    (run_dir / SUITE_FILE).write_text(
        f"# {suite_path} as validated by dstbench, every default filled in\n"
        + yaml.safe_dump(suite.model_dump(mode="json"), sort_keys=False)
    )
    meta = {
        "suite": suite.name,
        "suite_hash": suite.setup_hash(),
        "suite_path": str(suite_path),
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **git_state(),
    }
    (run_dir / RUN_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def resolve_run_dir(out: Path, suite: SuiteConfig, suite_path: Path, resume: bool | str | None) -> Path:
    if resume:
        run_dir = Path(resume) if isinstance(resume, str) else latest_run_dir(out, suite)
        if run_dir is None or not (run_dir / RUN_FILE).exists():
            raise SuiteError(str(suite_path), [("", f"nothing to resume under {out}")])
        meta = json.loads((run_dir / RUN_FILE).read_text())
        if meta.get("suite_hash") != suite.setup_hash():
            raise SuiteError(str(suite_path), [("", f"{run_dir} was run with different suite settings")])
        return run_dir
    run_dir = new_run_dir(out, suite)
    write_run_files(run_dir, suite, suite_path)
    return run_dir


def _status_line(result: CaseResult) -> str:
    if result.status != "ok":
        first = (result.error or "").strip().splitlines()
        return f"[red]{result.status}[/red] {first[-1] if first else ''}"
    parts = []
    if result.median_ms is not None:
        parts.append(f"median {result.median_ms:.1f} ms/segment")
    if result.top1 is not None:
        parts.append(f"top1 {result.top1:.3f}")
    if result.density_achieved is not None:
        parts.append(f"density {result.density_achieved:.3f}")
    return "[green]ok[/green] " + ", ".join(parts)


def run_cases(
    suite: SuiteConfig, suite_path: Path, run_dir: Path, cases: list[Case], console: Console, resume: bool = False
) -> list[CaseResult]:
    """Launch the cases one after another with a live progress line; append each result."""
    launcher = make_launcher(suite.launcher)
    suite_data = suite.model_dump(mode="json")
    results = []
    columns = [TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[detail]}"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        overall = progress.add_task("cases", total=len(cases), detail="")
        for index, case in enumerate(cases, 1):
            label = f"case {index}/{len(cases)} {case.case_id}"
            progress.update(overall, description=label, detail="starting")

            def on_progress(stage: str, done: int, total: int, label: str = label) -> None:
                progress.update(overall, description=label, detail=f"{stage} {done}/{total}")

            task = CaseTask(suite_data, str(suite_path), case.to_dict(), str(run_dir), resume=resume)
            result = launcher.run(task, on_progress)
            append_result(run_dir, result)
            results.append(result)
            progress.advance(overall)
            console.print(f"{label}: {_status_line(result)}")
    return results


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

    Raises `SuiteError` before anything is written when the suite or the selection is invalid.
    """
    console = console or Console(stderr=True)
    suite_path = Path(suite_path)
    overrides = dict(overrides or {})
    if device:
        overrides["device"] = device
    suite = load_suite(suite_path, overrides)
    known = {m.key for m in suite.methods}
    unknown = sorted(set(only or ()) - known)
    if unknown:
        raise SuiteError(str(suite_path), [("--only", f"not in the suite: {unknown} (suite has: {', '.join(sorted(known))})")])
    cases = expand_cases(suite, only, densities)
    if not cases:
        raise SuiteError(str(suite_path), [("", "the selection leaves no case to run")])
    run_dir = resolve_run_dir(Path(out), suite, suite_path, resume)
    done = {line.get("case_id") for line in iter_results(run_dir)}
    todo = [case for case in cases if case.case_id not in done]
    console.print(f"run folder: {run_dir}  ({len(todo)} of {len(cases)} cases to run)")
    run_cases(suite, suite_path, run_dir, todo, console, resume=bool(resume))
    return run_dir
