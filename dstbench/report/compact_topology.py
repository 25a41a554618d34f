"""A compact method's topology over a run, read from `method_extras` of its result line.

BARTER records, per topology update, the step and the heads and FFN hidden units of each block.
Accepted shapes of `method_extras["topology_history"]` (a list, one entry per update):
`{"step": s, "heads": [h0, h1, ...], "hidden": [n0, n1, ...]}` (what methods/barter.py writes,
starting with the topology at step 0) or `{"step": s, "blocks": [{"heads": h0, "hidden": n0}, ...]}`.
Anything else reads as absent. `method_extras["dense_width"]` (`{"heads": [...], "hidden": [...]}`,
the full-size model's per-block widths), when present, sets the colour scale's top.

An update entry may also carry `"exchange": {"heads": {...}, "hidden": {...}}`, what the update did
to each unit kind: `pruned`, `pruned_clones` (of those, units made at the previous update: copies
of a cloned unit, the first included, or new units), `population` (units before the update),
`clone_population` (of those, units made at the previous update), `moved` (units that changed
block: what the blocks that grew gained), `cloned`, `new` and `asked` (the fraction times the
population, a float: what the schedule asked before the carried remainder and the rounding down).
`exchange_summary` totals them per case and the "Topology exchanges" table shows them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dstbench.util.text import percent
from dstbench.report.sections import Table, register_table
from dstbench.report.tables import ordered
from dstbench.results.replicates import point_of

HISTORY_KEYS = ("topology_history", "topology")
UNIT_KINDS = ("heads", "hidden")
EXCHANGE_FIELDS = ("pruned", "pruned_clones", "population", "clone_population", "moved", "cloned", "new", "asked")


def _per_block(entry: dict[str, Any]) -> tuple[list[float], list[float]] | None:
    if isinstance(entry.get("blocks"), list):
        blocks = [b for b in entry["blocks"] if isinstance(b, dict)]
        return [b.get("heads", np.nan) for b in blocks], [b.get("hidden", np.nan) for b in blocks]
    if isinstance(entry.get("heads"), list) and isinstance(entry.get("hidden"), list):
        return list(entry["heads"]), list(entry["hidden"])
    return None


def topology_history(extras: Any) -> dict[str, Any] | None:
    """`{"steps": [...], "heads": blocks x updates array, "hidden": same}`, or None when absent."""
    if not isinstance(extras, dict):
        return None
    history = next((extras[k] for k in HISTORY_KEYS if isinstance(extras.get(k), list) and extras[k]), None)
    if history is None:
        return None
    steps, heads, hidden = [], [], []
    for entry in history:
        parsed = _per_block(entry) if isinstance(entry, dict) else None
        if parsed is None:
            return None
        steps.append(entry.get("step", len(steps)))
        heads.append(parsed[0])
        hidden.append(parsed[1])
    depth = max(len(h) for h in heads + hidden)
    if depth == 0:
        return None

    def matrix(columns: list[list[float]]) -> np.ndarray:
        padded = [[float(v) if isinstance(v, (int, float)) else np.nan for v in c] + [np.nan] * (depth - len(c)) for c in columns]
        return np.asarray(padded, dtype=float).T

    widths = extras.get("dense_width") if isinstance(extras.get("dense_width"), dict) else {}

    def top(key: str, observed: np.ndarray) -> float:
        full = [v for v in widths.get(key) or [] if isinstance(v, (int, float))]
        values = [float(np.nanmax(observed))] if np.isfinite(observed).any() else []
        return max(full + values) if full or values else 1.0

    out: dict[str, Any] = {"steps": steps, "heads": matrix(heads), "hidden": matrix(hidden)}
    out["max_heads"], out["max_hidden"] = top("heads", out["heads"]), top("hidden", out["hidden"])
    return out


def _history(extras: Any) -> list[Any] | None:
    if not isinstance(extras, dict):
        return None
    return next((extras[k] for k in HISTORY_KEYS if isinstance(extras.get(k), list) and extras[k]), None)


def exchange_summary(extras: Any) -> dict[str, dict[str, float]] | None:
    """Per unit kind, the exchanges of a run: `updates` (that exchanged anything or not, skipped ones
    left out), totals of `pruned`, `moved`, `cloned`, `new`, `asked` (NaN where an update did not
    record it: runs from before the remainder was carried), and over the updates after the first
    (the ones that can meet units made at a previous update) `fresh_pruned_share`, the share of
    pruned units made at the previous update, against `fresh_population_share`, their share of the
    population. None when the history holds no exchange records."""
    records = [e["exchange"] for e in _history(extras) or [] if isinstance(e, dict) and isinstance(e.get("exchange"), dict)]
    if not records:
        return None
    out: dict[str, dict[str, float]] = {}
    for kind in UNIT_KINDS:
        rows = [r[kind] for r in records if isinstance(r.get(kind), dict)]
        if not rows:
            continue

        def total(field: str, rows: list[dict] = rows) -> float:
            return float(sum(r.get(field, 0) or 0 for r in rows))

        later = rows[1:]
        pruned, population = total("pruned", later), total("population", later)
        out[kind] = {
            "updates": len(rows),
            **{field: total(field) for field in ("pruned", "moved", "cloned", "new")},
            "asked": total("asked") if all(isinstance(r.get("asked"), (int, float)) for r in rows) else np.nan,
            "fresh_pruned_share": total("pruned_clones", later) / pruned if pruned else np.nan,
            "fresh_population_share": total("clone_population", later) / population if population else np.nan,
        }
    return out or None


def empty_blocks(extras: Any) -> dict[str, tuple[int, int]] | None:
    """Per unit kind, the blocks holding none of it at the first entry of the topology history
    (step 0) and at the last: a block that lost its last head is never given one back under
    `grow: clone`. None without a history."""
    history = topology_history(extras)
    if history is None:
        return None
    out = {}
    for kind in UNIT_KINDS:
        matrix = history[kind]  # blocks x entries
        if matrix.size:
            out[kind] = (int((matrix[:, 0] == 0).sum()), int((matrix[:, -1] == 0).sum()))
    return out


def empty_block_notes(derived: pd.DataFrame) -> list[str]:
    """One line per compact case (and seed) whose blocks hold no head or no FFN channel at the start
    or the end: 'barter@0.1: blocks without heads 1 → 2 of 4'. What a summary must say: a block
    emptied under `grow: clone` stays empty."""
    if "method_extras" not in derived:
        return []
    notes = []
    for _, r in ordered(derived).iterrows():
        empty, history = empty_blocks(r.get("method_extras")), topology_history(r.get("method_extras"))
        if not empty or history is None:
            continue
        blocks = history["heads"].shape[0]
        parts = [f"without {'heads' if kind == 'heads' else 'FFN channels'} {start} → {end} of {blocks}"
                 for kind, (start, end) in empty.items() if start or end]
        if parts:
            seed = f" seed {int(r['seed'])}" if "seed" in derived and derived["seed"].nunique() > 1 and pd.notna(r.get("seed")) else ""
            case = f"{r['method']}@{float(r['density']):g}" + (f" [{point_of(r)}]" if point_of(r) else "") + seed
            notes.append(f"{case}: blocks {', '.join(parts)} (start → end)")
    return notes


@register_table(
    "topology_exchange_table", "Topology exchanges", order=45,
    caption="What a compact method's topology updates did, per unit kind, summed over the run, and its blocks left "
    "empty of a kind at the start and the end.",
)
def topology_exchange_table(derived: pd.DataFrame) -> Table | None:
    if "method_extras" not in derived:
        return None
    rows = []
    for _, r in ordered(derived).iterrows():
        extras = r.get("method_extras")
        summary, empty = exchange_summary(extras) or {}, empty_blocks(extras) or {}
        seed = f" seed {int(r['seed'])}" if "seed" in derived and derived["seed"].nunique() > 1 and pd.notna(r.get("seed")) else ""
        for kind in [k for k in UNIT_KINDS if k in summary or k in empty]:
            s = summary.get(kind)
            over = s["fresh_pruned_share"] / s["fresh_population_share"] if s and s["fresh_population_share"] else np.nan
            counts = ([str(int(s["updates"])), "—" if not np.isfinite(s["asked"]) else f"{s['asked']:.1f}", str(int(s["pruned"])), percent(s["fresh_pruned_share"]), percent(s["fresh_population_share"]),
                       "—" if not np.isfinite(over) else f"{over:.2f}×", str(int(s["moved"])), str(int(s["new"]))] if s else ["—"] * 8)
            start, end = empty.get(kind, (None, None))
            rows.append([
                str(r["method"]) + (f" [{point_of(r)}]" if point_of(r) else "") + seed, f"{float(r['density']):g}", kind, *counts,
                "—" if start is None else f"{start} → {end}",
            ])
    if not rows:
        return None
    return Table(
        headers=["method", "density", "units", "updates", "asked", "pruned", "pruned: made at previous update",
                 "population: made at previous update", "ratio", "moved between blocks", "new units", "empty blocks: start → end"],
        rows=rows,
        align=["left", "right", "left"] + ["right"] * 9,
        note="Asked: the schedule's fraction times the population, summed over the updates; each update "
        "exchanges what it asks plus the remainder carried from the updates before, rounded down, so pruned "
        "is within one unit of asked where every exchange fit. Units made at an update are the copies of a cloned unit (the first included) and new units; "
        "the two shares are over the updates after the first, and their ratio is above 1 when such "
        "units are pruned more often than their number would say. Empty blocks: blocks holding no unit of "
        "that kind (no head, or no FFN channel) at step 0 and at the end of the run; under grow: clone an "
        "empty block never gets a unit back.",
    )
