"""Each (method, density) of a suite across its published runs, in the order the runs started."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
from matplotlib.lines import Line2D

from dstbench.util.text import DASH, MIB
from dstbench.report.figures import (
    Plot,
    close,
    coincident_groups,
    density_markers,
    figure_to_uri,
    legend_outside,
    narrow_layout,
    new_figure,
    palette,
    plot_style,
    visual_tolerance,
)
from dstbench.report.tables import ordered

LINESTYLES = ["-", "--", ":", "-."]


@dataclasses.dataclass
class SiteRun:
    """A run folder inside a published site."""

    label: str  # its folder name under runs/, also its URL segment
    meta: dict[str, Any]  # run.json
    created: str  # ISO time the run started; runs sort by it
    derived: pd.DataFrame
    headline: dict[str, Any]
    devices: list[str]
    coverage: Any = None  # dstbench.results.coverage.Coverage, None when unknown
    expectations: dict[str, int] | None = None  # PASS / FAIL / SKIPPED counts; None: no expectations

    @property
    def suite(self) -> str:
        if "suite" in self.derived and not self.derived.empty:
            return str(self.derived["suite"].iloc[0])
        return str(self.meta.get("suite") or self.label)

    @property
    def when(self) -> str:
        """Start time as 'YYYY-MM-DD HH:MM' (UTC as recorded), or the label when unknown."""
        return self.created[:16].replace("T", " ") if self.created else self.label


@dataclasses.dataclass
class SuiteHistory:
    suite: str
    runs: list[SiteRun]  # oldest first
    series: list[str]  # one row per (method, density)
    cells: list[list[str]]  # series x runs
    image: tuple[str, int, int] | None  # data: URI, width, height
    narrow_image: tuple[str, int, int] | None = None  # the same plot laid out for a phone
    alt: str = ""  # the plot's numbers, as text


def _long(runs: list[SiteRun]) -> pd.DataFrame:
    frames = []
    for position, run in enumerate(runs):
        frame = ordered(run.derived).assign(position=position, when=run.when)
        frames.append(frame)
    long = pd.concat(frames, ignore_index=True)
    return long.assign(series=long["method"].astype(str) + " @ " + long["density"].map("{:g}".format))


PANELS = (("median_ms", "median segment (ms)", "{:.1f} ms"), ("speedup", "speedup vs {reference} (×)", "{:.2f}×"),
          ("mib", "memory (MiB)", "{:.1f} MiB"))


def _cell(row: pd.Series) -> str:
    if row["status"] != "ok":
        return str(row["status"])
    text = f"{row['median_ms']:.1f} ms" if pd.notna(row.get("median_ms")) else DASH
    if pd.notna(row.get("speedup")):
        text += f" · {row['speedup']:.2f}×"
    return text


def _group_name(group: list[str], method_of: dict[str, str], density_of: dict[str, float]) -> str:
    """'set = rigl = mest @ 0.5, 0.1' for coincident series that are every pair of some methods and
    densities; the series joined by ' = ' otherwise."""
    methods = list(dict.fromkeys(method_of[s] for s in group))
    densities = list(dict.fromkeys(density_of[s] for s in group))
    if len(group) > 1 and len(group) == len(methods) * len(densities):
        return f"{' = '.join(methods)} @ {', '.join(f'{d:g}' for d in densities)}"
    return " = ".join(group)


def _figure(long: pd.DataFrame, runs: list[SiteRun]) -> Plot | None:
    """Median time, speedup and memory of every case across the runs: colour is the method, line
    style and marker the density; cases whose values coincide in a panel share one line there,
    annotated with every name."""
    ok = long[long["status"] == "ok"].assign(mib=lambda f: f["memory_bytes"] / MIB)
    if ok.empty:
        return None
    colors = palette(list(pd.unique(long["method"].astype(str))))
    densities = sorted({float(d) for d in long["density"]}, reverse=True)
    markers = density_markers(densities)
    styles = {d: LINESTYLES[i % len(LINESTYLES)] for i, d in enumerate(densities)}
    method_of = dict(zip(long["series"], long["method"].astype(str)))
    density_of = dict(zip(long["series"], long["density"].astype(float)))
    reference = next((r.derived.attrs.get("reference") for r in runs if r.derived.attrs.get("reference")), "reference")
    figure, axes = new_figure(7.5, 8.0, nrows=3, sharex=True)
    alts = []
    for ax, (column, label, fmt) in zip(axes, PANELS):
        data = ok[ok[column].notna()]
        points: dict[str, dict[int, float]] = {}
        for _, r in data.iterrows():
            points.setdefault(str(r["series"]), {})[int(r["position"])] = float(r[column])
        groups = coincident_groups(points, atol=visual_tolerance([v for p in points.values() for v in p.values()]))
        for group in groups:
            first = group[0]
            xs = sorted(points[first])
            ys = [points[first][x] for x in xs]
            ax.plot(xs, ys, color=colors[method_of[first]], linestyle=styles[density_of[first]], marker=markers[density_of[first]])
            name = _group_name(group, method_of, density_of)
            if len(group) > 1:
                ax.annotate(name, (xs[-1], ys[-1]), xytext=(4, 4), textcoords="offset points", fontsize="x-small")
            values = ", ".join(fmt.format(points[first][x]) for x in xs)
            alts.append(f"{label.format(reference=reference)}, {name}: {values}")
        ax.set(ylabel=label.format(reference=reference), xlabel="")
    handles = [Line2D([], [], color=c) for c in colors.values()] + [
        Line2D([], [], color="0.35", linestyle=styles[d], marker=markers[d]) for d in densities
    ]
    labels = list(colors) + [f"density {d:g}" for d in densities]
    legend_outside(figure, handles, labels)
    axes[-1].set_xticks(range(len(runs)), [r.when for r in runs], rotation=30, ha="right")
    axes[-1].set_xlim(-0.5, len(runs) - 0.5)
    axes[-1].set_xlabel("run (start time)")
    when = f"{len(runs)} runs from {runs[0].when} to {runs[-1].when}" if len(runs) > 1 else f"one run, {runs[0].when}"
    return Plot(figure, f"Each case across {when}, oldest first. " + "; ".join(alts) + ".")


def _draw(long: pd.DataFrame, runs: list[SiteRun], narrow: bool) -> tuple[Plot | None, tuple[str, int, int] | None]:
    with plot_style(), narrow_layout(narrow):
        plot = _figure(long, runs)
        if plot is None:
            return None, None
        try:
            return plot, figure_to_uri(plot.figure)
        finally:
            close(plot.figure)


def suite_histories(runs: list[SiteRun]) -> list[SuiteHistory]:
    """One history per suite name, runs oldest first."""
    by_suite: dict[str, list[SiteRun]] = {}
    for run in sorted(runs, key=lambda r: (r.created, r.label)):
        if not run.derived.empty:
            by_suite.setdefault(run.suite, []).append(run)
    histories = []
    for suite, suite_runs in sorted(by_suite.items()):
        long = _long(suite_runs)
        series = list(pd.unique(long["series"]))
        cells = []
        for name in series:
            rows = long[long["series"] == name]
            by_position = {int(r["position"]): _cell(r) for _, r in rows.iterrows()}
            cells.append([by_position.get(i, "") for i in range(len(suite_runs))])
        plot, image = _draw(long, suite_runs, narrow=False)
        _, narrow_image = _draw(long, suite_runs, narrow=True) if plot is not None else (None, None)
        histories.append(SuiteHistory(suite, suite_runs, series, cells, image, narrow_image, plot.alt if plot else ""))
    return histories
