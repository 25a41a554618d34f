"""Each case's change of time between two runs, with its interval, for `dstbench compare`
(`dstbench.gates.compare`; the verdict's rule: `dstbench.gates.time_rule`).

A side's samples are grouped by the process sets that timed them (`dstbench.results.intervals`),
with the process-to-process spread pooled over that run's cases, and by the sessions they were
timed in (`dstbench.results.sessions`), with the session-to-session spread pooled over both runs'
cases: the current run is one session, so where the baseline spans several its spread is part of
both sides' intervals; where neither run does, the verdicts say their intervals do not cover it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dstbench.measure.trackers.noise import CONTENDED_FRACTION
from dstbench.results.derive import contended_in_a_group
from dstbench.gates.sides import Side, SideKey, one_process_set
from dstbench.gates.time_rule import DECIDED, TimeVerdict, beyond_p, decide, interval_level
from dstbench.results.intervals import (
    BetweenProcesses, BetweenSessions, UnitSamples, UnitSummary, holm, interval, judged_units, log_change, paired_units, pool_between,
    sample_units, summarize,
)
from dstbench.results.record import segment_samples
from dstbench.results.sessions import assign_sessions, pool_sessions

TIME_BASES = ("auto", "relative", "absolute")


def case_basis(baseline: Side, current: Side, key: SideKey, requested: str) -> str:
    """The basis a case is judged on: `requested`, or under "auto" relative where both runs timed
    it in rounds beside their dense (dense itself too: the reference, which `time_verdicts` judges on
    its own times), else absolute (lines from runs without interleaving, or without dense)."""
    if requested != "auto":
        return requested

    def pairs(side: Side, case: SideKey) -> bool:
        dense = dense_line(side, case)
        return dense is not None and paired_units(side.cases[case], dense, drop_starved=False).paired > 0

    if pairs(baseline, key) and pairs(current, key):
        return "relative"
    is_dense = is_dense_line(baseline.cases[key])
    # Dense is the reference of the cases gated relative to it; with none, an ordinary absolute case.
    others = [k for k in baseline.cases if k.beside(key) and k != key and k in current.cases]
    return "relative" if is_dense and any(pairs(baseline, k) and pairs(current, k) for k in others) else "absolute"


def dense_line(side: Side, key: SideKey) -> dict[str, Any] | None:
    """The run's dense line with the same suite hash and seed as `key` (None for dense itself or none)."""
    for other, line in side.cases.items():
        if other.beside(key) and is_dense_line(line):
            return None if line is side.cases[key] else line
    return None


def is_dense_line(line: dict[str, Any]) -> bool:
    return line.get("kind") == "dense" or line.get("method") == "dense"


def time_units(side: Side, key: SideKey, basis: str) -> UnitSamples | None:
    """log(case ms / dense ms) per round (relative) or log(case ms) per segment (absolute), by
    process unit; None where the basis does not apply (dense itself, relative; no dense line)."""
    line = side.cases[key]
    if basis == "relative":
        dense = dense_line(side, key)
        return None if dense is None else judged_units(lambda drop: paired_units(line, dense, drop))
    return judged_units(lambda drop: sample_units(line, drop))


def case_summary(side: Side, key: SideKey, basis: str) -> UnitSummary | None:
    """The case's units on this basis (`time_units`), each with its session; None without any."""
    units = time_units(side, key, basis)
    return assign_sessions(summarize(units), side.cases[key]) if units is not None else None


def side_summaries(side: Side, basis: str) -> list[UnitSummary]:
    """Every ok case's summary on this basis."""
    return [s for key, line in side.cases.items() if line.get("status") == "ok" and (s := case_summary(side, key, basis))]


def spreads(sides: list[Side], basis: str) -> tuple[list[BetweenProcesses], BetweenSessions]:
    """Each run's between-process variance on this basis, pooled over its ok cases (within
    sessions), and the session-to-session variance pooled over every run's ok cases: a machine's,
    like the process offsets, and seen only in a run whose units span sessions (the baseline)."""
    summaries = [side_summaries(side, basis) for side in sides]
    between = [pool_between(s) for s in summaries]
    return between, pool_sessions((summary, b) for s, b in zip(summaries, between) for summary in s)


def side_contended(line: dict[str, Any], units: UnitSamples | None) -> bool:
    """The case was contended (in any group), or a quarter of the rounds it is judged on were."""
    starved = units is not None and units.paired and units.starved >= CONTENDED_FRACTION * units.paired
    return is_contended(line) or contended_in_a_group(line) or bool(starved)


def compare_time(
    base: Side, cur: Side, key: SideKey, basis: str, between: tuple[BetweenProcesses, BetweenProcesses], alpha: float,
    threshold_pct: float, sessions: BetweenSessions = BetweenSessions(),
) -> TimeVerdict | None:
    """The change of a case's time between the runs with its (1 - 2 alpha) interval and the raw p of
    the test against the band's edge, before the verdict (`decide`); None without samples to judge
    on either side, or, relative, without a dense."""
    base_line, cur_line = base.cases[key], cur.cases[key]
    base_ms, cur_ms = segment_samples(base_line.get("segment_ms")), segment_samples(cur_line.get("segment_ms"))
    if not base_ms or not cur_ms:
        return None
    medians = float(np.median(base_ms)), float(np.median(cur_ms))
    units = time_units(base, key, basis), time_units(cur, key, basis)
    if basis == "relative" and (units[0] is None or units[1] is None):
        return None
    summaries = [assign_sessions(summarize(u), line) if u is not None else None for u, line in zip(units, (base_line, cur_line))]
    if summaries[0] is None or summaries[1] is None:
        return TimeVerdict(*medians, math.nan, math.nan, "inconclusive", basis=basis, why="too few samples for an interval")
    base_iv, cur_iv = (interval(s, b, sessions=sessions) for s, b in zip(summaries, between))
    change = log_change(base_iv, cur_iv)
    low, high = change.interval(interval_level(alpha))
    p = beyond_p(change, threshold_pct)
    floor = sessions.variance * summaries[1].session_share if sessions.seen else 0.0
    kept = base_iv.log_se**2 + floor  # what more sets of the current session leave
    limit_df = kept**2 / (base_iv.log_se**4 / max(base_iv.df, 1e-9) + (floor**2 / sessions.df if floor else 0.0)) if kept else math.inf
    verdict = TimeVerdict(
        *medians, change.ratio, p, "", basis=basis, ci_low=low, ci_high=high, p_raw=p,
        covers=f"{base_iv.covers} | {cur_iv.covers}", change=change, sides_se=(base_iv.log_se, cur_iv.log_se),
        current_units=summaries[1].count, sessions_seen=sessions.seen, current_floor=floor, limit_df=limit_df,
    )
    if side_contended(base_line, units[0]) or side_contended(cur_line, units[1]):
        verdict.verdict = "inconclusive"
        verdict.why = "timed under contention: the change is not attributed"
    return verdict


def is_reference(side: Side, key: SideKey) -> bool:
    """Dense, the time reference of relative gating (no dense line besides itself)."""
    return dense_line(side, key) is None and is_dense_line(side.cases[key])


def is_contended(line: dict[str, Any]) -> bool:
    noise = line.get("noise")
    return isinstance(noise, dict) and bool(noise.get("contended"))


def time_verdicts(
    baseline: Side, current: Side, keys: list[SideKey], *, basis: str, threshold_pct: float, alpha: float,
    protocol_change: str = "",
) -> tuple[dict[SideKey, TimeVerdict], dict[SideKey, float]]:
    """Every gated case's time verdict, p-values Holm-adjusted over the cases with a test, and each
    case's own change of time (absolute basis, current / baseline) for `reference_shifts`. Under the
    relative basis dense, the reference, is judged on its own times. `protocol_change`: the sides
    were timed under different protocols, so every verdict is inconclusive, saying this."""
    found = {b: spreads([baseline, current], b) for b in ("relative", "absolute")}
    pooled = {b: (between[0], between[1]) for b, (between, _) in found.items()}
    sessions = {b: spread for b, (_, spread) in found.items()}
    verdicts: dict[SideKey, TimeVerdict] = {}
    own: dict[SideKey, float] = {}
    for key in keys:
        if not baseline.cases[key].get("status") == "ok" == current.cases[key].get("status"):
            continue
        case = case_basis(baseline, current, key, basis)
        reference = case == "relative" and is_reference(baseline, key)
        judged = "absolute" if reference else case
        verdict = compare_time(baseline, current, key, judged, pooled[judged], alpha, threshold_pct, sessions[judged])
        absolute = verdict if verdict is None or verdict.basis == "absolute" else compare_time(
            baseline, current, key, "absolute", pooled["absolute"], alpha, threshold_pct, sessions["absolute"])
        if absolute is not None and math.isfinite(absolute.ratio):
            own[key] = absolute.ratio
        if verdict is None:
            continue
        verdict.reference = reference
        if reference:
            verdict.note = "the reference of relative gating, judged on its own times"
        if protocol_change:
            verdict.verdict, verdict.why = "inconclusive", f"timed under different protocols ({protocol_change})"
        verdicts[key] = verdict
    tested = [k for k, v in verdicts.items() if math.isfinite(v.p_raw)]
    for key, adjusted in zip(tested, holm([verdicts[k].p_raw for k in tested])):
        verdicts[key].p_value = adjusted
    for verdict in verdicts.values():
        decide(verdict, threshold_pct, alpha)
    one_set = [label for label, side in (("baseline", baseline), ("current", current)) if one_process_set(side)]
    for verdict in verdicts.values():
        if math.isfinite(verdict.p_raw) and not all(b.seen for b in pooled[verdict.basis]):
            verdict.note = "; ".join(n for n in (verdict.note, "within one process on a side: process offsets unseen") if n)
            if one_set and verdict.verdict in (*DECIDED, "unchanged"):
                # The spread within one process is about half the spread between two runs of a
                # suite (the A/A studies): an interval that narrow decides nothing, either way.
                verdict.verdict = "inconclusive"
                verdict.why = (f"the {' and '.join(one_set)} side timed each case in one process set, so its interval "
                               "holds the spread within one process only: time it with timing.processes >= 2")
    return verdicts, own
