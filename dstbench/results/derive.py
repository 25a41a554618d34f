"""Result lines -> one DataFrame with the figures a report shows, relative to a reference method.

Every figure is derived from what the run measured: paired ratios of segment samples timed in the
same round of the same interleaved group (or, where no segment pairs, ratios of medians with a
bootstrap interval), byte counts and FLOP counts from the result lines.

Speedup (`speedup_stats`): where a case and its reference were timed in the same group, round r
gives the ratio reference_ms[r] / method_ms[r]; the rounds come in process units (one process set of
one group), and the speedup and its 95% interval are those of `dstbench.results.intervals`: the mean
of the units' median log ratios, with a variance that holds the process-to-process spread pooled
over the run's comparisons (`speedup_covers` says what it covers: "2 processes x 5 rounds", or
"..., within one process" when a run has one unit per case). A round in which either side was
starved is left out of that ratio (`speedup_starved` counts them). Elsewhere (runs made with
`interleave: false`, lines written before interleaving existed) it is the ratio of medians with a
percentile bootstrap interval. `speedup_basis` says which.

Plausibility (`plausibility`): a figure beyond what physics allows is flagged in `implausible` and
left out of the headline: a speedup whose interval clears one of its limits (`SPEED_LIMITS`, each a
derived column: the FLOP limit and, for compact methods, the shape limit) by more than
`LIMIT_TOLERANCE`, or a masked method on dense kernels faster than dense beyond its interval by more
than `MASKED_TOLERANCE` (it does dense's matmuls plus masking).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from dstbench.util.text import ci_text, present
from dstbench.measure.trackers.noise import CONTENDED_FRACTION
from dstbench.results.intervals import BetweenProcesses, starved_flags
from dstbench.results.speedup import between_processes, reference_row, speedup_stats
from dstbench.results.record import iter_results, result_fields, segment_samples
from dstbench.results.replicates import frame_points, frame_replicates, point_of, stored_seed
from dstbench.results.end_to_end import add_end_to_end
from dstbench.results.target_time import add_target_times
from dstbench.results.time_to_target import add_time_to_target

# Beside the reference's figures (`baseline_ratios`): the speedup against dense, and for compact
# methods the shape limit that small_dense, a dense model of their shapes, sets.
BASELINE_COLUMNS = ("speedup_vs_dense", "speedup_vs_dense_ci_low", "speedup_vs_dense_ci_high", "shape_limit", "shape_fraction")
SHAPE_BASELINE = "small_dense"  # a dense model of the compact methods' shapes (methods/small_dense.py)
DERIVED_COLUMNS = (
    "reference", "speedup", "speedup_ci_low", "speedup_ci_high", "speedup_basis", "speedup_pairs", "speedup_covers",
    "speedup_starved",
    "memory_basis", "memory_bytes", "memory_reduction", "state_ratio", "activation_ratio", "flop_limit",
    "flop_fraction", "topology_share", "segments", "ms_per_step", "spread", "noise_level", "contended",
    "implausible",
) + BASELINE_COLUMNS
TEXT_COLUMNS = ("reference", "memory_basis", "speedup_basis", "speedup_covers", "noise_level", "implausible")
# IQR / median of a case's segment times above which it is noisy / very noisy (torch.utils.benchmark's).
NOISY, VERY_NOISY = 0.10, 0.25
# Speedup limits the physics of a case allows, by derived column: a limit added here is checked by
# `plausibility` (and shown by the tables that list it).
SPEED_LIMITS = {"flop_limit": "FLOP limit", "shape_limit": "shape limit"}
# FLOP counts leave out elementwise work, masking and topology updates, which differ between
# methods (a masked method measured 1.11x vs another with the same FLOPs): room before a limit binds.
LIMIT_TOLERANCE = 0.20
MASKED_TOLERANCE = 0.05
# |density_achieved - density| beyond which a case is flagged as not at the density it is named by;
# also the default tolerance of a `density_achieved` expectation.
DENSITY_TOLERANCE = 0.01


def noise_level(spread: float) -> str:
    """"very noisy", "noisy" or "" for an IQR / median."""
    if not np.isfinite(spread):
        return ""
    return "very noisy" if spread > VERY_NOISY else "noisy" if spread > NOISY else ""


def plausibility(row: pd.Series, values: dict[str, Any]) -> list[str]:
    """Why `row`'s speed figures are beyond what physics allows (see the module docstring)."""
    flags = []
    low = values.get("speedup_ci_low")
    for column, label in SPEED_LIMITS.items():
        limit = values.get(column)
        if present(low) and present(limit) and limit > 0 and low > limit * (1 + LIMIT_TOLERANCE):
            flags.append(
                f"speedup {values['speedup']:.2f}x [{low:.2f}, {values['speedup_ci_high']:.2f}] is beyond its {label} "
                f"{limit:.2f}x ({values['speedup'] / limit:.0%} of it)"
            )
    dense_low = values.get("speedup_vs_dense_ci_low")
    # Only on dense kernels: sparse kernels (execution csr, 2:4) may beat dense legitimately.
    on_dense_kernels = not present(row.get("execution")) or row.get("execution") == "masked"
    if row.get("kind") == "masked" and on_dense_kernels and present(dense_low) and dense_low > 1 + MASKED_TOLERANCE:
        flags.append(
            f"masked, yet {values['speedup_vs_dense']:.2f}x [{dense_low:.2f}, {values['speedup_vs_dense_ci_high']:.2f}] "
            "faster than dense, whose matmuls it repeats"
        )
    return flags


def load_frame(run_dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Every result line of the given run folders, one row per case and seed, with `run` naming its
    folder and `point` its sweep point ("" without a sweep). A line written before lines named
    their seed gets the one its run's suite names (its first with `seeds:`)."""
    rows = []
    for run_dir in run_dirs:
        first_seed = None
        for line in iter_results(Path(run_dir)):
            if line.get("seed") is None:
                first_seed = stored_seed(run_dir) if first_seed is None else first_seed
                line = {**line, "seed": first_seed}
            rows.append({**line, "run": str(run_dir)})
    frame = pd.DataFrame(rows)
    if not frame.empty:
        # Every field of a result line is a column, even where no line has it (lines written by
        # another version, or by hand): sections test values, never whether a column exists.
        for name in (spec.name for spec in result_fields()):
            if name not in frame:
                frame[name] = None
        frame["point"] = frame_points(frame)
    return frame


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


def contended_in_a_group(row: pd.Series | dict[str, Any]) -> bool:
    """Whether the case was contended in one of its groups: the contention rule applied to each
    group's segments (dense, timed in every density's group, is not judged on all of them pooled)."""
    noise = row.get("noise")
    if not isinstance(noise, dict):
        return False
    flags, groups = starved_flags(row), row.get("segment_group")
    if not flags or not isinstance(groups, list) or len(groups) != len(flags):
        return bool(noise.get("contended"))
    by_group: dict[str, list[bool]] = {}
    for flag, group in zip(flags, groups):
        by_group.setdefault(str(group), []).append(flag)
    return bool(noise.get("contended")) or any(sum(f) >= CONTENDED_FRACTION * len(f) for f in by_group.values())


def _speed_values(row: pd.Series, values: dict[str, Any]) -> None:
    """The case's own timing figures: segments, ms per step, spread and noise, contention."""
    segments = segment_samples(row.get("segment_ms"))
    values["segments"] = len(segments) if row["status"] == "ok" else np.nan
    values["contended"] = contended_in_a_group(row)
    if row["status"] != "ok" or not segments:
        return
    median = float(np.median(segments))
    if sum(segments) > 0:
        # Under torch.compile the recompilations a topology update causes are charged to it.
        charged = float(row.get("topology_ms") or 0.0) + float(row.get("topology_recompile_ms") or 0.0)
        values["topology_share"] = charged / sum(segments)
    steps = row.get("segment_steps")
    if present(steps) and float(steps) > 0:
        values["ms_per_step"] = median / float(steps)
    if median > 0:
        q1, q3 = np.percentile(segments, [25, 75])
        values["spread"] = float(q3 - q1) / median
        values["noise_level"] = noise_level(values["spread"])


def derive(frame: pd.DataFrame, reference: str, suite_targets: Mapping[str, float | None] | None = None) -> pd.DataFrame:
    """Add speedup (with its 95% CI and basis), memory reduction, byte ratios, FLOP limit, topology
    share, the case's own timing figures (segments, ms per step, spread, noise level, contended)
    and plausibility flags, `point`, each row's sweep point, and the steps its curve took to a
    top-1 target (`dstbench.results.time_to_target`) with their seconds at its measured step time
    (`dstbench.results.target_time`).

    Failed cases keep their rows (status says why) with every derived figure NaN. In a run with a
    sweep every figure is computed within its point: a case is compared with its point's reference,
    dense and small_dense, and the between-process variance is pooled over its point's comparisons.
    """
    points = frame_points(frame)
    # Within each point and seed (`frame_replicates`): a case's speedup pairs it with its own seed's reference.
    replicates = frame_replicates(frame) if len(frame) else points
    if len(frame) == 0 or replicates.nunique() <= 1:
        out = _derive_point(frame, reference)
    else:
        parts = [_derive_point(frame[replicates == key], reference) for key in pd.unique(replicates)]
        out = pd.concat(parts).loc[frame.index]
    out["point"] = points
    out.attrs["reference"] = reference
    return add_end_to_end(add_target_times(add_time_to_target(out, suite_targets))) if "run" in out else out


def _derive_point(frame: pd.DataFrame, reference: str) -> pd.DataFrame:
    """`derive` for the rows of one sweep point (or of a run without a sweep)."""
    out = frame.copy()
    columns: dict[str, list[Any]] = {key: [] for key in DERIVED_COLUMNS}
    between = between_processes(frame, reference)
    baselines = baseline_ratios(frame, reference, between)
    for index, row in frame.iterrows():
        ref = reference_row(frame, reference, float(row["density"]), row.get("run"))
        ok = row["status"] == "ok" and ref is not None
        values: dict[str, Any] = dict.fromkeys(columns, np.nan)
        values.update(
            reference=reference if ref is not None else None, speedup_basis="", speedup_covers="", noise_level="", implausible="",
        )
        own_mem, basis = _memory(row)
        values["memory_basis"], values["memory_bytes"] = basis, own_mem
        _speed_values(row, values)
        values.update(baselines.loc[index].to_dict())
        # An accuracy-only case has no timed segments: nothing to take a speedup from.
        stats = speedup_stats(row, ref, same=ref.name == index, between=between.get(row.get("run"))) if ok else None
        if stats is not None:
            values.update(
                speedup=stats.value, speedup_ci_low=stats.ci_low, speedup_ci_high=stats.ci_high,
                speedup_basis=stats.basis, speedup_pairs=stats.pairs, speedup_covers=stats.covers,
                speedup_starved=stats.starved,
            )
            # A ratio whose rounds were starved on either side too often is as unreliable as a
            # contended case, whatever each side's own rule said.
            if stats.pairs + stats.starved and stats.starved >= CONTENDED_FRACTION * (stats.pairs + stats.starved):
                values["contended"] = True
        if ok:
            ref_mem, ref_basis = _memory(ref)
            if basis == ref_basis and ref_mem and not np.isnan(ref_mem):
                values["memory_reduction"] = 1.0 - own_mem / ref_mem
            values["state_ratio"] = _ratio(row, ref, "state_bytes")
            values["activation_ratio"] = _ratio(row, ref, "activation_bytes")
            if present(row.get("flops_per_step")) and present(ref.get("flops_per_step")) and row["flops_per_step"] and ref["flops_per_step"]:
                values["flop_limit"] = float(ref["flops_per_step"]) / float(row["flops_per_step"])
                values["flop_fraction"] = values["speedup"] / values["flop_limit"]  # NaN without a speedup
        if row["status"] == "ok":
            values["implausible"] = "; ".join(plausibility(row, values))
        for key in columns:
            columns[key].append(values[key])
    for key, values_list in columns.items():
        dtype = object if key in TEXT_COLUMNS else bool if key == "contended" else float
        out[key] = pd.Series(values_list, index=out.index, dtype=dtype)
    out["density_off_target"] = pd.Series([density_off_target(r) for _, r in frame.iterrows()], index=out.index, dtype=bool)
    # Named even where no case could be compared with it (the reference failed everywhere).
    out.attrs["reference"] = reference
    return out


def density_off_target(row: pd.Series | dict[str, Any]) -> bool:
    """Whether a case ran at a density more than `DENSITY_TOLERANCE` from the one it is named by
    (gmp still pruning at the timed segments, a compact method rounding to whole units)."""
    achieved, target = row.get("density_achieved"), row.get("density")
    if row.get("status") != "ok" or not present(achieved) or not present(target):
        return False
    return abs(float(achieved) - float(target)) > DENSITY_TOLERANCE


# -- the baselines beside the reference: dense, and small_dense's shapes -------------------------------


def speedup_against(
    frame: pd.DataFrame, row: pd.Series, method: str, between: dict[Any, BetweenProcesses] | None = None,
) -> tuple[float, float, float]:
    """`method`'s time / this row's at the row's density (a dense `method` at 1.0), with the same
    95% interval as `speedup` (`speedup_stats`: paired rounds where they exist); NaNs where either
    side has no timed ok case."""
    other = reference_row(frame, method, float(row["density"]), row.get("run"))
    if row["status"] != "ok" or other is None:
        return (np.nan, np.nan, np.nan)
    stats = speedup_stats(row, other, same=other.name == row.name, between=(between or {}).get(row.get("run")))
    return (np.nan, np.nan, np.nan) if stats is None else (stats.value, stats.ci_low, stats.ci_high)


def baseline_ratios(
    frame: pd.DataFrame, reference: str | None, between: dict[Any, BetweenProcesses] | None = None,
) -> pd.DataFrame:
    """Columns beside the reference's figures, one row per line of `frame`:

    - `speedup_vs_dense` (and its CI): the speedup against dense at 1.0, whatever the reference.
    - `shape_limit`, for compact methods: the speedup against the reference that small_dense (a
      plain dense model of the same shapes, nothing else) reaches at the same density, i.e. what a
      compact method at these shapes can at best reach; the FLOP limit is not it, since time does not
      scale with FLOPs at small shapes. `shape_fraction` = time(small_dense) / time(method): the
      share of it reached (1 = as fast as a plain model of its shapes).
    """
    rows = []
    for _, row in frame.iterrows():
        vs_dense = speedup_against(frame, row, "dense", between)
        shape_limit = shape_fraction = np.nan
        if row.get("kind") == "compact":
            shape_fraction = speedup_against(frame, row, SHAPE_BASELINE, between)[0]
            small = reference_row(frame, SHAPE_BASELINE, float(row["density"]), row.get("run"))
            if small is not None and reference:
                shape_limit = speedup_against(frame, small, reference, between)[0]
        rows.append(dict(zip(BASELINE_COLUMNS, (*vs_dense, shape_limit, shape_fraction))))
    return pd.DataFrame(rows, index=frame.index, columns=list(BASELINE_COLUMNS), dtype=float)


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


def run_warnings(derived: pd.DataFrame) -> list[str]:
    """What a reader must know before trusting the figures: contended cases (the result lines'
    `warnings`) and implausible figures, one line each, naming the case."""
    lines = []
    for _, row in derived.iterrows():
        for warning in row.get("warnings") if isinstance(row.get("warnings"), list) else []:
            lines.append(f"{row['case_id']}: {warning}")
        if isinstance(row.get("implausible"), str) and row["implausible"]:
            lines.append(f"{row['case_id']}: implausible, not headlined: {row['implausible']}")
    return lines


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
    flagged = derived["implausible"].astype(bool) if "implausible" in derived else pd.Series(False, index=derived.index)
    out: dict[str, Any] = {
        "cases": int(len(derived)),
        "failed": int((derived["status"] != "ok").sum()),
        "reference": reference,
        "speedup": None,
        "memory": None,
        # Implausible figures are flagged, not headlined; contended cases are named.
        "implausible": [str(c) for c in derived.loc[flagged, "case_id"]] if "case_id" in derived else [],
        "contended": [str(c) for c in derived.loc[derived["contended"].astype(bool), "case_id"]] if "contended" in derived and "case_id" in derived else [],
    }
    speed = others[others["speedup"].notna() & ~flagged.loc[others.index]]
    if not speed.empty:
        best = speed.loc[speed["speedup"].idxmax()]
        out["speedup"] = {
            "method": _named(best), "density": float(best["density"]), "value": float(best["speedup"]),
            "ci_low": float(best["speedup_ci_low"]), "ci_high": float(best["speedup_ci_high"]),
            "vs_dense": _vs_dense(best, reference),
            "ci": ci_text(best["speedup_ci_low"], best["speedup_ci_high"]),
            "basis": best.get("speedup_basis") or "", "contended": bool(best.get("contended")),
            "covers": best.get("speedup_covers") or "",
            # A headline names the fastest case only when it is faster than the reference at all.
            "faster": bool(float(best["speedup"]) > 1.0),
        }
    memory = others[others["memory_reduction"].notna()]
    if not memory.empty:
        best = memory.loc[memory["memory_reduction"].idxmax()]
        out["memory"] = {
            "method": _named(best), "density": float(best["density"]),
            "value": float(best["memory_reduction"]), "basis": best["memory_basis"],
        }
    out["harness"] = harness_options(derived)
    return out


def _named(row: pd.Series) -> str:
    """A headline case's method, with its sweep point when the run has one: `barter [embed_dim=384]`."""
    point = point_of(row)
    return f"{row['method']} [{point}]" if point else str(row["method"])


def _vs_dense(row: pd.Series, reference: str | None) -> dict[str, Any] | None:
    """The headline case's speedup against dense, shown beside the one against the reference."""
    if reference == "dense" or not present(row.get("speedup_vs_dense")):
        return None
    out: dict[str, Any] = {
        key: float(row[f"speedup_vs_dense{suffix}"]) for key, suffix in (("value", ""), ("ci_low", "_ci_low"), ("ci_high", "_ci_high"))
    }
    out["ci"] = ci_text(out["ci_low"], out["ci_high"])
    return out
