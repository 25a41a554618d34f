"""The registry of report sections: tables and plots, each a function of the derived frame.

See the package docstring (`dstbench/report/__init__.py`) for how a module adds sections.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import sys
import traceback
import warnings
from typing import Any, Callable, Literal

import pandas as pd

from dstbench.report.figures import Plot, close, figure_to_uri, narrow_layout, plot_style

__all__ = [
    "ENTRY_POINT_GROUP", "Plot", "Rendered", "SECTION_MODULES", "Section", "Table", "figure_to_uri",
    "load_section_modules", "load_section_plugin", "register_plot", "register_table", "render_sections", "sections",
]

# Modules whose import registers sections. A module that does not exist (yet) is skipped; an error
# inside one that exists is not, so a broken section module never silently vanishes from reports.
SECTION_MODULES = (
    "dstbench.report.expectations",
    "dstbench.report.tables",
    "dstbench.report.tracker_fields",
    "dstbench.report.time_to_accuracy",
    "dstbench.report.survival",
    "dstbench.report.target_sweep",
    "dstbench.report.plots",
    "dstbench.report.environment",
    "dstbench.report.profile_section",
    "dstbench.report.compact_topology",
    "dstbench.report.seeds",
    "dstbench.report.scaling",
    "dstbench.report.sparse_executions",
    "dstbench.report.density_schedule",
)
# Installed packages add sections here: each entry point names a module whose import registers
# them, loaded after `SECTION_MODULES` (see the package docstring).
ENTRY_POINT_GROUP = "dstbench.report_sections"


@dataclasses.dataclass
class Table:
    """A table as formatted strings; tabulate lays it out for text, the HTML template for pages."""

    headers: list[str]
    rows: list[list[str]]
    align: list[str] | None = None  # "left" or "right" per column; default left
    note: str = ""  # one sentence under the title: what the numbers are relative to
    row_classes: list[str] | None = None  # CSS class per row in HTML ("failed" marks failed cases)

    def column_align(self) -> list[str]:
        return list(self.align) if self.align else ["left"] * len(self.headers)


@dataclasses.dataclass(frozen=True)
class Section:
    key: str  # unique; the HTML anchor
    title: str
    kind: Literal["table", "plot"]
    build: Callable[[pd.DataFrame], Any]  # -> Table | Plot | matplotlib Figure | None (data absent)
    order: int
    caption: str = ""
    terminal: bool = True  # tables: also printed by `dstbench report` on the terminal


@dataclasses.dataclass
class Rendered:
    """One section of one report: its table, or its figure as a data: URI, or why it failed."""

    key: str
    title: str
    kind: str
    caption: str = ""
    table: Table | None = None
    image_uri: str | None = None
    width_px: int = 0
    height_px: int = 0
    error: str | None = None
    alt: str = ""  # what the plot shows, its numbers stated (the image's alt text)
    # The same plot laid out for a phone (`figures.narrow_layout`), None where it failed.
    narrow_uri: str | None = None
    narrow_width_px: int = 0
    narrow_height_px: int = 0


_SECTIONS: dict[str, Section] = {}


def _register(kind: Literal["table", "plot"], key: str, title: str, order: int, caption: str, terminal: bool):
    def decorator(build: Callable[[pd.DataFrame], Any]) -> Callable[[pd.DataFrame], Any]:
        _SECTIONS[key] = Section(key, title, kind, build, order, caption, terminal)
        return build

    return decorator


def register_table(
    key: str, title: str, *, order: int = 500, caption: str = "", terminal: bool = True
) -> Callable[[Callable[[pd.DataFrame], Table | None]], Callable[[pd.DataFrame], Table | None]]:
    """Decorator: `build(derived) -> Table | None` becomes a table section (None: data absent)."""
    return _register("table", key, title, order, caption, terminal)


def register_plot(
    key: str, title: str, *, order: int = 500, caption: str = ""
) -> Callable[[Callable[[pd.DataFrame], Any]], Callable[[pd.DataFrame], Any]]:
    """Decorator: `build(derived) -> Plot | matplotlib.figure.Figure | None` becomes a plot section,
    drawn once per layout (`figures.narrow_layout`). A `Plot` carries its alt text (the numbers it
    shows) and, where the data decides it, its title."""
    return _register("plot", key, title, order, caption, True)


_plugins_loaded = False


def load_section_modules() -> None:
    """Import the built-in section modules, then, once per process, the modules of the entry-point
    group `dstbench.report_sections` (`load_section_plugin`)."""
    global _plugins_loaded
    for name in SECTION_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    if not _plugins_loaded:
        _plugins_loaded = True
        for entry_point in _entry_points():
            load_section_plugin(entry_point)


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def load_section_plugin(entry_point: importlib.metadata.EntryPoint) -> bool:
    """Import the module an entry point names, so its sections register; False when it failed.

    A plugin that raises at import is a warning naming it, and none of its sections stay
    registered: a broken package costs its own sections, not the report. A plugin may add
    sections, not replace one registered before it (a clash is a warning; the earlier one stays).
    """
    before = dict(_SECTIONS)
    try:
        entry_point.load()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure of third-party code at import
        _SECTIONS.clear()
        _SECTIONS.update(before)
        warnings.warn(
            f"dstbench: report sections {entry_point.name!r} ({entry_point.value}) could not be loaded and are left "
            f"out: {type(exc).__name__}: {exc}",
            stacklevel=2,
        )
        return False
    clashes = sorted(key for key, section in before.items() if _SECTIONS.get(key) is not section)
    if clashes:
        _SECTIONS.update({key: before[key] for key in clashes})
        warnings.warn(
            f"dstbench: report sections {entry_point.name!r} ({entry_point.value}) register keys already taken, "
            f"kept as they were: {', '.join(clashes)}",
            stacklevel=2,
        )
    return True


def sections(kind: str | None = None) -> list[Section]:
    """Every registered section (of `kind`), in report order."""
    load_section_modules()
    found = [s for s in _SECTIONS.values() if kind is None or s.kind == kind]
    return sorted(found, key=lambda s: (s.order, s.key))


def render_sections(derived: pd.DataFrame, *, images: bool = True, terminal_only: bool = False) -> list[Rendered]:
    """Build every section that has data. A section that raises is kept with its error shown, so
    one broken plot costs that plot, not the report; the error also goes to stderr."""
    out: list[Rendered] = []
    for section in sections():
        if section.kind == "plot" and not images:
            continue
        if terminal_only and not (section.kind == "table" and section.terminal):
            continue
        rendered = Rendered(section.key, section.title, section.kind, section.caption)
        try:
            if section.kind == "plot":
                _render_plot(section, derived, rendered)
            else:
                result = section.build(derived)
                if result is None:
                    continue
                rendered.table = result
        except Exception as exc:  # noqa: BLE001 - reported in the page and on stderr
            rendered.error = f"{type(exc).__name__}: {exc}"
            print(f"report section {section.key!r} failed:\n{traceback.format_exc()}", file=sys.stderr)
        if rendered.error or rendered.table is not None or rendered.image_uri:
            out.append(rendered)
    return out


def _draw(section: Section, derived: pd.DataFrame, narrow: bool) -> tuple[Plot | None, tuple[str, int, int] | None]:
    """The section's plot in one layout, and its SVG (None: its data is absent)."""
    # Saved inside the style too: matplotlib reads some settings (the SVG id salt, math parsing of
    # tick labels made while drawing) only when the figure is written.
    with plot_style(), narrow_layout(narrow):
        result = section.build(derived)
        if result is None:
            return None, None
        plot = result if isinstance(result, Plot) else Plot(result, alt="")
        try:
            return plot, figure_to_uri(plot.figure)
        finally:
            close(plot.figure)


def _render_plot(section: Section, derived: pd.DataFrame, rendered: Rendered) -> None:
    """Both layouts of a plot section into `rendered`; a section returning a bare Figure (no alt
    text of its own) gets its title as alt text."""
    plot, image = _draw(section, derived, narrow=False)
    if plot is None or image is None:
        return
    rendered.image_uri, rendered.width_px, rendered.height_px = image
    rendered.alt = plot.alt or section.title
    rendered.title = plot.title or section.title
    try:
        _, narrow = _draw(section, derived, narrow=True)
    except Exception:  # noqa: BLE001 - the wide plot stands; the phone layout falls back to it
        print(f"report section {section.key!r}: narrow layout failed:\n{traceback.format_exc()}", file=sys.stderr)
        narrow = None
    if narrow is not None:
        rendered.narrow_uri, rendered.narrow_width_px, rendered.narrow_height_px = narrow
