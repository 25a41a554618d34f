"""A compact method's topology over a run, read from `method_extras` of its result line.

BARTER records, per topology update, the step and the heads and FFN hidden units of each block.
Accepted shapes of `method_extras["topology_history"]` (a list, one entry per update):
`{"step": s, "heads": [h0, h1, ...], "hidden": [n0, n1, ...]}` (what methods/barter.py writes,
starting with the topology at step 0) or `{"step": s, "blocks": [{"heads": h0, "hidden": n0}, ...]}`.
Anything else reads as absent. `method_extras["dense_width"]` (`{"heads": [...], "hidden": [...]}`,
the full-size model's per-block widths), when present, sets the colour scale's top.
"""

from __future__ import annotations

from typing import Any

import numpy as np

HISTORY_KEYS = ("topology_history", "topology")


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
