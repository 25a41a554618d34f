"""Result lines -> one DataFrame with the figures a report shows, relative to a reference method.

Every figure is derived from what the run measured: ratios of medians of raw segment samples,
bootstrap intervals from those samples, byte counts and FLOP counts from the result lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from dstbench.fmt import ci_text, present
from dstbench.results import RESULT_FIELDS, iter_results, segment_samples

BOOTSTRAP_RESAMPLES = 2000
DERIVED_COLUMNS = (
    "reference", "speedup", "speedup_ci_low", "speedup_ci_high", "memory_basis", "memory_bytes",
    "memory_reduction", "state_ratio", "activation_ratio", "flop_limit", "flop_fraction",
    "topology_share",
)


def load_frame(run_dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Every result line of the given run folders, one row per case, with `run` naming its folder."""
    rows = []
    for run_dir in run_dirs:
        for line in iter_results(Path(run_dir)):
            rows.append({**line, "run": str(run_dir)})
    frame = pd.DataFrame(rows)
    if not frame.empty:
        # Every field of a result line is a column, even where no line has it (lines written by
        # another version, or by hand): sections test values, never whether a column exists.
        for name in RESULT_FIELDS:
            if name not in frame:
                frame[name] = None
    return frame


def bootstrap_speedup_ci(
    reference_ms: list[float], method_ms: list[float], *, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(reference) / median(method), resampling each side."""
    ref, own = np.asarray(reference_ms, float), np.asarray(method_ms, float)
    if len(ref) < 2 or len(own) < 2:
        return (np.nan, np.nan)  # one sample has no spread: no interval, not a zero-width one
    rng = np.random.default_rng(seed)
    ref_medians = np.median(rng.choice(ref, (BOOTSTRAP_RESAMPLES, len(ref))), axis=1)
    own_medians = np.median(rng.choice(own, (BOOTSTRAP_RESAMPLES, len(own))), axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(ref_medians / own_medians, [tail, 100 - tail])
    return float(low), float(high)


def _memory(row: pd.Series) -> tuple[float, str]:
    """The memory figure a reduction is computed from, and what it is."""
    if present(row.get("peak_memory_bytes")):
        return float(row["peak_memory_bytes"]), "allocator peak"
    state, act = row.get("state_bytes"), row.get("activation_bytes")
    if present(state) and present(act):
        return float(state) + float(act), "state + activation bytes"
    return np.nan, "not measured"


def _ratio(row: pd.Series, ref: pd.Series, key: str) -> float:
    own, base = row.get(key), ref.get(key)
    return float(own) / float(base) if present(own) and present(base) and float(base) else np.nan


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
    """Add speedup (with its 95% CI), memory reduction, byte ratios, FLOP limit and topology share.

    Failed cases keep their rows (status says why) with every derived figure NaN.
    """
    out = frame.copy()
    columns: dict[str, list[Any]] = {key: [] for key in DERIVED_COLUMNS}
    for index, row in frame.iterrows():
        ref = reference_row(frame, reference, float(row["density"]), row.get("run"))
        ok = row["status"] == "ok" and ref is not None
        values: dict[str, Any] = dict.fromkeys(columns, np.nan)
        values["reference"] = reference if ref is not None else None
        own_mem, basis = _memory(row)
        values["memory_basis"], values["memory_bytes"] = basis, own_mem
        # Samples that were NaN were written as null; they are no measurement.
        segments = segment_samples(row.get("segment_ms"))
        if row["status"] == "ok" and segments and sum(segments) > 0:
            values["topology_share"] = float(row.get("topology_ms") or 0.0) / sum(segments)
        # An accuracy-only case has no timed segments: nothing to take a speedup from.
        timed = ok and present(row.get("median_ms")) and present(ref.get("median_ms")) and float(row["median_ms"]) > 0
        if timed:
            values["speedup"] = float(ref["median_ms"]) / float(row["median_ms"])
            if ref.name == index:
                # The reference against itself: identical samples, the ratio is exactly 1.
                values["speedup_ci_low"] = values["speedup_ci_high"] = 1.0
            else:
                values["speedup_ci_low"], values["speedup_ci_high"] = bootstrap_speedup_ci(
                    segment_samples(ref.get("segment_ms")), segment_samples(row.get("segment_ms"))
                )
        if ok:
            ref_mem, ref_basis = _memory(ref)
            if basis == ref_basis and ref_mem and not np.isnan(ref_mem):
                values["memory_reduction"] = 1.0 - own_mem / ref_mem
            values["state_ratio"] = _ratio(row, ref, "state_bytes")
            values["activation_ratio"] = _ratio(row, ref, "activation_bytes")
            if present(row.get("flops_per_step")) and present(ref.get("flops_per_step")) and row["flops_per_step"]:
                values["flop_limit"] = float(ref["flops_per_step"]) / float(row["flops_per_step"])
                values["flop_fraction"] = values["speedup"] / values["flop_limit"]  # NaN without a speedup
        for key in columns:
            columns[key].append(values[key])
    for key, values_list in columns.items():
        out[key] = pd.Series(values_list, index=out.index, dtype=object if key in ("reference", "memory_basis") else float)
    # Named even where no case could be compared with it (the reference failed everywhere).
    out.attrs["reference"] = reference
    return out


def data_loading(derived: pd.DataFrame) -> list[str]:
    """Distinct ways the cases were fed their batches (the result lines' `data_loading`), e.g.
    'synthetic, device-resident': a reader must know whether data loading was part of the timings."""
    if "data_loading" not in derived:
        return []
    return list(dict.fromkeys(v for v in derived["data_loading"] if isinstance(v, str) and v))


def headline(derived: pd.DataFrame) -> dict[str, Any]:
    """Best speedup and best memory reduction (each with its case) and the case counts.

    The reference method itself is left out: its figures are 1 and 0 by construction.
    """
    reference = derived.attrs.get("reference") or next((r for r in derived["reference"] if isinstance(r, str)), None)
    others = derived[(derived["status"] == "ok") & (derived["method"] != reference)]
    out: dict[str, Any] = {
        "cases": int(len(derived)),
        "failed": int((derived["status"] != "ok").sum()),
        "reference": reference,
        "speedup": None,
        "memory": None,
    }
    speed = others[others["speedup"].notna()]
    if not speed.empty:
        best = speed.loc[speed["speedup"].idxmax()]
        out["speedup"] = {
            "method": best["method"], "density": float(best["density"]), "value": float(best["speedup"]),
            "ci_low": float(best["speedup_ci_low"]), "ci_high": float(best["speedup_ci_high"]),
            "ci": ci_text(best["speedup_ci_low"], best["speedup_ci_high"]),
        }
    memory = others[others["memory_reduction"].notna()]
    if not memory.empty:
        best = memory.loc[memory["memory_reduction"].idxmax()]
        out["memory"] = {
            "method": best["method"], "density": float(best["density"]),
            "value": float(best["memory_reduction"]), "basis": best["memory_basis"],
        }
    return out
