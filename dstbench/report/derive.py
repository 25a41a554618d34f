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
    add_baseline_ratios(out, frame)
    return out


# -- the baselines beside the reference: dense, and small_dense's shapes -------------------------------
BASELINE_COLUMNS = ("speedup_vs_dense", "speedup_vs_dense_ci_low", "speedup_vs_dense_ci_high", "shape_limit", "shape_fraction")
SHAPE_BASELINE = "small_dense"  # a dense model of the compact methods' shapes (methods/small_dense.py)


def speedup_against(frame: pd.DataFrame, row: pd.Series, method: str) -> tuple[float, float, float]:
    """median(`method`) / median(this row) at the row's density (a dense `method` at 1.0), with the
    same 95% interval as `speedup`; NaNs where either side has no timed ok case."""
    other = reference_row(frame, method, float(row["density"]), row.get("run"))
    if row["status"] != "ok" or other is None or not present(row.get("median_ms")) or not present(other.get("median_ms")):
        return (np.nan, np.nan, np.nan)
    if float(row["median_ms"]) <= 0:
        return (np.nan, np.nan, np.nan)
    value = float(other["median_ms"]) / float(row["median_ms"])
    if other.name == row.name:
        return (value, 1.0, 1.0)
    low, high = bootstrap_speedup_ci(segment_samples(other.get("segment_ms")), segment_samples(row.get("segment_ms")))
    return (value, low, high)


def add_baseline_ratios(out: pd.DataFrame, frame: pd.DataFrame) -> None:
    """Columns beside the reference's figures, in place:

    - `speedup_vs_dense` (and its CI): the speedup against dense at 1.0, whatever the reference.
    - `shape_limit`, for compact methods: the speedup against the reference that small_dense (a
      plain dense model of the same shapes, nothing else) reaches at the same density, i.e. what a
      compact method at these shapes can at best reach; the FLOP limit is not it, since time does not
      scale with FLOPs at small shapes. `shape_fraction` = median(small_dense) / median(method): the
      share of it reached (1 = as fast as a plain model of its shapes).
    """
    values: dict[str, list[float]] = {key: [] for key in BASELINE_COLUMNS}
    reference = out.attrs.get("reference")
    for _, row in frame.iterrows():
        vs_dense = speedup_against(frame, row, "dense")
        shape_limit = shape_fraction = np.nan
        if row.get("kind") == "compact":
            shape_fraction = speedup_against(frame, row, SHAPE_BASELINE)[0]
            small = reference_row(frame, SHAPE_BASELINE, float(row["density"]), row.get("run"))
            if small is not None and reference:
                shape_limit = speedup_against(frame, small, reference)[0]
        for key, value in zip(BASELINE_COLUMNS, (*vs_dense, shape_limit, shape_fraction)):
            values[key].append(value)
    for key, column in values.items():
        out[key] = pd.Series(column, index=out.index, dtype=float)


# Baselines: the tables show them, the headline does not name them as the best case (small_dense
# would otherwise win every memory headline from the compact method of its shapes by a few bytes).
BASELINE_METHODS = ("dense", "static", SHAPE_BASELINE)


def methods_under_test(rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` less the baselines (by registered name), unless nothing else is left."""
    names = rows["method_name"] if "method_name" in rows else rows["method"]
    baseline = names.isin(BASELINE_METHODS)
    if "kind" in rows:
        baseline |= rows["kind"] == "dense"
    tested = rows[~baseline]
    return tested if not tested.empty else rows


HARNESS_OPTIONS = ("fuse_norms", "precision")  # set by the suite for every method alike; they move ratios


def harness_options(derived: pd.DataFrame) -> list[str]:
    """The harness settings the cases ran with that move the memory (and speed) ratios, e.g.
    ['fuse_norms on', 'precision fp32']; a setting that differs between cases lists each value.
    Settings a result line does not record are left out."""
    out = []
    for key in HARNESS_OPTIONS:
        if key not in derived:
            continue
        seen = [v for v in dict.fromkeys(derived[key]) if present(v)]
        words = [("on" if v else "off") if isinstance(v, (bool, np.bool_)) else str(v) for v in seen]
        if words:
            out.append(f"{key} {' / '.join(words)}")
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
    others = methods_under_test(others)
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
            "vs_dense": _vs_dense(best, reference),
            "ci": ci_text(best["speedup_ci_low"], best["speedup_ci_high"]),
        }
    memory = others[others["memory_reduction"].notna()]
    if not memory.empty:
        best = memory.loc[memory["memory_reduction"].idxmax()]
        out["memory"] = {
            "method": best["method"], "density": float(best["density"]),
            "value": float(best["memory_reduction"]), "basis": best["memory_basis"],
        }
    out["harness"] = harness_options(derived)
    return out


def _vs_dense(row: pd.Series, reference: str | None) -> dict[str, Any] | None:
    """The headline case's speedup against dense, shown beside the one against the reference."""
    if reference == "dense" or not present(row.get("speedup_vs_dense")):
        return None
    out: dict[str, Any] = {
        key: float(row[f"speedup_vs_dense{suffix}"]) for key, suffix in (("value", ""), ("ci_low", "_ci_low"), ("ci_high", "_ci_high"))
    }
    out["ci"] = ci_text(out["ci_low"], out["ci_high"])
    return out
