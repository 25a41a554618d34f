"""The report's table of tracker figures: every registered tracker's declared field that no other
table shows, one row per case, each as its declaration says.

A field is in it when its tracker declares it for the report (`ResultField.report`, the default)
and it fits a cell: a number, a string or a flag, or a value its `summary` turns into one (energy:
joules per step, or "not measured"). A field shown elsewhere (time, memory, accuracy) opts out in
its declaration. Rows are pooled over seeds as `Run.frame()` pools them: a field declared
`over_seeds="mean"` shows the mean over the ok seeds, any other the first seed's. Over the timed
segments a figure is what its tracker wrote (`over_segments`: a peak, a sum, one window), named in
the table's note with its unit. A column no case has a value for is left out.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from dstbench.measure.trackers.base import SEED_AGGREGATES, SEGMENT_AGGREGATES, ResultField
from dstbench.measure.trackers.registry import registered_trackers
from dstbench.report.sections import Table, register_table
from dstbench.report.tables import identity_columns, ordered, timed_rows
from dstbench.results.pooling import pool_seeds
from dstbench.util.text import DASH, mib, missing, percent

# How a number of a unit reads in a cell, and the unit the header names.
_FORMATS = {
    "bytes": (lambda v: mib(v), "MiB"),
    "FLOPs": (lambda v: f"{float(v) / 1e9:.3g}", "GFLOP"),
    "fraction": (lambda v: percent(v), "%"),
    "ms": (lambda v: f"{float(v):.1f}", "ms"),
    "count": (lambda v: f"{float(v):.0f}", ""),
}


def reported_fields() -> list[ResultField]:
    """The registered trackers' fields the table may show, in the trackers' order."""
    return [spec for tracker in registered_trackers() for spec in tracker.fields if spec.reported]


def cell(spec: ResultField, value: Any) -> str:
    """One figure as the table shows it: formatted by its unit, text as it is, — where absent."""
    shown = spec.shown(value)
    if isinstance(shown, str):
        return shown
    if isinstance(shown, bool):
        return "yes" if shown else "no"
    if missing(shown):
        return DASH
    formatter = _FORMATS.get(spec.shown_unit or "", (lambda v: f"{float(v):.4g}", ""))[0]
    return formatter(shown)


def header(spec: ResultField) -> str:
    unit = spec.shown_unit
    shown_unit = _FORMATS[unit][1] if unit in _FORMATS else unit
    return f"{spec.name} ({shown_unit})" if shown_unit else spec.name


def _how(spec: ResultField, seeded: bool) -> str:
    over = SEGMENT_AGGREGATES.get(spec.over_segments, spec.over_segments)
    parts = [spec.doc, f"shown as {spec.summary_unit or spec.unit or 'text'}" if spec.summary is not None else "",
             over if spec.over_segments != "case" else "", f"over seeds {SEED_AGGREGATES[spec.over_seeds]}" if seeded else ""]
    return f"{spec.name}: " + "; ".join(p for p in parts if p)


@register_table("tracker_fields", "Other tracker figures", order=25,
                caption="What the trackers measured that the speed, memory and accuracy tables do not show.")
def tracker_fields_table(derived: pd.DataFrame) -> Table | None:
    derived = timed_rows(derived)
    specs = [s for s in reported_fields() if s.name in derived and derived[s.name].map(lambda v: not missing(s.shown(v))).any()]
    if derived.empty or not specs:
        return None
    seeded = "seed" in derived and derived["seed"].nunique() > 1
    rows = ordered(pool_seeds(derived) if seeded else derived)
    headers, cells = identity_columns(rows)
    body = [cells(r) + [cell(s, r.get(s.name)) for s in specs] for _, r in rows.iterrows()]
    return Table(
        headers + [header(s) for s in specs], body, align=["left"] * len(headers) + ["right"] * len(specs),
        note="Each as its tracker declares it. " + " ".join(f"{_how(s, seeded)}." for s in specs),
        row_classes=["failed" if status != "ok" else "" for status in rows["status"]],
    )
