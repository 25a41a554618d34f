"""The self-contained HTML report (and its Markdown sibling) from derived results.

Pages are rendered by jinja2 templates in `dstbench/report/templates/` with autoescaping on, so
every string from a result line or a suite reaches the page as text. Plots are embedded as
data: URIs and the page's Content-Security-Policy forbids every other source, so opening a
report makes no network request.
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import pandas as pd

from dstbench.report.time_to_accuracy import target_headline
from dstbench.results.derive import data_loading, headline, run_warnings
from dstbench.report.compact_topology import empty_block_notes
from dstbench.report.expectations import counts, coverage_notes, run_verdicts
from dstbench.report.sections import Rendered, render_sections
from dstbench.report.tables import render_table, run_label
from dstbench.results.run_folder import RunFolder
from dstbench.util.files import SUITE_FILE, write_atomic
from dstbench.util.text import markdown_text


@dataclass
class Link:
    label: str
    href: str


@dataclass
class RunInfo:
    """One run folder as a report names it: its label, `run.json`, and the suite as run."""

    label: str
    meta: dict[str, Any]
    suite_text: str | None


@dataclass
class Page:
    """Everything a report template shows; `nav` and `files` are filled in by `publish`."""

    title: str
    runs: list[RunInfo]
    headline: dict[str, Any]
    sections: list[Rendered]
    devices: list[str]
    version: str
    data_loading: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # contended cases, implausible figures: the banner
    empty_blocks: list[str] = field(default_factory=list)  # compact cases with blocks holding no heads or channels
    nav: list[Link] = field(default_factory=list)
    files: list[Link] = field(default_factory=list)
    # PASS / FAIL / SKIPPED counts of the runs' expectations (None: no suite has any)
    expectations: dict[str, int] | None = None
    # Runs with cases missing or not selected: {"run", "summary", "incomplete"} each
    coverage: list[dict[str, Any]] = field(default_factory=list)

    @property
    def incomplete(self) -> bool:
        return any(note["incomplete"] for note in self.coverage)


@functools.lru_cache(maxsize=2)
def environment(autoescape: bool = True) -> jinja2.Environment:
    """Templates load from the installed package; Markdown is rendered without HTML escaping."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dstbench.report", "templates"),
        autoescape=autoescape,
        # Markdown: every value's HTML characters as entities (names come from user files); a value
        # marked safe (the suite text inside its code fence) is written as it is.
        finalize=None if autoescape else _markdown_value,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["run_label"] = run_label
    env.filters["tabulate"] = render_table
    return env


def _markdown_value(value: Any) -> str:
    return str(value) if isinstance(value, markupsafe.Markup) else markdown_text(value)


def dstbench_version() -> str:
    try:
        return importlib.metadata.version("dstbench")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def read_runs(run_dirs: list[str | Path]) -> list[RunInfo]:
    runs = []
    for run_dir in run_dirs:
        suite_path = Path(run_dir) / SUITE_FILE
        text = suite_path.read_text(encoding="utf-8") if suite_path.exists() else None
        runs.append(RunInfo(run_label(run_dir, run_dirs), RunFolder.open(run_dir).meta, text))
    return runs


def devices(derived: pd.DataFrame) -> list[str]:
    """Distinct devices of the run, e.g. 'NVIDIA L40S (cuda)'."""
    if "env" not in derived:
        return []
    names = []
    for env in derived["env"]:
        if isinstance(env, dict) and env.get("device_name"):
            names.append(f"{env['device_name']} ({env.get('device_type') or '?'})")
    return list(dict.fromkeys(names))


def build_page(
    derived: pd.DataFrame, run_dirs: list[str | Path], *, images: bool = True, output_dir: str | Path | None = None
) -> Page:
    """Everything a report page shows. `output_dir` is where the page will be written: sections
    that link files find it in `derived.attrs["output_dir"]` to make their links relative."""
    derived.attrs["output_dir"] = str(output_dir) if output_dir is not None else None
    runs = read_runs(run_dirs)
    suites = list(dict.fromkeys(str(s) for s in derived["suite"])) if "suite" in derived else []
    verdicts = run_verdicts(derived)
    return Page(
        title="dstbench report: " + (", ".join(suites) or ", ".join(r.label for r in runs)),
        runs=runs,
        headline={**headline(derived), "to_target": target_headline(derived)},
        sections=render_sections(derived, images=images),
        devices=devices(derived),
        version=dstbench_version(),
        data_loading=data_loading(derived),
        expectations=counts(verdicts) if any(v.outcomes for v in verdicts) else None,
        coverage=coverage_notes(derived),
        warnings=run_warnings(derived),
        empty_blocks=empty_block_notes(derived),
    )


def render_html(page: Page) -> str:
    return environment(True).get_template("report.html.j2").render(page=page, nav=page.nav, version=page.version)


def render_markdown(page: Page) -> str:
    fence = "```"
    for run in page.runs:
        # A fence longer than any backtick run inside the suite keeps the block closed where it should.
        while run.suite_text and fence in run.suite_text:
            fence += "`"
    return environment(False).get_template("report.md.j2").render(page=page, fence=markupsafe.Markup(fence))


def write_report(derived: pd.DataFrame, run_dirs: list[str | Path], path: str | Path) -> Path:
    """Render the HTML report of `derived` into `path` (its folder is created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render_html(build_page(derived, run_dirs, output_dir=path.parent)))
    return path


def write_markdown_report(derived: pd.DataFrame, run_dirs: list[str | Path], path: str | Path) -> Path:
    """Render the Markdown report of `derived` into `path` (its folder is created); its plots are
    written beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render_markdown(build_page(derived, run_dirs, images=False, output_dir=path.parent)))
    return path
