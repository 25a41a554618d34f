"""The Scaling section of a run with a sweep (`sweep:` in its suite, `dstbench.suite.sweep`): how
speedup and memory reduction move with each swept axis, and where the FLOP and shape limits are.

Every figure is the derived one (`dstbench.results.derive`), so it is computed within its point:
a case against its own point's reference, dense and small_dense. An *axis* is a swept key whose
value changes between the points shown; a key that changes in lockstep with an earlier one (zipped
`model.num_heads` beside `model.embed_dim`) is named beside it instead of getting a panel row of its
own. A line is one method at one density (and one value of every other axis, in a product sweep),
drawn against the axis with its 95% interval; the speedup panel draws the case's FLOP limit
(dashed) and, for compact methods, its shape limit (dotted) beside it in the line's colour. Absent
without a sweep.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from dstbench.report.figures import Plot, density_markers, is_narrow, legend_outside, new_figure, palette
from dstbench.report.sections import Table, register_plot, register_table
from dstbench.report.tables import ordered
from dstbench.results.replicates import frame_points
from dstbench.suite.cases import short_keys, value_text
from dstbench.util.text import DASH, ci_text, missing, percent

# (column, low, high, label, unit) of each panel, left to right (top to bottom on a phone).
PANELS = (
    ("speedup", "speedup_ci_low", "speedup_ci_high", "speedup vs {ref}", "×"),
    ("speedup_vs_dense", "speedup_vs_dense_ci_low", "speedup_vs_dense_ci_high", "speedup vs dense", "×"),
    ("memory_reduction", None, None, "memory reduction vs {ref}", "%"),
)
LINE_STYLES = ("-", "--", "-.", ":")


def swept_rows(derived: pd.DataFrame) -> pd.DataFrame:
    """The ok rows of the run's sweep points, less the reference's own (its figures are 1 and 0 by
    construction); empty without a sweep."""
    if derived.empty or "sweep" not in derived or not frame_points(derived).astype(bool).any():
        return derived.iloc[:0]
    reference = derived.attrs.get("reference")
    rows = derived[(derived["status"] == "ok") & derived["sweep"].map(lambda s: isinstance(s, dict))]
    return rows[rows["method"] != reference] if reference else rows


def axes_of(rows: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """Each axis (a swept key whose value changes among `rows`) with the keys that change in
    lockstep with it (one value of theirs for each of its, and back), in sweep order."""
    keys = list(dict.fromkeys(k for sweep in rows["sweep"] for k in sweep))
    columns = {key: [value_text(sweep.get(key)) for sweep in rows["sweep"]] for key in keys}
    varying = [key for key in keys if len(set(columns[key])) > 1]
    axes: list[tuple[str, list[str]]] = []
    for key in varying:
        leader = next((axis for axis, _ in axes if _lockstep(columns[axis], columns[key])), None)
        if leader is None:
            axes.append((key, []))
        else:
            next(companions for axis, companions in axes if axis == leader).append(key)
    return axes


def _lockstep(a: list[str], b: list[str]) -> bool:
    pairs = set(zip(a, b))
    return len({x for x, _ in pairs}) == len(pairs) == len({y for _, y in pairs})


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _doubling(xs: list[float]) -> bool:
    """Whether numeric x values span a factor of 4 or more (drawn on a log2 axis then)."""
    return bool(xs) and min(xs) > 0 and max(xs) / min(xs) >= 4


def _positions(values: list[Any]) -> tuple[dict[str, float], list[str]]:
    """x of each value (by its text): the number itself when every value is one, else its rank."""
    distinct = list(dict.fromkeys(values))
    if _numeric(distinct):
        ordered_values = sorted(distinct)
        return {value_text(v): float(v) for v in ordered_values}, [value_text(v) for v in ordered_values]
    labels = [value_text(v) for v in distinct]
    return {label: float(i) for i, label in enumerate(labels)}, labels


def _axis_label(axis: str, companions: list[str], rows: pd.DataFrame, names: dict[str, str]) -> str:
    if not companions:
        return names[axis]
    pairs = {value_text(s.get(axis)): "/".join(value_text(s.get(c)) for c in companions) for s in rows["sweep"]}
    beside = ", ".join(names[c] for c in companions)
    return f"{names[axis]} ({beside} {' · '.join(pairs[k] for k in sorted(pairs, key=lambda t: _sort_key(t)))})"


def _sort_key(text: str) -> tuple[int, Any]:
    try:
        return (0, float(text))
    except ValueError:
        return (1, text)


def _lines(rows: pd.DataFrame, axis: str, others: list[str], names: dict[str, str]) -> dict[tuple[str, float, str], pd.DataFrame]:
    """The rows of each line against `axis`: (method, density, values of the other axes)."""
    fixed = rows["sweep"].map(lambda s: ",".join(f"{names[k]}={value_text(s.get(k))}" for k in others))
    out: dict[tuple[str, float, str], pd.DataFrame] = {}
    for (method, density, rest), part in rows.assign(_rest=fixed).groupby(["method", "density", "_rest"], sort=False):
        out[(str(method), float(density), str(rest))] = part.drop(columns="_rest")
    return out


@register_plot(
    "scaling_plot", "Scaling by swept axis", order=105,
    caption="Speedup against the reference and against dense, and memory reduction, against each swept axis of the "
    "run's sweep: one line per method and density (colour the method, marker the density), with its 95% interval; "
    "dashed, the FLOP limit; dotted (compact methods), the shape limit small_dense sets. Each point's figures are "
    "computed within that point.",
)
def scaling_plot(derived: pd.DataFrame) -> Plot | None:
    rows = swept_rows(derived)
    axes = axes_of(rows) if len(rows) else []
    if not axes:
        return None
    rows = ordered(rows)
    names = short_keys(list(dict.fromkeys(k for s in rows["sweep"] for k in s)))
    reference = derived.attrs.get("reference") or "the reference"
    colors = palette(list(pd.unique(rows["method"].astype(str))))
    markers = density_markers(list(derived["density"].astype(float)))
    # Against dense is the first panel again when dense is the reference.
    shown = [p for p in PANELS if not (reference == "dense" and p[0] == "speedup_vs_dense")]
    narrow = is_narrow()
    shape = {"nrows": len(axes) * len(shown), "ncols": 1} if narrow else {"nrows": len(axes), "ncols": len(shown)}
    width, height = (6.4, 3.4 * len(axes) * len(shown)) if narrow else (5.2 * len(shown), 3.8 * len(axes))
    figure, grid = new_figure(width, height, squeeze=False, **shape)
    panels = grid.reshape(len(axes), len(shown))
    alts, handles, labels = [], {}, {}
    for (axis, companions), row_axes in zip(axes, panels):
        others = [a for a, _ in axes if a != axis]
        xs, ticks = _positions([s.get(axis) for s in rows["sweep"]])
        label = _axis_label(axis, companions, rows, names)
        lines = _lines(rows, axis, others, names)
        styles = {rest: LINE_STYLES[i % len(LINE_STYLES)] for i, rest in enumerate(dict.fromkeys(k[2] for k in lines))}
        for ax, (column, low, high, title, unit) in zip(row_axes, shown):
            scale = 100.0 if unit == "%" else 1.0
            for (method, density, rest), part in lines.items():
                part = part[part[column].notna()]
                if part.empty or (column == "speedup_vs_dense" and (part["kind"] == "dense").all()):
                    continue  # dense against itself is 1 by construction
                x = [xs[value_text(s.get(axis))] for s in part["sweep"]]
                order = np.argsort(x)
                x = np.asarray(x)[order]
                y = part[column].to_numpy(dtype=float)[order] * scale
                color, style, marker = colors[method], styles[rest], markers[density]
                if low is not None:
                    lo = np.clip(y - part[low].to_numpy(dtype=float)[order], 0, None)
                    hi = np.clip(part[high].to_numpy(dtype=float)[order] - y, 0, None)
                    ax.errorbar(x, y, yerr=[np.nan_to_num(lo), np.nan_to_num(hi)], color=color, linestyle=style,
                                marker=marker, capsize=3, markersize=6)
                else:
                    ax.plot(x, y, color=color, linestyle=style, marker=marker, markersize=6)
                if column == "speedup":
                    _limits(ax, part, order, x, color)
                name = f"{method} @ {density:g}" + (f" · {rest}" if rest else "")
                handles.setdefault(name, Line2D([], [], color=color, linestyle=style, marker=marker))
                labels.setdefault(name, name)
                alts.append(_alt(name, label, title.format(ref=reference), part, column, low, high, order, x, ticks, xs, scale))
            if unit == "×":
                ax.axhline(1.0, color="0.3", linewidth=0.8)
            if _doubling(list(xs.values())):
                ax.set_xscale("log", base=2)  # widths, batches, tokens double from point to point
            ax.set_xticks([xs[t] for t in ticks], ticks)
            ax.minorticks_off()
            ax.set(xlabel=label, ylabel=f"{title.format(ref=reference)} ({unit})")
    handles["FLOP limit"] = Line2D([], [], color="0.3", linestyle="--", marker="x")
    labels["FLOP limit"] = "FLOP limit"
    if "shape_limit" in rows and rows["shape_limit"].notna().any():
        handles["shape limit"] = Line2D([], [], color="0.3", linestyle=":", marker="+")
        labels["shape limit"] = "shape limit"
    legend_outside(figure, list(handles.values()), list(labels.values()))
    swept = ", ".join(label for label in (_axis_label(a, c, rows, names) for a, c in axes))
    return Plot(figure, f"Scaling against {swept}. " + "; ".join(alts) + ".", f"Speedup and memory reduction against {swept}")


def _limits(ax: Any, part: pd.DataFrame, order: np.ndarray, x: np.ndarray, color: Any) -> None:
    """The FLOP limit (dashed) and shape limit (dotted) of a line's cases, beside it."""
    for column, style, marker in (("flop_limit", "--", "x"), ("shape_limit", ":", "+")):
        if column in part and part[column].notna().any():
            values = part[column].to_numpy(dtype=float)[order]
            keep = ~np.isnan(values)
            ax.plot(x[keep], values[keep], color=color, linestyle=style, marker=marker, alpha=0.7)


def _alt(
    name: str, axis: str, title: str, part: pd.DataFrame, column: str, low: str | None, high: str | None,
    order: np.ndarray, x: np.ndarray, ticks: list[str], xs: dict[str, float], scale: float,
) -> str:
    """'barter @ 0.1, speedup vs dense against embed_dim: 3.10× [2.9, 3.3] at 192, ...' for the alt text."""
    at = {v: t for t, v in xs.items()}
    values = []
    for i, index in enumerate(order):
        r = part.iloc[index]
        text = f"{float(r[column]) * scale:.1f}%" if scale != 1.0 else f"{float(r[column]):.2f}×"
        if low is not None and not missing(r.get(low)):
            text += f" [{float(r[low]):.2f}, {float(r[high]):.2f}]"
        if column == "speedup" and not missing(r.get("flop_limit")):
            text += f" (FLOP limit {float(r['flop_limit']):.2f}×)"
        values.append(f"{text} at {at.get(float(x[i]), '?')}")
    return f"{name}, {title} against {axis}: {', '.join(values)}"


def _times(value: Any) -> str:
    return DASH if missing(value) else f"{float(value):.2f}×"


def _with_ci(r: pd.Series, column: str) -> str:
    if missing(r.get(column)):
        return DASH
    return f"{float(r[column]):.2f}× {ci_text(r.get(column + '_ci_low'), r.get(column + '_ci_high')).removeprefix('95% CI ')}"


@register_table("scaling", "Scaling", order=15)
def scaling_table(derived: pd.DataFrame) -> Table | None:
    rows = swept_rows(derived)
    axes = axes_of(rows) if len(rows) else []
    if not axes:
        return None
    keys = [a for a, companions in axes for a in (a, *companions)]
    names = short_keys(list(dict.fromkeys(k for s in rows["sweep"] for k in s)))
    reference = derived.attrs.get("reference") or "the reference"
    method_rank = {m: i for i, m in enumerate(pd.unique(derived["method"]))}
    keyed = rows.assign(
        _method=rows["method"].map(method_rank), _density=-rows["density"].astype(float),
        **{f"_{i}": rows["sweep"].map(lambda s, k=k: _sort_key(value_text(s.get(k)))) for i, k in enumerate(keys)},
    )
    order = ["_method", "_density", *(f"_{i}" for i in range(len(keys)))]
    rows = keyed.sort_values(order, kind="stable").drop(columns=order)
    compiled = "recompiles" in rows and rows["recompiles"].notna().any()
    body = [
        [str(r["method"]), f"{float(r['density']):g}", *(value_text(r["sweep"].get(k)) for k in keys),
         _with_ci(r, "speedup"), _with_ci(r, "speedup_vs_dense"), _times(r.get("flop_limit")), percent(r.get("flop_fraction")),
         _times(r.get("shape_limit")), percent(r.get("shape_fraction")), percent(r.get("memory_reduction"))]
        + ([DASH if missing(r.get("recompiles")) else str(int(r["recompiles"]))] if compiled else [])
        for _, r in rows.iterrows()
    ]
    headers = (["method", "density", *(names[k] for k in keys), f"speedup vs {reference} [95% CI]", "vs dense [95% CI]",
                "FLOP limit", "of limit", "shape limit", "of shape limit", f"memory reduction vs {reference}"]
               + (["recompiles"] if compiled else []))
    return Table(
        headers, body, align=["left"] * (2 + len(keys)) + ["right"] * (7 + compiled),
        note=(
            "One row per method, density and sweep point, each figure computed within its point (against that point's "
            f"{reference}{'' if reference == 'dense' else ' and dense'}; the shape limit from its small_dense). "
            "'of limit' is the speedup's share of the FLOP limit, 'of shape limit' "
            "small_dense's time / the method's (compact methods): where the compact advantage grows, saturates or inverts "
            "along an axis reads off these columns."
        ),
    )
