"""`dstbench publish RUN_DIR... --site DIR`: a static site of runs, for GitHub Pages or any server.

    DIR/index.html            every run in the site, newest first, with its headline figures
    DIR/history.html          each (method, density) of a suite across its runs, in time order
    DIR/runs/NAME/index.html  a run's report, next to copies of its results.jsonl, suite.yaml, run.json
                              and the profiler traces and memory snapshots its result lines name

A published run folder is itself a run folder, so runs published earlier stay listed when new ones
are added; a run with the same folder name is replaced. Every link is relative. The command is
`dstbench.cli.publish`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from dstbench.results.coverage import run_coverage
from dstbench.results.expectations import run_outcomes
from dstbench.results.derive import derive, headline, load_frame
from dstbench.report.headline import choose_reference
from dstbench.report.history import SiteRun, suite_histories
from dstbench.report.html import Link, build_page, devices, dstbench_version, environment, render_html
from dstbench.results.record import iter_results
from dstbench.results.run_folder import load_run_meta
from dstbench.util.files import RESULTS_FILE, RUN_FILES, slug, write_atomic

LINKED_FILE_KEYS = ("trace", "memory_snapshot")  # fields of a result line's `profile`


def _created(meta: dict[str, Any], frame: pd.DataFrame) -> str:
    """When the run started: run.json's `created`, else its earliest case."""
    if meta.get("created"):
        return str(meta["created"])
    started = [s for s in frame["started_at"] if isinstance(s, str)] if "started_at" in frame else []
    return min(started) if started else ""


def load_site_run(run_dir: Path) -> SiteRun:
    """A run folder with its figures derived against its suite's reference."""
    frame = load_frame([run_dir])
    meta = load_run_meta(run_dir)
    if frame.empty:
        derived = frame
        head = {"cases": 0, "failed": 0, "reference": None, "speedup": None, "memory": None}
    else:
        reference, _ = choose_reference(frame, [str(run_dir)], None)
        derived = derive(frame, reference or str(frame["method"].iloc[0]))
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
    for line in iter_results(run_dir):
        profile = line.get("profile")
        for key in LINKED_FILE_KEYS:
            name = profile.get(key) if isinstance(profile, dict) else None
            # Only plain paths inside the run folder; a result line never makes publish read elsewhere.
            if isinstance(name, str) and name and not Path(name).is_absolute() and ".." not in Path(name).parts:
                names.append(name)
    return names


def _copy_run(source: Path, dest: Path) -> None:
    if source.resolve() == dest.resolve():
        return
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in RUN_FILES:
        if (source / name).exists():
            shutil.copy2(source / name, dest / name)
    for name in _linked_files(source):
        if (source / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, dest / name)


def _targets(run_dirs: list[Path]) -> list[str]:
    """A folder name per given run; runs from different places with one name get a suffix."""
    names: list[str] = []
    for run_dir in run_dirs:
        base = name = slug(run_dir.resolve().name)
        suffix = 1
        while name in names:
            suffix += 1
            name = f"{base}-{suffix}"
        names.append(name)
    return names


def write_run_page(run_dir: Path) -> None:
    run = load_site_run(run_dir)
    page = build_page(run.derived, [run_dir], output_dir=run_dir)
    page.nav = [Link("All runs", "../../index.html"), Link("History", "../../history.html")]
    page.files = [Link(name, name) for name in RUN_FILES if (run_dir / name).exists()]
    write_atomic(run_dir / "index.html", render_html(page))


def publish(run_dirs: list[str | Path], site: str | Path) -> Path:
    """Add `run_dirs` to the site at `site` (created if needed); returns its index.html."""
    site = Path(site)
    runs_root = site / "runs"
    runs_root.mkdir(parents=True, exist_ok=True)
    sources = [Path(d) for d in run_dirs]
    for source, name in zip(sources, _targets(sources)):
        _copy_run(source, runs_root / name)
        write_run_page(runs_root / name)
        print(f"published {source} as {runs_root / name / 'index.html'}", file=sys.stderr)
    runs = [load_site_run(p.parent) for p in sorted(runs_root.glob(f"*/{RESULTS_FILE}"))]
    runs = [run for run in runs if not run.derived.empty]  # nothing to list for a run without lines
    runs.sort(key=lambda r: (r.created, r.label), reverse=True)
    env = environment(True)
    common = {"version": dstbench_version(), "nav": [Link("All runs", "index.html"), Link("History", "history.html")]}
    write_atomic(site / "index.html", env.get_template("index.html.j2").render(runs=runs, **common))
    histories = suite_histories(runs)
    write_atomic(site / "history.html", env.get_template("history.html.j2").render(histories=histories, **common))
    # GitHub Pages would otherwise run Jekyll over the site and drop files it does not know.
    (site / ".nojekyll").write_text("")
    return site / "index.html"
