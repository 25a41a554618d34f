"""The end-to-end speedup: how long a whole run of the schedule would take, updates included.

A speed run's speedup is per step (the median segment), and a method's topology updates fall in
few segments, so the median hides them. End to end, a case takes T = S x p + U x c: the schedule's
`S` steps (`timing.total_steps`) at its step time without updates `p`, and the `U` updates its
schedule makes in them (`updates_scheduled`) at their measured mean cost `c`, the same estimates
time to target uses (`dstbench.results.target_time`). `speedup_end_to_end` is T(reference) /
T(case), priced as a speedup to target is (`dstbench.results.target_speedup.speedup_to_target`,
one "seed": the schedule): the reference's step at the paired step-time ratio of the rounds the
two shared, else at its own step time. NaN, with `speedup_end_to_end_basis` saying why, where the
line does not record its schedule (written before dstbench did) or an update was scheduled but
none fell in the timed segments (its cost unmeasured).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dstbench.results.intervals import BetweenProcesses, judged_units, pool_between, summarize
from dstbench.results.target_speedup import paired_step_units, partner_case, speedup_to_target, step_ratio
from dstbench.results.target_time import RunCase, case_keys, case_timings

END_TO_END_COLUMNS = ("speedup_end_to_end", "speedup_end_to_end_ci_low", "speedup_end_to_end_ci_high", "speedup_end_to_end_basis")


def schedule_of(line: Any) -> tuple[float, float] | None:
    """(steps, updates) of the line's schedule, from its `method_extras`; None where not recorded."""
    extras = line.get("method_extras")
    if not isinstance(extras, dict):
        return None
    steps, updates = extras.get("schedule_steps"), extras.get("updates_scheduled")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (steps, updates)):
        return None
    return float(steps), float(updates)


def add_end_to_end(derived: pd.DataFrame) -> pd.DataFrame:
    """`derived` (one row per line, `derive`) with `speedup_end_to_end`, its 95% interval and its
    basis, against the run's reference at the case's density (else its case at 1.0)."""
    out = derived.copy()
    for column in END_TO_END_COLUMNS:
        out[column] = pd.Series("" if column.endswith("basis") else math.nan, index=derived.index,
                                dtype=object if column.endswith("basis") else float)
    reference = derived.attrs.get("reference")
    if derived.empty or "run" not in derived or not reference or "segment_ms" not in derived:
        return out
    timed = derived[derived["segment_ms"].map(lambda v: isinstance(v, list) and bool(v))]
    if timed.empty:
        return out
    timings, keys = case_timings(timed), case_keys(timed)

    def partner(key: RunCase) -> RunCase | None:
        return partner_case(timings, key, reference)

    first = {key: timed[keys == key].iloc[0] for key in timings}
    pairs = {key: [(first[other], first[key])] for key in timings if (other := partner(key)) is not None and other != key}
    between: dict[str, list[Any]] = {}
    for key, pair in pairs.items():
        between.setdefault(key[0], []).append(summarize(judged_units(lambda drop, p=pair: paired_step_units(p, drop))))
    pooled = {run: pool_between(summaries) for run, summaries in between.items()}
    for index in timed.index:
        key = keys[index]
        other = partner(key)
        result, basis = (math.nan, math.nan, math.nan), ""
        own_schedule, base_schedule = schedule_of(timed.loc[index]), schedule_of(first[other]) if other else None
        own_timing, base_timing = timings.get(key), timings.get(other) if other else None
        if other is None:
            basis = f"no {reference} case to compare with"
        elif other == key:
            result = (1.0, 1.0, 1.0)
        elif own_schedule is None or base_schedule is None:
            basis = "the lines do not record their schedules (written before dstbench recorded them)"
        elif own_timing is None or base_timing is None:
            basis = "no timed segments to price a step"
        else:
            steps = max(own_schedule[0], base_schedule[0])  # the same schedule for every case of a run
            unpriced = [name for (_, updates), timing, name in ((own_schedule, own_timing, key[1]), (base_schedule, base_timing, other[1]))
                        if updates and not math.isfinite(timing.update_ms)]
            if unpriced:
                basis = (f"no update of {', '.join(unpriced)} fell in the timed segments: its cost was not measured "
                         "(lengthen timing.total_steps or the segments)")
            else:
                ratio = step_ratio(pairs[key], pooled.get(key[0], BetweenProcesses()))
                result = speedup_to_target(([steps], [base_schedule[1]], base_timing), ([steps], [own_schedule[1]], own_timing), ratio=ratio)
                clock = ratio.covers if ratio else "step times unpaired (not timed in the same rounds)"
                basis = (f"{steps:.0f} steps with {own_schedule[1]:.0f} updates against {base_schedule[1]:.0f}; {clock}"
                         if math.isfinite(result[0]) else "")
        for column, value in zip(END_TO_END_COLUMNS, (*result, basis)):
            out.at[index, column] = value
    return out
