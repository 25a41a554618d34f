"""Each (method, density) of a suite across its published runs, in the order the runs started."""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import seaborn as sns

from dstbench.fmt import DASH, MIB
from dstbench.report.plots import new_figure, palette, plot_style
from dstbench.report.sections import figure_to_uri
from dstbench.report.tables import ordered


@dataclasses.dataclass
class SiteRun:
    """A run folder inside a published site."""

    label: str  # its folder name under runs/, also its URL segment
    meta: dict[str, Any]  # run.json
    created: str  # ISO time the run started; runs sort by it
    derived: pd.DataFrame
    headline: dict[str, Any]
    devices: list[str]

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


def _long(runs: list[SiteRun]) -> pd.DataFrame:
    frames = []
    for position, run in enumerate(runs):
        frame = ordered(run.derived).assign(position=position, when=run.when)
        frames.append(frame)
    long = pd.concat(frames, ignore_index=True)
    return long.assign(series=long["method"].astype(str) + " @ " + long["density"].map("{:g}".format))


def _cell(row: pd.Series) -> str:
    if row["status"] != "ok":
        return str(row["status"])
    text = f"{row['median_ms']:.1f} ms" if pd.notna(row.get("median_ms")) else DASH
    if pd.notna(row.get("speedup")):
        text += f" · {row['speedup']:.2f}×"
    return text


def _figure(long: pd.DataFrame, runs: list[SiteRun]) -> Any | None:
    ok = long[long["status"] == "ok"].assign(mib=lambda f: f["memory_bytes"] / MIB)
    if ok.empty:
        return None
    colors = palette(list(pd.unique(long["series"])))
    reference = next((r.derived.attrs.get("reference") for r in runs if r.derived.attrs.get("reference")), "reference")
    figure, axes = new_figure(7.5, 8.0, nrows=3, sharex=True)
    panels = [("median_ms", "median segment (ms)"), ("speedup", f"speedup vs {reference} (×)"), ("mib", "memory (MiB)")]
    for ax, (column, label) in zip(axes, panels):
        data = ok[ok[column].notna()]
        if not data.empty:
            sns.lineplot(data=data, x="position", y=column, hue="series", palette=colors, marker="o", errorbar=None, ax=ax, legend=ax is axes[0])
        ax.set(ylabel=label, xlabel="")
    if axes[0].get_legend() is not None:
        axes[0].legend(fontsize="small", title=None, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[-1].set_xticks(range(len(runs)), [r.when for r in runs], rotation=30, ha="right")
    axes[-1].set_xlim(-0.5, len(runs) - 0.5)
    axes[-1].set_xlabel("run (start time)")
    return figure


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
        with plot_style():
            figure = _figure(long, suite_runs)
            image = figure_to_uri(figure) if figure is not None else None
        histories.append(SuiteHistory(suite, suite_runs, series, cells, image))
    return histories
