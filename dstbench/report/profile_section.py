"""Report sections from the result lines' `profile` objects: where each case's profiled steps spent
their time (stacked by phase), the exact memory breakdown, the top operators, and the trace files.

Registered through `dstbench.report.sections` (this module is listed in its SECTION_MODULES). Every
builder returns None when no case of the report was profiled, so unprofiled runs show nothing here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd
import seaborn as sns
from markupsafe import Markup

from dstbench.util.text import DASH, MIB, mib, percent
from dstbench.dst.phases import STEP_PHASES
from dstbench.report.figures import Plot, legend_outside, new_figure, plot_style
from dstbench.report.plots import series
from dstbench.report.sections import Table, register_plot, register_table
from dstbench.report.tables import ordered

OTHER = "other"  # as in dstbench.measure.profiling.analysis; not imported so a report needs no torch
MEMORY_PARTS = ("parameters", "gradients", "optimizer_state", "method_buffers", "activations")
TOP_OPS_PER_CASE = 5


def _usable(profile: Any) -> bool:
    return isinstance(profile, dict) and "phases" in profile and "error" not in profile


def profiled(derived: pd.DataFrame) -> pd.DataFrame:
    """The ok, successfully profiled rows in report order, with a `case` label for plots."""
    if "profile" not in derived:
        return derived.iloc[0:0]
    frame = ordered(derived)
    frame = frame[(frame["status"] == "ok") & frame["profile"].map(_usable)]
    return frame.assign(case=series(frame) + " @ " + frame["density"].map("{:g}".format))


def _device_basis(frame: pd.DataFrame) -> bool:
    """GPU time per phase when every profiled case has it; host time otherwise (never a mix)."""
    return bool(len(frame)) and all(isinstance(p.get("device"), dict) and p["device"].get("phases") for p in frame["profile"])


def phase_frame(frame: pd.DataFrame, on_device: bool) -> pd.DataFrame:
    """Milliseconds per profiled step by top-level phase, one row per case (columns in step order)."""
    rows = []
    for profile in frame["profile"]:
        phases = profile["device"]["phases"] if on_device else profile["phases"]
        steps = max(int(profile.get("steps") or 1), 1)
        rows.append({name: float(entry["ms"]) / steps for name, entry in phases.items()})
    table = pd.DataFrame(rows, index=frame.index).fillna(0.0)
    columns = [c for c in STEP_PHASES if c in table] + sorted(set(table) - set(STEP_PHASES) - {OTHER})
    return table[columns + ([OTHER] if OTHER in table else [])]


def _stacked_bars(ax: Any, labels: list[str], parts: pd.DataFrame, names: dict[str, str]) -> None:
    left = np.zeros(len(labels))
    for color, column in zip(sns.color_palette("colorblind", len(parts.columns)), parts.columns):
        ax.barh(labels, parts[column].to_numpy(), left=left, color=color, label=names.get(column, column))
        left += parts[column].to_numpy()
    ax.invert_yaxis()


@register_plot(
    "profile_phases", "Profile: time by phase", order=170,
    caption="Mean time per profiled step, split by phase label (the profiled steps end in a topology "
    "update). GPU time per phase when every case ran on CUDA (each kernel charged to the phase that "
    "launched it), host time otherwise; 'other' is time under no label. Profiled steps carry "
    "profiler overhead and never feed the timed figures.",
)
def phase_plot(derived: pd.DataFrame) -> Plot | None:
    frame = profiled(derived)
    if frame.empty:
        return None
    on_device = _device_basis(frame)
    parts = phase_frame(frame, on_device)
    clock = "GPU" if on_device else "host"
    with plot_style():
        figure, ax = new_figure(7.2, 1.6 + 0.4 * len(frame))
        _stacked_bars(ax, list(frame["case"]), parts, {OTHER: "other (unlabelled)"})
        ax.set(xlabel=f"{clock} ms per profiled step", ylabel="")
        legend_outside(ax)  # beside (or below), never over, the bars
    alt = _alt(frame, parts, "ms", ".2f")
    return Plot(figure, f"{clock} ms per profiled step by phase. {alt}.", f"Profile: {clock} time per step by phase")


def _alt(frame: pd.DataFrame, parts: pd.DataFrame, unit: str, fmt: str) -> str:
    """'case: total (part value, ...)' per case, for alt texts."""
    return "; ".join(
        f"{case}: {parts.loc[index].sum():{fmt}} {unit} ("
        + ", ".join(f"{column.replace('_', ' ')} {parts.loc[index, column]:{fmt}}" for column in parts.columns)
        + ")"
        for case, index in zip(frame["case"], frame.index)
    )


@register_plot(
    "profile_memory", "Profile: memory breakdown", order=175,
    caption="Exact bytes at the profiled steps: parameters, gradients, optimizer state, method buffers "
    "(masks, accumulators) and the activations saved for backward in one step. A black tick marks the "
    "CUDA allocator's peak over the profiled steps, labelled with the phase in which it occurred.",
)
def memory_plot(derived: pd.DataFrame) -> Plot | None:
    frame = profiled(derived)
    frame = frame[frame["profile"].map(lambda p: isinstance(p.get("memory"), dict))]
    if frame.empty:
        return None
    parts = pd.DataFrame(
        [{k: p["memory"].get(k, 0) for k in MEMORY_PARTS} for p in frame["profile"]], index=frame.index
    ).astype(float) / MIB
    labels = list(frame["case"])
    with plot_style():
        figure, ax = new_figure(7.2, 1.6 + 0.4 * len(frame))
        _stacked_bars(ax, labels, parts, {k: k.replace("_", " ") for k in MEMORY_PARTS})
        for y, profile in enumerate(frame["profile"]):
            peak = profile.get("allocator_peak") or {}
            # Only the CUDA allocator's peak is comparable with the bars (the CPU figure counts
            # allocations since the profiled steps began, not everything alive).
            if peak.get("bytes") and str(peak.get("source", "")).startswith("CUDA"):
                x = peak["bytes"] / MIB
                ax.plot([x, x], [y - 0.4, y + 0.4], color="black", linewidth=2)
                ax.annotate(f"peak: {peak.get('phase')}", (x, y), xytext=(4, 0), textcoords="offset points",
                            va="center", fontsize="x-small")
        ax.set(xlabel="MiB", ylabel="")
        legend_outside(ax)
    alt = _alt(frame, parts, "MiB", ".1f")
    return Plot(figure, f"Exact memory at the profiled steps, MiB. {alt}.", "Profile: exact memory by part at the profiled steps")


def _ms(value: Any) -> str:
    return DASH if value is None else f"{float(value):.2f}"


def _update(profile: dict[str, Any]) -> str:
    update = profile.get("update") or {}
    how = update.get("how")
    return "none" if how == "none" else f"{how} at step {update.get('step')}"


@register_table("profile_summary", "Profile: summary", order=180)
def summary_table(derived: pd.DataFrame) -> Table | None:
    frame = profiled(derived)
    if frame.empty:
        return None
    rows = []
    for _, r in frame.iterrows():
        p = r["profile"]
        peak = p.get("allocator_peak") or {}
        top = (p.get("top_ops") or [{}])[0]
        rows.append([
            str(r["method"]), f"{float(r['density']):g}", str(p.get("steps")), _update(p),
            _ms(p.get("wall_ms")), percent((p.get("phases", {}).get("topology_update") or {}).get("share")),
            percent(p.get("matmul_share")), percent(p.get("attention_share")), str(top.get("name", DASH)),
            f"{mib(peak['bytes'], unit=True)} in {peak.get('phase')}" if peak.get("bytes") else DASH,
        ])
    return Table(
        ["method", "density", "steps", "topology update", "wall ms", "update share", "matmul", "attention",
         "top operator", "allocation peak"],
        rows, align=["left", "right", "right", "left", "right", "right", "right", "right", "left", "left"],
        note="Per profiled case: the host wall time of the profiled steps, the update's share of it, and "
        "matmul / fused-attention shares of all operator time (GPU time on CUDA, CPU time otherwise).",
    )


@register_table("profile_ops", "Profile: top operators", order=185, terminal=False)
def operators_table(derived: pd.DataFrame) -> Table | None:
    frame = profiled(derived)
    if frame.empty:
        return None
    rows = []
    for _, r in frame.iterrows():
        for op in (r["profile"].get("top_ops") or [])[:TOP_OPS_PER_CASE]:
            flops = op.get("flops")
            rows.append([
                str(r["case"]), str(op["name"]), str(op["calls"]), _ms(op["self_ms"]), percent(op.get("share")),
                f"{flops / 1e9:.3f}" if flops else DASH,
            ])
    return Table(
        ["case", "operator", "calls", "self ms", "share", "GFLOP"], rows,
        align=["left", "left", "right", "right", "right", "right"],
        note=f"The {TOP_OPS_PER_CASE} operators with the most self time over each case's profiled steps; "
        "share of all operator time; FLOPs where the profiler has a formula.",
    )


def file_href(path: Path, output_dir: str | Path | None) -> str:
    """The link to a run folder's file from a page written into `output_dir`: relative, so the page
    and its run folders can move together (a published site, a copied folder). Only a page whose
    folder is unknown gets an absolute file: URI."""
    if output_dir is None:
        return path.resolve().as_uri()
    relative = os.path.relpath(path.resolve(), Path(output_dir).resolve())
    return quote(Path(relative).as_posix())


def _link(path: Path, label: str, output_dir: str | Path | None) -> Markup:
    # Markup with escaped arguments: the page's template keeps it as a link and nothing else.
    return Markup('<a href="{}">{}</a>').format(file_href(path, output_dir), label)


@register_table("profile_traces", "Profile: traces", order=190, terminal=False)
def traces_table(derived: pd.DataFrame) -> Table | None:
    frame = profiled(derived)
    if frame.empty or "run" not in frame:
        return None
    output_dir = derived.attrs.get("output_dir")  # set by html.build_page: where the page goes
    rows = []
    for _, r in frame.iterrows():
        p, run = r["profile"], Path(str(r["run"]))
        snapshot = p.get("memory_snapshot")
        rows.append([
            str(r["case"]),
            _link(run / p["trace"], p["trace"], output_dir) if p.get("trace") else DASH,
            _link(run / snapshot, snapshot, output_dir) if snapshot else str(p.get("memory_snapshot_reason") or DASH),
        ])
    return Table(
        ["case", "trace (Perfetto / chrome://tracing)", "memory snapshot (pytorch.org/memory_viz)"], rows,
        note="Files in each run folder. Open a trace in ui.perfetto.dev or chrome://tracing (both read the "
        ".gz); drag a snapshot onto pytorch.org/memory_viz.",
    )
