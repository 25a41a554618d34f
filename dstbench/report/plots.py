"""Plot sections of a report, drawn with matplotlib and seaborn on `Figure` objects (no pyplot, no
window: they are only ever saved). Each returns a `figures.Plot` (the figure, an alt text that
states its numbers, and a title naming what is plotted), or None when its data is absent.

Conventions shared by every plot: colour is the method (the same colour in every plot of a page),
marker shape is the density; series whose values coincide are drawn once and labelled with every
name in the group ("rigl = set = mest"), so none hides behind another; legends sit outside the
axes (beside them, or below on a phone).
"""

from __future__ import annotations

import warnings
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from dstbench.util.text import MIB
from dstbench.report.figures import (
    Plot,
    coincident_groups,
    density_markers,
    group_label,
    is_narrow,
    legend_outside,
    new_figure,
    palette,
    plot_style,
    visual_tolerance,
)
from dstbench.report.sections import register_plot
from dstbench.report.tables import ordered, run_label
from dstbench.report.compact_topology import topology_history
from dstbench.results.record import segment_samples
from dstbench.results.replicates import frame_points

# Re-exported: section modules written against the old layout import these from here.
__all__ = ["new_figure", "palette", "plot_style", "series"]


def series(derived: pd.DataFrame) -> pd.Series:
    """What a line stands for: the method, plus its sweep point in a run with a sweep, plus its run
    when a report holds several runs."""
    names = derived["method"].astype(str)
    points = frame_points(derived)
    if points.astype(bool).any():
        names = names + " [" + points + "]"
    if "run" in derived and derived["run"].nunique() > 1:
        return names + " · " + derived["run"].map(run_label)
    return names


def _with_series(derived: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    frame = ordered(derived).assign(series=lambda f: series(f))
    return frame, palette(list(pd.unique(frame["series"])))


def _reference(derived: pd.DataFrame) -> str:
    return derived.attrs.get("reference") or "the reference"


def _g(value: float) -> str:
    return f"{float(value):g}"


def _case(name: str, density: float) -> str:
    return f"{name} @ {_g(density)}"


def _points(frame: pd.DataFrame, column: str) -> dict[str, dict[float, float]]:
    """series -> {density: value} of `column`, series in frame order."""
    points: dict[str, dict[float, float]] = {}
    for _, r in frame.iterrows():
        points.setdefault(str(r["series"]), {})[float(r["density"])] = float(r[column])
    return points


def _method_lines(
    ax: Any, frame: pd.DataFrame, column: str, colors: dict[str, Any], markers: dict[float, str], **line: Any
) -> tuple[list[Any], list[str], list[list[str]]]:
    """One line per group of coincident series (x = density, y = `column`), markers by density.
    Returns legend handles and labels of the groups, and the groups."""
    points = _points(frame, column)
    groups = coincident_groups(points, atol=visual_tolerance([v for p in points.values() for v in p.values()]))
    handles, labels = [], []
    for group in groups:
        xs = sorted(points[group[0]])
        ys = [points[group[0]][x] for x in xs]
        color = colors[group[0]]
        ax.plot(xs, ys, color=color, linewidth=2.2 if len(group) > 1 else 1.6, **line)
        for x, y in zip(xs, ys):
            ax.scatter([x], [y], marker=markers[x], s=60 if len(group) > 1 else 44, color=color, edgecolor="white", zorder=3)
        handles.append(Line2D([], [], color=color, linewidth=2.2 if len(group) > 1 else 1.6))
        labels.append(group_label(group, points))
    return handles, labels, groups


def _markers(derived: pd.DataFrame, shown: pd.DataFrame) -> dict[float, str]:
    """The marker of each density shown, chosen over every density of the report, so a density
    has the same marker in every plot."""
    every = density_markers(list(derived["density"].astype(float)))
    return {d: every[d] for d in sorted(set(shown["density"].astype(float)), reverse=True)}


def _density_handles(markers: dict[float, str]) -> tuple[list[Any], list[str]]:
    """Legend entries for the marker of each density (when there is more than one)."""
    if len(markers) < 2:
        return [], []
    handles = [Line2D([], [], color="0.35", marker=m, linestyle="none", markersize=7) for m in markers.values()]
    return handles, [f"density {_g(d)}" for d in markers]


def _listing(frame: pd.DataFrame, value: Any, groups: list[list[str]] | None = None) -> str:
    """'name: v at d1, v at d2; ...' per series (or group of coincident series), for alt texts."""
    parts = []
    names = groups or [[s] for s in pd.unique(frame["series"])]
    for group in names:
        rows = frame[frame["series"] == group[0]].sort_values("density", ascending=False)
        values = ", ".join(f"{value(r)} at {_g(r['density'])}" for _, r in rows.iterrows())
        parts.append(f"{' = '.join(group)}: {values}")
    return "; ".join(parts)


@register_plot(
    # Right under the expectations: the figure the report exists for comes before the tables.
    "speedup_plot", "Speedup vs density", order=7,
    caption="Per-round time ratio over interleaved rounds and process sets at each density, with its 95% "
    "interval across processes (unpaired runs: ratio of medians, bootstrap interval); dashed: "
    "the speedup the FLOP count allows; dotted (compact methods): the speedup small_dense, a plain dense "
    "model of the same shapes, reaches.",
)
def speedup_plot(derived: pd.DataFrame) -> Plot | None:
    frame, colors = _with_series(derived)
    frame = frame[frame["speedup"].notna()]
    if frame.empty:
        return None
    markers = _markers(derived, frame)
    figure, ax = new_figure()
    handles, labels = [], []
    for name, group in frame.groupby("series", sort=False):
        group = group.sort_values("density")
        low = (group["speedup"] - group["speedup_ci_low"]).clip(lower=0).fillna(0)
        high = (group["speedup_ci_high"] - group["speedup"]).clip(lower=0).fillna(0)
        ax.errorbar(group["density"], group["speedup"], yerr=[low, high], capsize=4, color=colors[name], label=name)
        for _, r in group.iterrows():
            ax.scatter([r["density"]], [r["speedup"]], marker=markers[float(r["density"])], s=44, color=colors[name], edgecolor="white", zorder=3)
        limit = group[group["flop_limit"].notna()]
        if not limit.empty:
            ax.plot(limit["density"], limit["flop_limit"], linestyle="--", marker="x", color=colors[name], alpha=0.7)
        shape = group[group["shape_limit"].notna()] if "shape_limit" in group else group.iloc[:0]
        if not shape.empty:
            ax.plot(shape["density"], shape["shape_limit"], linestyle=":", marker="+", color=colors[name], alpha=0.7)
        handles.append(Line2D([], [], color=colors[name]))
        labels.append(str(name))
    ax.axhline(1.0, color="0.3", linewidth=0.8)
    handles.append(Line2D([], [], color="0.3", linestyle="--", marker="x"))
    labels.append("FLOP limit")
    if "shape_limit" in frame and frame["shape_limit"].notna().any():
        handles.append(Line2D([], [], color="0.3", linestyle=":", marker="+"))
        labels.append("shape limit")
    extra_handles, extra_labels = _density_handles(markers)
    legend_outside(ax, handles + extra_handles, labels + extra_labels)
    reference = _reference(derived)
    ax.set(xlabel="density", ylabel=f"speedup vs {reference} (×)")

    def value(r: pd.Series) -> str:
        text = f"{r['speedup']:.2f}×"
        if pd.notna(r.get("speedup_ci_low")) and r["speedup_ci_low"] != r["speedup_ci_high"]:
            text += f" [{r['speedup_ci_low']:.2f}, {r['speedup_ci_high']:.2f}]"
        if pd.notna(r.get("flop_limit")):
            text += f" (FLOP limit {r['flop_limit']:.2f}×)"
        if pd.notna(r.get("shape_limit")):
            text += f" (shape limit {r['shape_limit']:.2f}×)"
        return text

    alt = f"Speedup against {reference} by density, with 95% intervals: {_listing(frame, value)}."
    return Plot(figure, alt, f"Speedup vs {reference} by density")


MEMORY_TITLES = {
    "allocator peak": "Peak allocated memory (CUDA allocator) vs density",
    "state + activation bytes": "Training state + saved activations vs density (exact bytes)",
}


@register_plot(
    "memory_plot", "Memory vs density", order=110,
    caption="The memory figure each reduction is computed from: the CUDA allocator peak where measured, "
    "else training-state plus saved-activation bytes counted exactly (the title names which). Methods "
    "whose figures coincide share one line, labelled with every name.",
)
def memory_plot(derived: pd.DataFrame) -> Plot | None:
    frame, colors = _with_series(derived)
    frame = frame[(frame["status"] == "ok") & frame["memory_bytes"].notna()].assign(mib=lambda f: f["memory_bytes"] / MIB)
    if frame.empty:
        return None
    bases = list(pd.unique(frame["memory_basis"]))
    markers = _markers(derived, frame)
    figure, ax = new_figure()
    handles, labels, alts = [], [], []
    for basis, style in zip(bases, ["-", ":", "--"]):
        part = frame[frame["memory_basis"] == basis]
        h, l, groups = _method_lines(ax, part, "mib", colors, markers, linestyle=style)
        handles += h
        labels += [f"{x} ({basis})" if len(bases) > 1 else x for x in l]
        alts.append(f"{basis} in MiB: {_listing(part, lambda r: f'{r.mib:.1f}', groups)}")
    extra_handles, extra_labels = _density_handles(markers)
    legend_outside(ax, handles + extra_handles, labels + extra_labels)
    ax.set(xlabel="density", ylabel="memory (MiB)" if len(bases) > 1 else f"{bases[0]} (MiB)")
    ax.set_ylim(bottom=0)
    title = MEMORY_TITLES.get(bases[0], f"{bases[0]} vs density") if len(bases) == 1 else "Memory vs density (mixed bases)"
    return Plot(figure, f"{title}. " + "; ".join(alts) + ".", title)


@register_plot(
    "segment_plot", "Segment-time distributions", order=120,
    caption="Every timed segment of every case (points) and their quartiles (boxes).",
)
def segment_plot(derived: pd.DataFrame) -> Plot | None:
    frame, colors = _with_series(derived)
    frame = frame[frame["status"] == "ok"]
    # Null samples (NaN written as null) are no measurement: plot the finite ones only.
    frame = frame.assign(segment_ms=frame["segment_ms"].map(segment_samples))
    frame = frame[frame["segment_ms"].map(len) > 0]
    if frame.empty:
        return None
    frame = frame.assign(case=[_case(s, d) for s, d in zip(frame["series"], frame["density"])])
    long = frame[["case", "series", "segment_ms"]].explode("segment_ms").astype({"segment_ms": float})
    figure, ax = new_figure(6.4, 1.2 + 0.38 * frame["case"].nunique())
    with warnings.catch_warnings():
        # seaborn 0.13 passes matplotlib's deprecated `vert` to boxplot; nothing to act on here.
        warnings.simplefilter("ignore", matplotlib.MatplotlibDeprecationWarning)
        sns.boxplot(data=long, x="segment_ms", y="case", hue="series", palette=colors, showfliers=False, legend=False, ax=ax)
    # seaborn jitters with numpy's global generator: seed it here (and put it back) so a report
    # drawn twice is the same file.
    state = np.random.get_state()
    np.random.seed(0)
    try:
        sns.stripplot(data=long, x="segment_ms", y="case", color="0.15", size=3, jitter=0.15, ax=ax)
    finally:
        np.random.set_state(state)
    steps = {int(s) for s in frame["segment_steps"] if pd.notna(s)} if "segment_steps" in frame else set()
    per = f"{steps.pop()}-step segment" if len(steps) == 1 else "segment"
    ax.set(xlabel=f"ms per {per}", ylabel="")
    medians = "; ".join(
        f"{c}: median {np.median(ms):.1f} ms over {len(ms)} segments (range {min(ms):.1f}-{max(ms):.1f})"
        for c, ms in zip(frame["case"], frame["segment_ms"])
    )
    return Plot(figure, f"Timed segments per case, ms per {per}. {medians}.", f"Time per {per}, every timed segment")


@register_plot(
    "state_plot", "Training state and activations per case", order=130,
    caption="Bytes counted exactly: parameters, gradients, optimizer state, method buffers and the "
    "activations saved for backward in one step.",
)
def state_plot(derived: pd.DataFrame) -> Plot | None:
    frame, _ = _with_series(derived)
    frame = frame[(frame["status"] == "ok") & frame["state_breakdown"].map(lambda v: isinstance(v, dict) and bool(v))]
    if frame.empty:
        return None
    parts = pd.DataFrame(
        [{k: v for k, v in r["state_breakdown"].items() if k != "total"} for _, r in frame.iterrows()], index=frame.index
    )
    parts["activations"] = frame["activation_bytes"]
    parts = parts.fillna(0).astype(float) / MIB
    labels = [_case(s, d) for s, d in zip(frame["series"], frame["density"])]
    figure, ax = new_figure(6.4, 1.4 + 0.38 * len(labels))
    left = np.zeros(len(labels))
    for color, column in zip(sns.color_palette("pastel", len(parts.columns)), parts.columns):
        ax.barh(labels, parts[column], left=left, color=color, label=column.replace("_", " "))
        left += parts[column].to_numpy()
    ax.invert_yaxis()
    ax.set(xlabel="MiB", ylabel="")
    legend_outside(ax)
    cases = "; ".join(
        f"{label}: {total:.1f} MiB ("
        + ", ".join(f"{column.replace('_', ' ')} {parts.loc[index, column]:.1f}" for column in parts.columns)
        + ")"
        for label, total, index in zip(labels, left, parts.index)
    )
    return Plot(figure, f"Training state and saved activations per case, MiB. {cases}.", "Training state + saved activations per case (exact bytes)")


@register_plot(
    "topology_plot", "Time in topology updates", order=140,
    caption="Share of timed segment time spent in topology updates (mask or shape changes).",
)
def topology_plot(derived: pd.DataFrame) -> Plot | None:
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
    legend_outside(ax)
    alt = _listing(frame, lambda r: f"{r['share']:.1f}%")
    return Plot(figure, f"Share of timed segment time spent in topology updates: {alt}.", "Topology updates, % of timed segment time")


@register_plot(
    "compact_topology_plot", "Compact topology over the run", order=150,
    caption="Attention heads and FFN hidden units each block holds at the start (step 0) and after each "
    "topology update; the colour scale tops out at the full-size model's width.",
)
def compact_topology_plot(derived: pd.DataFrame) -> Plot | None:
    frame, _ = _with_series(derived)
    cases = [(r, topology_history(r.get("method_extras"))) for _, r in frame.iterrows()]
    cases = [(r, h) for r, h in cases if h is not None]
    if not cases:
        return None
    narrow = is_narrow()
    # Wide: heads and hidden units side by side; narrow: one panel under the other.
    shape = {"nrows": 2 * len(cases), "ncols": 1} if narrow else {"nrows": len(cases), "ncols": 2}
    figure, axes = new_figure(9.0, (0.6 + 2.4 * len(cases)) * (2 if narrow else 1), squeeze=False, **shape)
    panels = axes.reshape(len(cases), 2)
    alts = []
    for (r, history), row_axes in zip(cases, panels):
        updates = len(history["steps"])
        annotate = updates <= (8 if narrow else 16)
        every = -(-updates // (6 if narrow else 12))  # a readable number of step labels, however long the run
        steps = [str(s) if i % every == 0 else "" for i, s in enumerate(history["steps"])]
        name = _case(r["series"], r["density"])
        for ax, key, label in zip(row_axes, ("heads", "hidden"), ("heads", "hidden units")):
            sns.heatmap(
                history[key], ax=ax, cmap="viridis", vmin=0, vmax=history[f"max_{key}"], annot=annotate, fmt="g",
                annot_kws={"fontsize": 7}, xticklabels=steps,
                yticklabels=[str(b) for b in range(history[key].shape[0])], cbar_kws={"label": label},
            )
            ax.set(xlabel="step", ylabel="block", title=f"{name}: {label}")
            ax.tick_params(axis="y", labelrotation=0)
            first, last = history[key][:, 0], history[key][:, -1]
            alts.append(
                f"{name}, {label} per block: {', '.join(_g(v) for v in first)} at step {history['steps'][0]}, "
                f"{', '.join(_g(v) for v in last)} at step {history['steps'][-1]} (full width {_g(history[f'max_{key}'])})"
            )
    return Plot(figure, "Compact topology over the run. " + "; ".join(alts) + ".", "Heads and FFN hidden units per block over the run")


@register_plot("accuracy_plot", "Accuracy vs density", order=160, caption="Top-1 on the test split at the end of training.")
def accuracy_plot(derived: pd.DataFrame) -> Plot | None:
    if "top1" not in derived:
        return None
    frame, colors = _with_series(derived)
    frame = frame[frame["top1"].notna()]
    if frame.empty:
        return None
    frame = frame.assign(top1_pct=frame["top1"].astype(float) * 100)
    markers = _markers(derived, frame)
    figure, ax = new_figure()
    handles, labels, groups = _method_lines(ax, frame, "top1_pct", colors, markers)
    extra_handles, extra_labels = _density_handles(markers)
    legend_outside(ax, handles + extra_handles, labels + extra_labels)
    ax.set(xlabel="density", ylabel="top-1 accuracy (%)")
    alt = _listing(frame, lambda r: f"{r['top1_pct']:.1f}%", groups)
    return Plot(figure, f"Top-1 on the test split at the end of training by density: {alt}.", "Top-1 accuracy vs density")


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
    caption="Top-1 on the test split and mean training loss at each evaluation; colour is the method, "
    "line style and marker the density.",
)
def curve_plot(derived: pd.DataFrame) -> Plot | None:
    if "curve" not in derived:
        return None
    points = _curves(derived)
    if points.empty or "top1" not in points or points["top1"].isna().all():
        return None
    colors = palette(list(pd.unique(series(ordered(derived)))))
    panels = [("top1", "top-1 accuracy (%)", 100.0)]
    if "train_loss" in points and points["train_loss"].notna().any():
        panels.append(("train_loss", "training loss", 1.0))
    layout = {"nrows": len(panels), "ncols": 1} if is_narrow() else {"nrows": 1, "ncols": len(panels)}
    width, height = (6.4, 3.6 * len(panels)) if is_narrow() else (6.4 * len(panels), 4.0)
    figure, axes = new_figure(width, height, squeeze=False, **layout)
    densities = sorted(points["density"].unique(), key=float, reverse=True)
    every = density_markers(list(derived["density"].astype(float)))
    markers = {d: every[float(d)] for d in densities}
    for ax, (column, label, scale) in zip(axes.flat, panels):
        data = points[points[column].notna()].assign(value=lambda f: f[column].astype(float) * scale)
        sns.lineplot(
            data=data, x="epoch", y="value", hue="series", style="density", style_order=densities, palette=colors,
            markers=markers, dashes=True, errorbar=None, ax=ax,
        )
        ax.set(xlabel="epoch", ylabel=label)
    legend_outside(figure)
    last = points[points["top1"].notna()].sort_values("epoch").groupby(["series", "density"], sort=False).tail(1)
    alt = "; ".join(f"{r['series']} @ {r['density']}: {float(r['top1']) * 100:.1f}% at epoch {_g(r['epoch'])}" for _, r in last.iterrows())
    return Plot(figure, f"Top-1 accuracy during training; the last evaluation of each case: {alt}.", "Top-1 accuracy and training loss by epoch")
