"""Plot sections of a report, drawn with seaborn on matplotlib `Figure` objects (no pyplot, no
window: they are only ever saved). Each returns None when its data is absent from the run."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dstbench.fmt import MIB
from dstbench.report.sections import register_plot
from dstbench.report.tables import ordered, run_label
from dstbench.report.topology import topology_history
from dstbench.results import segment_samples


@contextlib.contextmanager
def plot_style() -> Iterator[None]:
    """The look of every report plot. Text is never parsed as math, so a `$` in a method label
    (which comes from the suite) is drawn as it is instead of failing the plot."""
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.9), matplotlib.rc_context(
        {"text.parse_math": False, "svg.fonttype": "path", "svg.hashsalt": "dstbench"}
    ):
        yield


def new_figure(width: float = 6.4, height: float = 4.0, **subplots: Any) -> tuple[Figure, Any]:
    """A figure (inches) and its axes, laid out so titles and legends are never clipped."""
    figure = Figure(figsize=(width, height), layout="constrained")
    return figure, figure.subplots(**subplots)


def series(derived: pd.DataFrame) -> pd.Series:
    """What a line stands for: the method, plus its run when a report holds several runs."""
    if "run" in derived and derived["run"].nunique() > 1:
        return derived["method"].astype(str) + " · " + derived["run"].map(run_label)
    return derived["method"].astype(str)


def palette(names: list[str]) -> dict[str, Any]:
    """One colour per line, the same one in every plot of the report."""
    return dict(zip(names, sns.color_palette("colorblind", max(len(names), 1))))


def _with_series(derived: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    frame = ordered(derived).assign(series=lambda f: series(f))
    return frame, palette(list(pd.unique(frame["series"])))


def _reference(derived: pd.DataFrame) -> str:
    return derived.attrs.get("reference") or "the reference"


@register_plot(
    "speedup_plot", "Speedup vs density", order=100,
    caption="Ratio of median segment times at each density, with its 95% bootstrap interval; dashed: "
    "the speedup the FLOP count allows; dotted (compact methods): the speedup small_dense, a plain dense "
    "model of the same shapes, reaches.",
)
def speedup_plot(derived: pd.DataFrame) -> Figure | None:
    frame, colors = _with_series(derived)
    frame = frame[frame["speedup"].notna()]
    if frame.empty:
        return None
    figure, ax = new_figure()
    for name, group in frame.groupby("series", sort=False):
        group = group.sort_values("density")
        low = (group["speedup"] - group["speedup_ci_low"]).clip(lower=0).fillna(0)
        high = (group["speedup_ci_high"] - group["speedup"]).clip(lower=0).fillna(0)
        ax.errorbar(group["density"], group["speedup"], yerr=[low, high], marker="o", capsize=4, color=colors[name], label=name)
        limit = group[group["flop_limit"].notna()]
        if not limit.empty:
            ax.plot(limit["density"], limit["flop_limit"], linestyle="--", marker="x", color=colors[name], alpha=0.7)
        shape = group[group["shape_limit"].notna()] if "shape_limit" in group else group.iloc[:0]
        if not shape.empty:
            ax.plot(shape["density"], shape["shape_limit"], linestyle=":", marker="+", color=colors[name], alpha=0.7)
    ax.axhline(1.0, color="0.3", linewidth=0.8)
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="0.3", linestyle="--", marker="x"))
    labels.append("FLOP limit")
    if "shape_limit" in frame and frame["shape_limit"].notna().any():
        handles.append(Line2D([], [], color="0.3", linestyle=":", marker="+"))
        labels.append("shape limit")
    ax.legend(handles, labels, loc="best", fontsize="small")
    ax.set(xlabel="density", ylabel=f"speedup vs {_reference(derived)} (×)")
    return figure


@register_plot(
    "memory_plot", "Peak memory vs density", order=110,
    caption="The memory figure each reduction is computed from: the CUDA allocator peak where measured, "
    "else state plus activation bytes (the axis or the marker names which).",
)
def memory_plot(derived: pd.DataFrame) -> Figure | None:
    frame, colors = _with_series(derived)
    frame = frame[(frame["status"] == "ok") & frame["memory_bytes"].notna()].assign(mib=lambda f: f["memory_bytes"] / MIB)
    if frame.empty:
        return None
    bases = list(pd.unique(frame["memory_basis"]))
    figure, ax = new_figure()
    sns.lineplot(
        data=frame, x="density", y="mib", hue="series", style="memory_basis" if len(bases) > 1 else None,
        markers=True if len(bases) > 1 else None, marker="o" if len(bases) == 1 else None, dashes=False,
        palette=colors, markersize=8, errorbar=None, ax=ax,
    )
    ax.set(xlabel="density", ylabel="memory (MiB)" if len(bases) > 1 else f"{bases[0]} (MiB)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small", title=None)
    return figure


@register_plot(
    "segment_plot", "Segment-time distributions", order=120,
    caption="Every timed segment of every case (points) and their quartiles (boxes).",
)
def segment_plot(derived: pd.DataFrame) -> Figure | None:
    frame, colors = _with_series(derived)
    frame = frame[frame["status"] == "ok"]
    # Null samples (NaN written as null) are no measurement: plot the finite ones only.
    frame = frame.assign(segment_ms=frame["segment_ms"].map(segment_samples))
    frame = frame[frame["segment_ms"].map(len) > 0]
    if frame.empty:
        return None
    frame = frame.assign(case=frame["series"] + " @ " + frame["density"].map("{:g}".format))
    long = frame[["case", "series", "segment_ms"]].explode("segment_ms").astype({"segment_ms": float})
    figure, ax = new_figure(6.4, 1.2 + 0.38 * frame["case"].nunique())
    with warnings.catch_warnings():
        # seaborn 0.13 passes matplotlib's deprecated `vert` to boxplot; nothing to act on here.
        warnings.simplefilter("ignore", matplotlib.MatplotlibDeprecationWarning)
        sns.boxplot(data=long, x="segment_ms", y="case", hue="series", palette=colors, showfliers=False, legend=False, ax=ax)
    sns.stripplot(data=long, x="segment_ms", y="case", color="0.15", size=3, jitter=0.15, ax=ax)
    ax.set(xlabel="segment time (ms)", ylabel="")
    return figure


@register_plot(
    "state_plot", "Training state and activations per case", order=130,
    caption="Bytes counted exactly: parameters, gradients, optimizer state, method buffers and the "
    "activations saved for backward in one step.",
)
def state_plot(derived: pd.DataFrame) -> Figure | None:
    frame, _ = _with_series(derived)
    frame = frame[(frame["status"] == "ok") & frame["state_breakdown"].map(lambda v: isinstance(v, dict) and bool(v))]
    if frame.empty:
        return None
    parts = pd.DataFrame(
        [{k: v for k, v in r["state_breakdown"].items() if k != "total"} for _, r in frame.iterrows()], index=frame.index
    )
    parts["activations"] = frame["activation_bytes"]
    parts = parts.fillna(0).astype(float) / MIB
    labels = list(frame["series"] + " @ " + frame["density"].map("{:g}".format))
    figure, ax = new_figure(6.4, 1.4 + 0.38 * len(labels))
    left = np.zeros(len(labels))
    for color, column in zip(sns.color_palette("pastel", len(parts.columns)), parts.columns):
        ax.barh(labels, parts[column], left=left, color=color, label=column.replace("_", " "))
        left += parts[column].to_numpy()
    ax.invert_yaxis()
    ax.set(xlabel="MiB", ylabel="")
    ax.legend(fontsize="small", loc="lower right")
    return figure


@register_plot(
    "topology_plot", "Time in topology updates", order=140,
    caption="Share of timed segment time spent in topology updates (mask or shape changes).",
)
def topology_plot(derived: pd.DataFrame) -> Figure | None:
    frame, colors = _with_series(derived)
    # Dense training has no topology to update: a row of zero bars would only crowd the plot.
    frame = frame[frame["topology_share"].notna() & (frame["kind"] != "dense")]
    if frame.empty or not (frame["topology_share"] > 0).any():
        return None
    frame = frame.sort_values("density", kind="stable")
    frame = frame.assign(share=frame["topology_share"] * 100, density_label=frame["density"].map("{:g}".format))
    figure, ax = new_figure()
    sns.barplot(data=frame, x="density_label", y="share", hue="series", palette=colors, errorbar=None, ax=ax)
    ax.set(xlabel="density", ylabel="topology updates (% of segment time)")
    ax.legend(fontsize="small")
    return figure


@register_plot(
    "compact_topology_plot", "Compact topology over the run", order=150,
    caption="Attention heads and FFN hidden units each block holds at the start (step 0) and after each "
    "topology update; the colour scale tops out at the full-size model's width.",
)
def compact_topology_plot(derived: pd.DataFrame) -> Figure | None:
    frame, _ = _with_series(derived)
    cases = [(r, topology_history(r.get("method_extras"))) for _, r in frame.iterrows()]
    cases = [(r, h) for r, h in cases if h is not None]
    if not cases:
        return None
    figure, axes = new_figure(9.0, 0.6 + 2.4 * len(cases), nrows=len(cases), ncols=2, squeeze=False)
    for (r, history), row_axes in zip(cases, axes):
        updates = len(history["steps"])
        annotate = updates <= 16
        every = -(-updates // 12)  # at most about 12 step labels, however long the run
        steps = [str(s) if i % every == 0 else "" for i, s in enumerate(history["steps"])]
        for ax, key, label in zip(row_axes, ("heads", "hidden"), ("heads", "hidden units")):
            sns.heatmap(
                history[key], ax=ax, cmap="viridis", vmin=0, vmax=history[f"max_{key}"], annot=annotate, fmt="g",
                annot_kws={"fontsize": 7}, xticklabels=steps,
                yticklabels=[str(b) for b in range(history[key].shape[0])], cbar_kws={"label": label},
            )
            ax.set(xlabel="step", ylabel="block", title=f"{r['series']} @ {float(r['density']):g}: {label}")
            ax.tick_params(axis="y", labelrotation=0)
    return figure


@register_plot("accuracy_plot", "Accuracy vs density", order=160, caption="Top-1 validation accuracy at the end of training.")
def accuracy_plot(derived: pd.DataFrame) -> Figure | None:
    if "top1" not in derived:
        return None
    frame, colors = _with_series(derived)
    frame = frame[frame["top1"].notna()]
    if frame.empty:
        return None
    frame = frame.assign(top1_pct=frame["top1"].astype(float) * 100)
    figure, ax = new_figure()
    sns.lineplot(data=frame, x="density", y="top1_pct", hue="series", palette=colors, marker="o", markersize=8, errorbar=None, ax=ax)
    ax.set(xlabel="density", ylabel="top-1 accuracy (%)")
    ax.legend(fontsize="small")
    return figure


def _curves(derived: pd.DataFrame) -> pd.DataFrame:
    """One row per evaluation point of every case's accuracy curve."""
    frame, _ = _with_series(derived)
    points = []
    for _, r in frame[frame["status"] == "ok"].iterrows():
        curve = r.get("curve")
        if isinstance(curve, list):
            for point in curve:
                if isinstance(point, dict) and point.get("epoch") is not None:
                    points.append({**point, "series": r["series"], "density": f"{float(r['density']):g}"})
    return pd.DataFrame(points)


@register_plot(
    "curve_plot", "Accuracy during training", order=165,
    caption="Top-1 validation accuracy and mean training loss at each evaluation; line style marks the density.",
)
def curve_plot(derived: pd.DataFrame) -> Figure | None:
    if "curve" not in derived:
        return None
    points = _curves(derived)
    if points.empty or "top1" not in points or points["top1"].isna().all():
        return None
    colors = palette(list(pd.unique(series(ordered(derived)))))
    panels = [("top1", "top-1 accuracy (%)", 100.0)]
    if "train_loss" in points and points["train_loss"].notna().any():
        panels.append(("train_loss", "training loss", 1.0))
    figure, axes = new_figure(6.4 * len(panels), 4.0, ncols=len(panels), squeeze=False)
    for ax, (column, label, scale) in zip(axes[0], panels):
        data = points[points[column].notna()].assign(value=lambda f: f[column].astype(float) * scale)
        sns.lineplot(data=data, x="epoch", y="value", hue="series", style="density", palette=colors, marker="o", errorbar=None, ax=ax)
        ax.set(xlabel="epoch", ylabel=label)
        ax.legend(fontsize="small")
    return figure
