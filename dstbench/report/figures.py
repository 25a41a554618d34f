"""What every report figure shares, below the section modules (plots, profile_section, history)
and the registry (sections) alike, so none of them imports another to draw: the style, the
figure factory and its two layouts, colours, legends, grouping of coincident series, the `Plot` a
section returns, and the SVG encoding.

Each plot is drawn twice: `wide` for a desktop page and `narrow` (NARROW_WIDTH inches, panels
stacked, legends below) for a phone, where a wide figure scaled to the screen would make its text
unreadable. The page picks one with a `<picture>` media query.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import dataclasses
import io
import math
import re
from typing import Any, Iterator

import matplotlib
import seaborn as sns
from matplotlib.figure import Figure

NARROW_WIDTH = 3.6  # inches: about 430 CSS pixels as shown, so a phone scales it little
_NARROW: contextvars.ContextVar[bool] = contextvars.ContextVar("dstbench_narrow_figures", default=False)
# Joins the names of series drawn as one because their values coincide (`coincident_groups`).
SAME = " = "
# Relative difference below which two figures are the same value (equal measurements that went
# through float arithmetic on different paths).
COINCIDE_RTOL = 1e-9


@dataclasses.dataclass
class Plot:
    """What a plot section returns: the figure, an alt text that states its numbers (read by a
    screen reader instead of the image), and a title when it depends on the data (else the
    section's)."""

    figure: Figure
    alt: str
    title: str | None = None


@contextlib.contextmanager
def plot_style() -> Iterator[None]:
    """The look of every report plot. Text is never parsed as math, so a `$` in a method label
    (which comes from the suite) is drawn as it is instead of failing the plot."""
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.9), matplotlib.rc_context(
        {"text.parse_math": False, "svg.fonttype": "path", "svg.hashsalt": "dstbench"}
    ):
        yield


@contextlib.contextmanager
def narrow_layout(narrow: bool = True) -> Iterator[None]:
    """Figures made inside are laid out for a phone (see the module docstring)."""
    token = _NARROW.set(narrow)
    try:
        yield
    finally:
        _NARROW.reset(token)


def is_narrow() -> bool:
    return _NARROW.get()


def new_figure(width: float = 6.4, height: float = 4.0, **subplots: Any) -> tuple[Figure, Any]:
    """A figure (inches) and its axes, laid out so titles and legends are never clipped. In the
    narrow layout the width is NARROW_WIDTH and a figure of one axes grows a little taller, since
    its legend goes below it."""
    if is_narrow():
        single = subplots.get("nrows", 1) == 1 and subplots.get("ncols", 1) == 1
        height = height * (1.15 if single else 1.0)
        width = min(width, NARROW_WIDTH)
    figure = Figure(figsize=(width, height), layout="constrained")
    return figure, figure.subplots(**subplots)


def palette(names: list[str]) -> dict[str, Any]:
    """One distinct colour per name, the same one in every plot of a page: seaborn's colourblind
    palette while it has enough colours (10), else evenly spaced hues, so no two names share one."""
    count = max(len(names), 1)
    colors = sns.color_palette("colorblind", count) if count <= 10 else sns.color_palette("husl", count)
    return dict(zip(names, colors))


def density_markers(densities: list[float]) -> dict[float, str]:
    """A marker per density (style by density where colour is the method)."""
    shapes = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
    ordered = sorted(set(densities), reverse=True)
    return {d: shapes[i % len(shapes)] for i, d in enumerate(ordered)}


def legend_outside(owner: Any, handles: list[Any] | None = None, labels: list[str] | None = None, **kwargs: Any) -> Any:
    """A legend beside the axes (wide layout) or below the figure (narrow), never over the data.
    `owner` is an Axes or a Figure; without handles it collects the owner's."""
    figure = owner if isinstance(owner, Figure) else owner.figure
    if handles is None:
        axes = figure.axes if isinstance(owner, Figure) else [owner]
        handles, labels = [], []
        for ax in axes:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                if label not in labels and not label.startswith("_"):
                    handles.append(handle)
                    labels.append(label)
    for ax in figure.axes:
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if not handles:
        return None
    kwargs.setdefault("fontsize", "small")
    kwargs.setdefault("frameon", False)
    if is_narrow():
        return figure.legend(handles, labels, loc="outside lower center", ncols=min(2, len(handles)), **kwargs)
    return figure.legend(handles, labels, loc="outside right upper", **kwargs)


def coincident_groups(points: dict[str, dict[Any, float]], atol: float = 0.0) -> list[list[str]]:
    """Series whose points coincide (same x values, y within `atol` at each), in the order of
    `points`; a series that coincides with no other forms a group alone. `points`: series -> {x: y}.
    Drawn one over another they would hide each other, so a plot draws each group once, labelled
    with every name in it (`group_label`). `atol` is what the eye cannot tell apart at the plot's
    scale (see `visual_tolerance`)."""
    groups: list[list[str]] = []
    for name, values in points.items():
        for group in groups:
            first = points[group[0]]
            if first.keys() == values.keys() and all(_close(first[x], values[x], atol) for x in values):
                group.append(name)
                break
        else:
            groups.append([name])
    return groups


def _close(a: float, b: float, atol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= atol or math.isclose(a, b, rel_tol=COINCIDE_RTOL)


def visual_tolerance(values: list[float], fraction: float = 0.004) -> float:
    """The y distance below which two points drawn on an axis spanning `values` (from 0) overlap."""
    finite = [abs(v) for v in values if not math.isnan(v)]
    return fraction * max(finite) if finite else 0.0


def group_label(group: list[str], points: dict[str, dict[Any, float]] | None = None) -> str:
    """'rigl = set = mest' for a group of coincident series ('≈' joins one whose values only come
    close), the name alone for a group of one."""
    if len(group) == 1 or points is None:
        return SAME.join(group)
    first = points[group[0]]
    label = group[0]
    for name in group[1:]:
        exact = all(math.isclose(first[x], points[name][x], rel_tol=COINCIDE_RTOL) for x in first)
        label += (SAME if exact else " ≈ ") + name
    return label


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


def close(figure: Any) -> None:
    """Forget a figure: one made through pyplot stays registered there until closed."""
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close(figure)
