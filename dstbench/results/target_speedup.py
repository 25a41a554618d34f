"""Speedups to a top-1 target, and each case's time to target pooled over its seeds.

A speedup to target is T(other) / T(case), each T = S x p + U x c (`dstbench.results.target_time`),
their seeds paired. Where the two cases were timed in the same interleaved rounds (`mode: both`
times them as `mode: speed` does), the step times enter as speed mode's speedup does: the other
case's step is priced at rho x p(case), where rho is the paired ratio of their steps without
updates, round by round, summarised by process set (`dstbench.results.intervals`), so the
process-to-process spread is in its interval and the machine's drift between rounds cancels. The
95% interval is the delta method on log(speedup), with independent parts:

- the seeds: the spread of the per-seed difference of the two (S x p + U x c over its mean);
- the step ratio: w(other)^2 Var(log rho), w the share of steps in T (1 without updates);
- the case's own step time where the two shares differ: (w(other) - w(case))^2 Var(log p(case));
- each case's update cost: its share of T squared times Var(log c).

Where they were not timed in the same rounds (`timing.interleave: false`, a launcher that cannot
interleave, runs from before the timing phase), each step time comes from its own case and both
timing parts are added as if independent (`basis` says which).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dstbench.results.intervals import (
    LEVEL, BetweenProcesses, UnitSamples, interval, judged_units, paired_rounds, pool_between, starved_flags, summarize,
)
from dstbench.results.target_time import (
    TIME_COLUMNS, RunCase, StepTime, add_target_times, case_keys, case_timings, log_interval, seconds_of, target_time,
    timing_parts,
)

SPEEDUP_COLUMNS = tuple(
    f"time_to_target_speedup{vs}{part}" for vs in ("", "_vs_dense") for part in ("", "_ci_low", "_ci_high", "_basis")
)
TEXT_COLUMNS = ("time_to_target_covers", "time_to_target_basis", "time_to_target_speedup_basis", "time_to_target_speedup_vs_dense_basis")

# -- the paired step-time ratio ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StepRatio:
    """p(other) / p(case) from the rounds both were timed in: the ratio, the variance of its log
    and its degrees of freedom, and what it rests on."""

    value: float
    log_var: float
    df: float
    covers: str


def round_steps(line: Any) -> dict[tuple[str, int], tuple[float, int, bool]]:
    """(group, round) -> (ms per step less the updates in the segment, process set, starved) of a
    line's tagged segments; empty where the updates in a segment are unknown."""
    keys = ("segment_ms", "segment_group", "segment_round")
    ms, groups, rounds = (line.get(k) for k in keys)
    steps = line.get("segment_steps")
    if not all(isinstance(v, list) for v in (ms, groups, rounds)) or len({len(ms), len(groups), len(rounds)}) != 1:
        return {}
    if not isinstance(steps, numbers.Real) or steps <= 0:
        return {}
    topology = line.get("segment_topology_ms")
    if not isinstance(topology, list) or len(topology) != len(ms):
        if line.get("topology_updates"):
            return {}
        topology = [0.0] * len(ms)
    process = line.get("segment_process")
    process = process if isinstance(process, list) and len(process) == len(ms) else [0] * len(ms)
    out = {}
    for x, t, g, r, p, s in zip(ms, topology, groups, rounds, process, starved_flags(line)):
        if g and isinstance(x, (int, float)) and math.isfinite(x) and x - float(t or 0) > 0:
            out[(str(g), int(r))] = ((x - float(t or 0)) / steps, int(p or 0), bool(s))
    return out


def paired_step_units(pairs: Sequence[tuple[Any, Any]], drop_starved: bool = True) -> UnitSamples:
    """log(p(other) / p(case)) of every round both lines of each (other, case) pair were timed in
    (each seed's pair its own processes), by unit; starved rounds left out unless `drop_starved`
    is false."""
    return paired_rounds([(round_steps(other), round_steps(case)) for other, case in pairs], drop_starved)


def step_ratio(pairs: Sequence[tuple[Any, Any]], between: BetweenProcesses) -> StepRatio | None:
    """The paired step-time ratio of the pairs' rounds; None where they share no round (not
    timed side by side) or no unit has two rounds to show a spread."""
    samples = judged_units(lambda drop: paired_step_units(pairs, drop))
    summary = summarize(samples) if samples.paired else None
    if summary is None:
        return None
    iv = interval(summary, between)
    return StepRatio(iv.value, iv.log_se**2, iv.df, f"step-time ratio paired over {iv.covers}")


def partner_case(cases: Iterable[RunCase], key: RunCase, method: str | None) -> RunCase | None:
    """`method`'s case beside `key` among `cases`: at the same density, else its one case at 1.0
    (dense)."""
    run, _, density, point = key
    matches = [k for k in cases if (k[0], k[1], k[3]) == (run, method, point)]
    same = [k for k in matches if math.isclose(k[2], density)]
    return same[0] if same else matches[0] if len(matches) == 1 and matches[0][2] == 1.0 else None


# -- the speedup ------------------------------------------------------------------------------------

Inputs = tuple[Sequence[float], Sequence[float], StepTime]  # steps and updates per seed (aligned by seed), timing


def speedup_to_target(reference: Inputs, case: Inputs, level: float = LEVEL, ratio: StepRatio | None = None) -> tuple[float, float, float]:
    """T(reference) / T(case) over their common seeds (the sequences aligned by seed), with its
    interval (the module docstring): the reference's step priced at `ratio` x the case's where
    the two were timed in the same rounds, else at its own step time."""
    (ref_s, ref_u, ref_t), (own_s, own_u, own_t) = reference, case
    if ratio is not None:
        ref_t = dataclasses.replace(ref_t, step_ms=ratio.value * own_t.step_ms)
    ref, own = target_time(ref_s, ref_u, ref_t, level=level), target_time(own_s, own_u, own_t, level=level)
    if not math.isfinite(ref.seconds) or not math.isfinite(own.seconds) or own.seconds <= 0:
        return (math.nan, math.nan, math.nan)
    if ratio is None:
        parts = timing_parts(float(np.mean(ref_s)), float(np.mean(ref_u)), ref_t, ref.seconds)
        parts += timing_parts(float(np.mean(own_s)), float(np.mean(own_u)), own_t, own.seconds)
    else:
        share_ref = float(np.mean(ref_s)) * ref_t.step_ms / 1e3 / ref.seconds
        share_own = float(np.mean(own_s)) * own_t.step_ms / 1e3 / own.seconds
        parts = [(share_ref**2 * ratio.log_var, ratio.df), ((share_ref - share_own) ** 2 * own_t.step_log_var, own_t.step_df)]
        for updates, timing, total in ((ref_u, ref_t, ref.seconds), (own_u, own_t, own.seconds)):
            if float(np.mean(updates)):
                parts.append(((float(np.mean(updates)) * timing.update_ms / 1e3 / total) ** 2 * timing.update_log_var, timing.update_df))
    if len(ref_s) > 1:
        differences = [seconds_of(a, b, ref_t) / ref.seconds - seconds_of(c, d, own_t) / own.seconds
                       for a, b, c, d in zip(ref_s, ref_u, own_s, own_u)]
        parts.insert(0, (float(np.var(differences, ddof=1)) / len(differences), float(len(differences) - 1)))
    value = ref.seconds / own.seconds
    low, high = log_interval(value, parts, level)
    return (value, low, high)


# -- each case over its seeds -----------------------------------------------------------------------


def _seeds_of(lines: pd.DataFrame) -> dict[Any, tuple[float, float]] | None:
    """seed -> (steps, updates) of a case's lines; None unless every seed that trained reached the
    target (a failed seed is a miss: `dstbench.results.time_to_target.add_time_to_target`)."""
    judged = lines[lines["target_reached"].map(lambda r: r is True or r is False)]
    if judged.empty or not (judged["target_reached"].map(lambda r: r is True)).all():
        return None
    return {row.get("seed", i): (float(row["steps_to_target"]), float(row["updates_to_target"])) for i, row in judged.iterrows()}


def _covers(seeds: int, timing: StepTime, updates: float) -> str:
    parts = [f"{seeds} seed{'s' if seeds != 1 else ''}" + ("" if seeds > 1 else " (no seed spread)"), f"step time {timing.covers}"]
    if updates:
        parts.append(f"update cost from {timing.update_segments} timed segment{'s' if timing.update_segments != 1 else ''}"
                     + (" (its spread not in the interval)" if timing.update_segments < 2 else ""))
    return "; ".join(parts)


def _seed_pairs(derived: pd.DataFrame, keys: pd.Series, other: RunCase, case: RunCase) -> list[tuple[Any, Any]]:
    """The (other's line, case's line) of every seed both timed, ok."""
    ok = derived["status"] == "ok"
    theirs = {row.get("seed"): row for _, row in derived[(keys == other) & ok].iterrows()}
    return [(theirs[row.get("seed")], row) for _, row in derived[(keys == case) & ok].iterrows() if row.get("seed") in theirs]


def pool_target_times(pooled: pd.DataFrame, derived: pd.DataFrame) -> pd.DataFrame:
    """`pooled` (one row per case, `pool_seeds`) with each case's time to target over its seeds and
    its interval, and its speedup to target against the reference and against dense, paired by
    seed (and by round where the two were timed side by side), with what each speedup rests on."""
    out = pooled.copy()
    for column in (*TIME_COLUMNS, *SPEEDUP_COLUMNS):
        if column not in out:
            out[column] = pd.Series(dtype=object if column in TEXT_COLUMNS else float)
    if pooled.empty or "steps_to_target" not in derived or "run" not in derived:
        return out
    if "updates_to_target" not in derived:  # a frame `derive` did not make (expectations add the steps alone)
        derived = add_target_times(derived)
    timings, keys = case_timings(derived), case_keys(derived)
    seeds = {key: _seeds_of(derived[keys == key]) for key in timings}
    pooled_keys = case_keys(pooled)
    reference = derived.attrs.get("reference")

    def inputs(key: RunCase, chosen: list[Any]) -> Inputs | None:
        per_seed, timing = seeds.get(key), timings.get(key)
        if per_seed is None or timing is None or any(s not in per_seed for s in chosen):
            return None
        return [per_seed[s][0] for s in chosen], [per_seed[s][1] for s in chosen], timing

    def partner(key: RunCase, method: str | None) -> RunCase | None:
        return partner_case(timings, key, method)

    # The paired step ratios' between-process variance, pooled over each run's comparisons.
    comparisons = {(key, other): _seed_pairs(derived, keys, other, key)
                   for key in pd.unique(pooled_keys) for other in (partner(key, reference), partner(key, "dense"))
                   if other is not None and other != key}
    between: dict[str, list[Any]] = {}
    for (key, _), pairs in comparisons.items():
        between.setdefault(key[0], []).append(summarize(judged_units(lambda drop, p=pairs: paired_step_units(p, drop))))
    pooled_between = {run: pool_between(summaries) for run, summaries in between.items()}

    for index, row in pooled.iterrows():
        key = pooled_keys[index]
        per_seed, timing = seeds.get(key), timings.get(key)
        values: dict[str, Any] = {c: "" if c in TEXT_COLUMNS else math.nan for c in (*TIME_COLUMNS, *SPEEDUP_COLUMNS)}
        if timing is not None:
            values.update(step_ms_without_updates=timing.step_ms, update_ms=timing.update_ms)
        if per_seed is not None and timing is not None:
            steps, updates = [v[0] for v in per_seed.values()], [v[1] for v in per_seed.values()]
            estimate = target_time(steps, updates, timing)
            values.update(
                time_to_target_s=estimate.seconds, time_to_target_ci_low=estimate.low, time_to_target_ci_high=estimate.high,
                updates_to_target=float(np.mean(updates)),
                time_to_target_covers=_covers(len(steps), timing, float(np.mean(updates))) if math.isfinite(estimate.seconds) else "",
            )
            for suffix, other in (("", partner(key, reference)), ("_vs_dense", partner(key, "dense"))):
                common = [s for s in per_seed if other is not None and seeds.get(other) and s in seeds[other]]
                own, base = inputs(key, common), inputs(other, common) if other else None
                ratio, basis = None, ""
                if other == key:
                    result = (1.0, 1.0, 1.0)
                elif own and base:
                    ratio = step_ratio(comparisons.get((key, other), []), pooled_between.get(key[0], BetweenProcesses()))
                    result = speedup_to_target(base, own, ratio=ratio)
                    clock = ratio.covers if ratio else "step times unpaired (not timed in the same rounds)"
                    basis = f"{len(common)} seed{'s' if len(common) != 1 else ''} paired; {clock}" if math.isfinite(result[0]) else ""
                else:
                    result = (math.nan,) * 3
                names = (f"time_to_target_speedup{suffix}{p}" for p in ("", "_ci_low", "_ci_high", "_basis"))
                values.update(zip(names, (*result, basis)))
        lines = derived[keys == key]
        values["train_time_to_target_s"] = float(lines["train_time_to_target_s"].mean()) if per_seed is not None else math.nan
        basis_texts = [b for b in lines.get("time_to_target_basis", pd.Series(dtype=object)) if isinstance(b, str) and b]
        values["time_to_target_basis"] = basis_texts[0] if basis_texts else ""
        for column, value in values.items():
            out.at[index, column] = value
    return out
