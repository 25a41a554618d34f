"""The registry of report sections: tables and plots, each a function of the derived frame.

See the package docstring (`dstbench/report/__init__.py`) for how a module adds sections.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import io
import re
import sys
import traceback
from typing import Any, Callable, Literal

import pandas as pd

# Modules whose import registers sections. A module that does not exist (yet) is skipped; an error
# inside one that exists is not, so a broken section module never silently vanishes from reports.
SECTION_MODULES = (
    "dstbench.report.tables",
    "dstbench.report.plots",
    "dstbench.report.environment",
    "dstbench.report.profile_section",
    "dstbench.report.topology",
    "dstbench.report.seeds",
)


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
    build: Callable[[pd.DataFrame], Any]  # -> Table | matplotlib Figure | None (data absent)
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
    """Decorator: `build(derived) -> matplotlib.figure.Figure | None` becomes a plot section."""
    return _register("plot", key, title, order, caption, True)


def load_section_modules() -> None:
    for name in SECTION_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def sections(kind: str | None = None) -> list[Section]:
    """Every registered section (of `kind`), in report order."""
    load_section_modules()
    found = [s for s in _SECTIONS.values() if kind is None or s.kind == kind]
    return sorted(found, key=lambda s: (s.order, s.key))


def figure_to_uri(figure: Any) -> tuple[str, int, int]:
    """An SVG data: URI of a matplotlib figure and its size in CSS pixels.

    SVG keeps plots sharp in print; inside an <img> its element ids cannot collide with another
    plot's and nothing in it can run.
    """
    buffer = io.BytesIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = buffer.getvalue()
    # The size as saved (a tight bounding box differs from the figure's), in points.
    size = re.search(rb'<svg[^>]*?width="([\d.]+)pt"[^>]*?height="([\d.]+)pt"', svg[:2000])
    points = (float(size.group(1)), float(size.group(2))) if size else tuple(v * 72 for v in figure.get_size_inches())
    # Shown at 1.25x: matplotlib's 10 pt text then matches the page's body text.
    width, height = (int(round(v / 72 * 96 * 1.25)) for v in points)
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg).decode("ascii")
    return uri, width, height


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
                from dstbench.report.plots import plot_style

                with plot_style():
                    result = section.build(derived)
            else:
                result = section.build(derived)
            if result is None:
                continue
            if section.kind == "table":
                rendered.table = result
            else:
                try:
                    rendered.image_uri, rendered.width_px, rendered.height_px = figure_to_uri(result)
                finally:
                    # A figure made through pyplot stays registered there until closed.
                    if "matplotlib.pyplot" in sys.modules:
                        sys.modules["matplotlib.pyplot"].close(result)
        except Exception as exc:  # noqa: BLE001 - reported in the page and on stderr
            rendered.error = f"{type(exc).__name__}: {exc}"
            print(f"report section {section.key!r} failed:\n{traceback.format_exc()}", file=sys.stderr)
        out.append(rendered)
    return out
