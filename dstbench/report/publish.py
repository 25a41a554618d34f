"""`dstbench publish RUN_DIR... --site DIR`: a static site of runs, for GitHub Pages or any server.

    DIR/index.html            every run in the site, newest first, with its headline figures
    DIR/history.html          each (method, density) of a suite across its runs, in time order
    DIR/runs/NAME/index.html  a run's report, next to copies of its results.jsonl, suite.yaml, run.json
                              and the profiler traces and memory snapshots its result lines name

A published run folder is itself a run folder, so runs published earlier stay listed when new ones
are added. publish never deletes or replaces what it did not write (`dstbench.report.site_manifest`):
a run published again from the same folder replaces its own copies; another run of the same name
gets a suffix. Only regular files inside a run folder are copied (never through a symbolic link).
Every link is relative. Publishes into one site take turns (a lock on the site folder). The
command is `dstbench.cli.publish`.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from dstbench.results.coverage import run_coverage
from dstbench.results.expectations import run_outcomes
from dstbench.results.derive import headline
from dstbench.report.history import SiteRun, suite_histories
from dstbench.report.site_manifest import SITE_PAGES, PublishedRun, SiteError, load_manifest, remove_published
from dstbench.report.html import Link, build_page, devices, dstbench_version, environment, render_html
from dstbench.results.run_folder import RunFolder
from dstbench.util.dirlock import FolderLock
from dstbench.util.files import RESULTS_FILE, RUN_FILES, named, slug, write_atomic

LINKED_FILE_KEYS = ("trace", "memory_snapshot")  # fields of a result line's `profile`


def _created(meta: dict[str, Any], frame: pd.DataFrame) -> str:
    """When the run started: run.json's `created`, else its earliest case."""
    if meta.get("created"):
        return str(meta["created"])
    started = [s for s in frame["started_at"] if isinstance(s, str)] if "started_at" in frame else []
    return min(started) if started else ""


def load_site_run(run_dir: Path) -> SiteRun:
    """A run folder with its figures derived against its suite's reference."""
    folder = RunFolder.open(run_dir)
    frame, meta = folder.loaded(), folder.meta
    if frame.empty:
        derived = frame
        head = {"cases": 0, "failed": 0, "reference": None, "speedup": None, "memory": None}
    else:
        derived = folder.frame()
        head = headline(derived)
    outcomes = run_outcomes(run_dir, frame) if not frame.empty else None
    verdicts = None
    if outcomes and outcomes[1]:
        verdicts = {v: sum(o.verdict == v for o in outcomes[1]) for v in ("PASS", "FAIL", "SKIPPED")}
    return SiteRun(
        run_dir.name, meta, _created(meta, frame), derived, head, devices(derived), run_coverage(run_dir), verdicts
    )


def _linked_files(run_dir: Path) -> list[str]:
    """Files inside the run folder that its result lines name (profiler traces, memory snapshots),
    so that a report's links to them still resolve in the site."""
    names = []
    for line in RunFolder.open(run_dir).lines():
        profile = line.get("profile")
        for key in LINKED_FILE_KEYS:
            name = profile.get(key) if isinstance(profile, dict) else None
            # Only plain paths inside the run folder; a result line never makes publish read elsewhere.
            if isinstance(name, str) and name and not Path(name).is_absolute() and ".." not in Path(name).parts:
                names.append(name)
    return names


def regular_file_in(folder: Path, name: str) -> Path | None:
    """`folder/name` when it is a regular file inside `folder` reached through no symbolic link
    (publish copies nothing from outside a run folder), else None."""
    parts = Path(name).parts
    if not parts or Path(name).is_absolute() or ".." in parts:
        return None
    if any(folder.joinpath(*parts[:depth]).is_symlink() for depth in range(1, len(parts) + 1)):
        return None
    path = folder / name
    return path if path.is_file() else None


def _copy_run(source: Path, dest: Path) -> list[str]:
    """Copy the run's files (and those its lines name) into `dest`; returns the names copied."""
    names = list(dict.fromkeys((*RUN_FILES, *_linked_files(source))))
    if dest.exists() and os.path.samefile(source, dest):
        return [name for name in names if regular_file_in(source, name)]
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in names:
        path = regular_file_in(source, name)
        if path is None:
            if os.path.lexists(source / name):
                print(f"publish: left out {source / name}: not a regular file inside the run folder", file=sys.stderr)
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()  # never write through a link
        try:
            shutil.copyfile(path, target)
        except OSError as exc:  # a full disk raises it without a file name
            raise named(exc, target) from None
        copied.append(name)
    return copied


def write_run_page(run_dir: Path) -> None:
    run = load_site_run(run_dir)
    page = build_page(run.derived, [run_dir], output_dir=run_dir)
    page.nav = [Link("All runs", "../../index.html"), Link("History", "../../history.html")]
    page.files = [Link(name, name) for name in RUN_FILES if (run_dir / name).exists()]
    write_atomic(run_dir / "index.html", render_html(page))


# How long a publish waits for another one into the same site before it gives up.
SITE_LOCK_TIMEOUT_S = 600.0


def publish(run_dirs: list[str | Path], site: str | Path, *, wait_s: float = SITE_LOCK_TIMEOUT_S) -> Path:
    """Add `run_dirs` to the site at `site` (created if needed); returns its index.html.
    `SiteError` before anything is written when the site holds what publish did not write, or when
    another publish into it has not finished within `wait_s`. Publishes into one site run one at a
    time (a lock on the site folder, `dstbench.util.dirlock`): each reads the manifest the last one
    left, so concurrent publishes end with every run listed."""
    site = Path(site)
    site.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(site)
    if not lock.acquire(timeout_s=wait_s, poll_s=0.1):
        raise SiteError(f"--site: another dstbench publish into {site} did not finish within {wait_s:g} s; try again")
    try:
        return _publish([Path(d) for d in run_dirs], site)
    finally:
        lock.release()


def _publish(run_dirs: list[Path], site: Path) -> Path:
    """`publish` under the site's lock."""
    manifest = load_manifest(site)
    runs_root = site / "runs"
    runs_root.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    for source in run_dirs:
        name = manifest.name_for(source, runs_root, taken, slug(source.resolve().name))
        taken.add(name)
        dest = runs_root / name
        previous = manifest.runs.get(name)
        # The name is claimed in the manifest first: a publish stopped half way leaves a run
        # folder the manifest knows.
        manifest.runs[name] = PublishedRun(os.path.realpath(source), previous.files if previous else [])
        manifest.save(site)
        if not (dest.exists() and os.path.samefile(source, dest)):
            remove_published(dest, previous)
        copied = _copy_run(source, dest)
        write_run_page(dest)
        manifest.runs[name] = PublishedRun(os.path.realpath(source), sorted({*copied, "index.html"}))
        manifest.save(site)
        print(f"published {source} as {dest / 'index.html'}", file=sys.stderr)
    runs = [load_site_run(runs_root / name) for name in sorted(manifest.runs) if (runs_root / name / RESULTS_FILE).is_file()]
    runs = [run for run in runs if not run.derived.empty]  # nothing to list for a run without lines
    runs.sort(key=lambda r: (r.created, r.label), reverse=True)
    env = environment(True)
    common = {"version": dstbench_version(), "nav": [Link("All runs", "index.html"), Link("History", "history.html")]}
    write_atomic(site / "index.html", env.get_template("index.html.j2").render(runs=runs, **common))
    histories = suite_histories(runs)
    write_atomic(site / "history.html", env.get_template("history.html.j2").render(histories=histories, **common))
    # GitHub Pages would otherwise run Jekyll over the site and drop files it does not know.
    write_atomic(site / ".nojekyll", "")
    manifest.pages = list(SITE_PAGES)
    manifest.save(site)
    return site / "index.html"
