"""`dstbench compare BASELINE CURRENT --decide`: time the current run's undecided cases again, in
more process sets, until the data decide them or a time budget is spent.

An inconclusive time verdict (`dstbench.gates.time_rule`) says its interval reaches past an edge of
the band. The interval of a change combines both runs' standard errors, se^2 = se_b^2 + se_c^2. The
current run's is its session's offset f (`dstbench.results.sessions`: sets added now are timed in
the same session) plus a part that shrinks as one over its process units
(`dstbench.results.intervals`). So:

- a change whose estimate lies a margin m from the nearest band edge (in logs) is decided once
  t x se < m (t: the one-sided quantile at alpha); it needs se_c^2 - f <= (m / t)^2 - se_b^2 - f;
- if se_b^2 + f already exceeds (m / t_l)^2 (t_l: the quantile at the degrees of freedom of
  se_b^2 + f, what unbounded current sets leave), no number of current sets decides it: the case is left undecided, saying
  whether the baseline's interval (more process sets for it, in other sittings) or the spread
  between sessions (no one run can) stands in the way;
- else the current run needs about units x (se_c^2 - f) / that many units: the difference is
  added (`dstbench.execution.more_sets`, at most `MAX_STEP` sets per step, since the estimate moves
  as samples come in), the runs are compared again, and so on.

Only where the spread between sessions is seen, that is where the baseline was timed in two
sittings or more: otherwise sets added in one sitting narrow an interval that does not cover what a
run timed at another time draws (the power study's A/A pairs read regression 1-3 times in 10 so),
and the case is left undecided, saying how to time the baseline.
Not decided here, each with its reason: a side timed under contention (more sets on a busy machine
measure the machine), runs timed under different protocols, and dense, the time reference of
relative gating, judged on its own times (more of its sets measure the machine's speed, not the
code). The loop stops when no case is left to decide, when a step would not fit in what is left
of the budget (the last set's time says how long one takes), or after `MAX_ROUNDS` steps.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any, Callable

from scipy import stats

from dstbench.gates.compare import CaseComparison, Comparison, compare_runs
from dstbench.gates.sides import load_side
from dstbench.gates.time_rule import TimeVerdict, band

MAX_STEP = 4  # process sets added per step, before the runs are compared again
MAX_ROUNDS = 6  # steps at most
MORE_SESSIONS = ("give the baseline more process sets in other sittings, minutes apart (dstbench run --resume BASELINE "
                 "--more-processes N, from the baseline's code; each sitting is a session)")


@dataclasses.dataclass
class Decision:
    """What `--decide` did: the last comparison, the sets it added, and the cases it left."""

    comparison: Comparison
    budget_s: float
    spent_s: float = 0.0
    added: list[str] = dataclasses.field(default_factory=list)  # the added sets' group ids
    decided: list[str] = dataclasses.field(default_factory=list)  # undecided at first, decided at the end
    left: dict[str, str] = dataclasses.field(default_factory=dict)  # case -> why it stayed undecided

    def text(self) -> str:
        """Lines for the terminal, before the comparison's table."""
        lines = [f"decide: added {len(self.added)} process set(s) to the current run in {self.spent_s:.0f} s "
                 f"(budget {self.budget_s:g} s)"]
        if self.decided:
            lines.append(f"decide: decided {', '.join(self.decided)}")
        lines += [f"decide: still undecided {case}: {why}" for case, why in self.left.items()]
        return "\n".join(lines) + "\n"


def sets_needed(verdict: TimeVerdict, threshold_pct: float, alpha: float) -> int | None:
    """How many process sets the current run needs beyond its own to decide this change, at its
    estimate and spreads (at least 1); None when no number of them would (see the module docstring)."""
    change = verdict.change
    se_b, se_c = verdict.sides_se
    if change is None or not verdict.current_units or not (math.isfinite(se_b) and math.isfinite(se_c)):
        return 1 if verdict.current_units == 0 else None
    low, high = band(threshold_pct)
    edges = [math.log(high)] + ([math.log(low)] if low > 0 else [])
    margin = min(abs(change.log_ratio - edge) for edge in edges)
    # What more sets in this session leave: the baseline's variance and the session's offset.
    kept = se_b**2 + verdict.current_floor
    # Whether any current sets could decide it: at best with the degrees of freedom of what they leave.
    if margin < 1e-4 or (margin / float(stats.t.ppf(1 - alpha, verdict.limit_df))) ** 2 <= kept:
        return None
    allowed = (margin / float(stats.t.ppf(1 - alpha, max(change.df, 1.0)))) ** 2 - kept
    if allowed <= 0:  # not at today's degrees of freedom: as many sets again as it has, then look again
        return verdict.current_units
    units = verdict.current_units * max(0.0, se_c**2 - verdict.current_floor) / allowed
    return max(1, math.ceil(units - verdict.current_units))


def why_not(case: CaseComparison, threshold_pct: float, alpha: float) -> str | None:
    """Why more current sets cannot decide this inconclusive case, or None when they may."""
    verdict = case.time
    assert verdict is not None
    if verdict.reference:
        return "dense, the time reference, judged on its own times: more of its sets measure the machine, not the code"
    if verdict.why.startswith(("timed under contention", "timed under different protocols")):
        return f"{verdict.why}: more process sets do not change that"
    if not verdict.sessions_seen:
        return ("the spread between sessions is not seen (each run was timed in one sitting), so sets added now would "
                f"narrow the interval without covering it: {MORE_SESSIONS}")
    if sets_needed(verdict, threshold_pct, alpha) is None:
        change = verdict.change
        edges = [math.log(edge) for edge in band(threshold_pct) if edge > 0]
        if change is not None and min(abs(change.log_ratio - edge) for edge in edges) < 1e-4:
            return "its change sits on the band's edge: no number of samples decides it"
        se_b = verdict.sides_se[0]
        if se_b**2 >= verdict.current_floor:
            return ("the baseline's own interval is too wide to decide it whatever the current run adds: "
                    f"{MORE_SESSIONS}")
        return (f"the spread between sessions (sd {math.sqrt(verdict.current_floor):.1%} in logs for the current run's one "
                "session) is too wide for its change to be decided by one run, whatever it adds")
    return None


def decide_inconclusive(
    baseline: Path, current: Path, *, budget_s: float, say: Callable[[str], None] = lambda text: None,
    add_sets: Callable[..., list[Any]] | None = None, **compare_options: Any,
) -> Decision:
    """Compare, add process sets to `current` for its undecided cases, compare again, until they
    are decided, cannot be, or `budget_s` seconds are spent. `compare_options`: `compare_runs`'s
    keyword arguments. `add_sets`: `dstbench.execution.more_sets.add_process_sets` (a stand-in in tests)."""
    if add_sets is None:
        from dstbench.execution.more_sets import add_process_sets as add_sets
    threshold, alpha = compare_options.get("time_threshold", 10.0), compare_options.get("alpha", 0.05)
    started = time.monotonic()
    comparison = compare_runs(load_side(baseline), load_side(current), **compare_options)
    first = {c.case for c in comparison.cases if c.inconclusive}
    decision = Decision(comparison, budget_s)
    for _ in range(MAX_ROUNDS):
        undecided = [c for c in comparison.cases if c.inconclusive]
        reasons = {c.case: why_not(c, threshold, alpha) for c in undecided}
        todo = [c for c in undecided if reasons[c.case] is None]
        decision.left = {case: why for case, why in reasons.items() if why}
        if not todo:
            break
        remaining = budget_s - (time.monotonic() - started)
        needed = max(sets_needed(c.time, threshold, alpha) or 1 for c in todo if c.time is not None)
        sets = min(MAX_STEP, needed)
        say(f"decide: {', '.join(c.case for c in todo)} undecided; adding {sets} process set(s) "
            f"(about {needed} would decide them at today's estimate; {remaining:.0f} s of the budget left)")
        ids = sorted({str(comparison.current.cases[c.key].get("case_id")) for c in todo})
        added = add_sets(current, ids, sets, budget_s=remaining, by="dstbench compare --decide",
                         say=say) if remaining > 0 else []
        decision.added += [a.group_id for a in added]
        if not added:
            decision.left.update({c.case: f"the budget ({budget_s:g} s) was spent" for c in todo})
            break
        comparison = compare_runs(load_side(baseline), load_side(current), **compare_options)
    else:
        still = [c for c in comparison.cases if c.inconclusive]
        decision.left.update({c.case: f"still inconclusive after {MAX_ROUNDS} steps" for c in still if c.case not in decision.left})
    decision.comparison = comparison
    decision.spent_s = time.monotonic() - started
    decision.decided = sorted(first - {c.case for c in comparison.cases if c.inconclusive})
    return decision
