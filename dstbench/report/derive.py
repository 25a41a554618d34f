"""Result lines -> one DataFrame with the figures a report shows, relative to a reference method.

Every figure is derived from what the run measured: ratios of medians of raw segment samples,
bootstrap intervals from those samples, byte counts and FLOP counts from the result lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from dstbench.results import iter_results

BOOTSTRAP_RESAMPLES = 2000


def load_frame(run_dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Every result line of the given run folders, one row per case, with `run` naming its folder."""
    rows = []
    for run_dir in run_dirs:
        for line in iter_results(Path(run_dir)):
            rows.append({**line, "run": str(run_dir)})
    return pd.DataFrame(rows)


def bootstrap_speedup_ci(
    reference_ms: list[float], method_ms: list[float], *, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(reference) / median(method), resampling each side."""
    ref, own = np.asarray(reference_ms, float), np.asarray(method_ms, float)
    if len(ref) == 0 or len(own) == 0:
        return (np.nan, np.nan)
    rng = np.random.default_rng(seed)
    ref_medians = np.median(rng.choice(ref, (BOOTSTRAP_RESAMPLES, len(ref))), axis=1)
    own_medians = np.median(rng.choice(own, (BOOTSTRAP_RESAMPLES, len(own))), axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ref_medians / own_medians, [tail, 100 - tail])
    return float(low), float(high)


def _memory(row: pd.Series) -> tuple[float, str]:
    """The memory figure a reduction is computed from, and what it is."""
    if pd.notna(row.get("peak_memory_bytes")):
        return float(row["peak_memory_bytes"]), "allocator peak"
    state, act = row.get("state_bytes"), row.get("activation_bytes")
    if pd.notna(state) and pd.notna(act):
        return float(state) + float(act), "state + activation bytes"
    return np.nan, "not measured"


def reference_row(frame: pd.DataFrame, reference: str, density: float, run: str | None = None) -> pd.Series | None:
    """The ok result of `reference` at `density` (a dense reference is compared at 1.0)."""
    candidates = frame[(frame["method"] == reference) & (frame["status"] == "ok")]
    if run is not None and "run" in candidates:
        candidates = candidates[candidates["run"] == run]
    if candidates.empty:
        return None
    if (candidates["kind"] == "dense").all():
        return candidates.iloc[-1]
    same = candidates[np.isclose(candidates["density"].astype(float), density)]
    return same.iloc[-1] if not same.empty else None


def derive(frame: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Add speedup (with its 95% CI), memory reduction, byte ratios, FLOP limit and topology share."""
    out = frame.copy()
    columns: dict[str, list[Any]] = {
        k: []
        for k in (
            "reference", "speedup", "speedup_ci_low", "speedup_ci_high", "memory_basis",
            "memory_reduction", "state_ratio", "activation_ratio", "flop_limit", "flop_fraction",
            "topology_share",
        )
    }
    for _, row in frame.iterrows():
        ref = reference_row(frame, reference, float(row["density"]), row.get("run"))
        ok = row["status"] == "ok" and ref is not None
        values: dict[str, Any] = dict.fromkeys(columns, np.nan)
        values["reference"] = reference if ref is not None else None
        values["memory_basis"] = _memory(row)[1]
        if row["status"] == "ok" and row.get("segment_ms"):
            values["topology_share"] = (row.get("topology_ms") or 0.0) / float(np.sum(row["segment_ms"]))
        if ok:
            values["speedup"] = float(ref["median_ms"]) / float(row["median_ms"])
            values["speedup_ci_low"], values["speedup_ci_high"] = bootstrap_speedup_ci(
                ref["segment_ms"], row["segment_ms"]
            )
            own_mem, basis = _memory(row)
            ref_mem, ref_basis = _memory(ref)
            if basis == ref_basis:
                values["memory_reduction"] = 1.0 - own_mem / ref_mem
            values["memory_basis"] = basis
            values["state_ratio"] = float(row["state_bytes"]) / float(ref["state_bytes"])
            values["activation_ratio"] = float(row["activation_bytes"]) / float(ref["activation_bytes"])
            if row.get("flops_per_step") and ref.get("flops_per_step"):
                values["flop_limit"] = float(ref["flops_per_step"]) / float(row["flops_per_step"])
                values["flop_fraction"] = values["speedup"] / values["flop_limit"]
        for key in columns:
            columns[key].append(values[key])
    for key, values_list in columns.items():
        out[key] = values_list
    return out
