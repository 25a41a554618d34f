"""The rule that turns a case's change of time into a verdict (`dstbench compare`), and what a
change of the time reference says about every case.

A change c = current / baseline is judged against the band [1 - t, 1 + t] of `--time-threshold` t,
by one-sided tests at alpha, which its (1 - 2 alpha) interval shows (90% at alpha 0.05, as
equivalence tests are read):

- **regression** / **improvement**: c is significantly beyond the band: the one-sided test against
  the band's edge on the side of the estimate (1 + t or 1 - t), Holm-adjusted over the cases, has
  p < alpha (with one case: the interval lies beyond the edge);
- **unchanged**: the whole interval lies inside the band: two one-sided tests (TOST), c
  significantly below 1 + t and significantly above 1 - t, each at alpha;
- **inconclusive**: anything else: the interval reaches past an edge of the band. It is printed
  with what would decide it (`why`).

So a change inside the band that is well measured passes as unchanged, a change beyond it must be
shown to be beyond it to fail, and a point estimate alone never decides either.

Under the relative basis the reference (dense) is judged on its own times (`reference`); when it
moved beyond the band, `reference_shifts` says whether every case moved with it (a machine shift,
or a change to the training step every method shares) or whether dense moved alone.
"""

from __future__ import annotations

import dataclasses
import math
from dstbench.gates.sides import SideKey
from dstbench.results.intervals import LogChange

DECIDED = ("regression", "improvement")


@dataclasses.dataclass
class TimeVerdict:
    baseline_ms: float  # median segment time of each side, for the reader
    current_ms: float
    ratio: float  # the change the verdict judges, current / baseline: above 1 is slower
    p_value: float  # the test against the band's edge on the estimate's side (`beyond_p`), Holm-adjusted
    verdict: str  # "regression", "improvement", "unchanged", "inconclusive" or "shift accepted"
    note: str = ""
    basis: str = "relative"  # "relative" (to the run's dense) or "absolute"
    why: str = ""  # why it is inconclusive (contention, too few samples, an interval past the band's edge)
    ci_low: float = math.nan  # the change's (1 - 2 alpha) interval (`interval_level`)
    ci_high: float = math.nan
    p_raw: float = math.nan
    covers: str = ""  # what each side's interval covers, e.g. "2 processes x 5 rounds"
    change: LogChange | None = None  # the change in logs, for the tests
    reference: bool = False  # the time reference of relative gating, judged on its own times
    sides_se: tuple[float, float] = (math.nan, math.nan)  # each side's log standard error (baseline, current)
    current_units: int = 0  # the current side's process units (group x set) the change rests on
    # Whether the spread between sessions is in the interval (`dstbench.results.sessions`), and the
    # part of the current side's log variance that it is: more sets in the same session keep it.
    sessions_seen: bool = False
    current_floor: float = 0.0
    # The degrees of freedom of what more current sets leave (the baseline's variance and that floor).
    limit_df: float = math.inf


def band(threshold_pct: float) -> tuple[float, float]:
    """The band of no change, (1 - t, 1 + t) on the ratio scale."""
    limit = threshold_pct / 100.0
    return max(0.0, 1.0 - limit), 1.0 + limit


def interval_level(alpha: float) -> float:
    """The level of the interval the one-sided tests at `alpha` read off: 1 - 2 alpha."""
    return 1.0 - 2.0 * alpha


def beyond_p(change: LogChange, threshold_pct: float) -> float:
    """The one-sided p that the change lies beyond the band, against its edge on the side of the
    estimate. (The data choose the side; the other side's test could only reject if the band were
    narrow against the interval, so the two together keep their level.)"""
    low, high = band(threshold_pct)
    return change.p_above(high) if change.log_ratio >= 0 else change.p_below(low)


def decide(verdict: TimeVerdict, threshold_pct: float, alpha: float) -> None:
    """The verdict from the change, its interval and its adjusted p (one already given, e.g.
    inconclusive under contention, stays)."""
    if verdict.verdict or verdict.change is None:
        return
    low, high = band(threshold_pct)
    if verdict.p_value < alpha:
        verdict.verdict = "regression" if verdict.ratio > 1.0 else "improvement"
    elif low <= verdict.ci_low and verdict.ci_high <= high:
        verdict.verdict = "unchanged"
    else:
        verdict.verdict = "inconclusive"
        verdict.why = what_would_decide(verdict, threshold_pct, alpha)


def what_would_decide(verdict: TimeVerdict, threshold_pct: float, alpha: float) -> str:
    """Why the interval decides nothing, and how many times the samples would (the interval's
    width shrinks as one over the square root of the samples, at the same spread)."""
    low, high = band(threshold_pct)
    level = f"{interval_level(alpha) * 100:g}%"
    if verdict.ci_low > high or verdict.ci_high < low:
        return (f"its {level} interval lies beyond +/-{threshold_pct:g}% but not after Holm over the cases "
                f"(adjusted p {verdict.p_value:.3g}): more rounds or process sets would decide it")
    assert verdict.change is not None
    edges = [math.log(high)] + ([math.log(low)] if low > 0 else [])
    margin = min(abs(verdict.change.log_ratio - edge) for edge in edges)
    half = (math.log(verdict.ci_high) - math.log(verdict.ci_low)) / 2
    if margin < 1e-3 or half <= 0:
        return f"its {level} interval reaches past +/-{threshold_pct:g}%, the change on the band's edge"
    factor = (half / margin) ** 2
    times = f"{factor:.1f}x" if factor < 10 else f"{factor:,.0f}x"
    return (f"its {level} interval reaches past +/-{threshold_pct:g}%: about {times} the samples would decide it "
            "(more rounds or process sets, or a quieter machine)")


@dataclasses.dataclass
class ReferenceShift:
    """A time reference (dense) whose own time moved beyond the band, and which other cases of its
    group (same suite hash and seed) moved with it: those whose own time moved beyond the band the
    same way. Their time relative to dense says nothing here: a case that stayed put is
    "inconclusive" relative to a dense that moved, which must not read as moving with it."""

    key: SideKey
    case: str  # the reference as reports name it
    verdict: TimeVerdict
    case_ratios: dict[str, float]  # every other case of the group: its own current / baseline time
    moved_with: list[str]  # cases whose own time moved beyond the band the way dense's did
    left_behind: list[str]  # the others: their own time stayed inside the band, or moved the other way
    accepted: bool = False  # a slowdown others share, accepted by --accept-machine-shift

    @property
    def shared(self) -> bool:
        """At least one other case moved with dense: a machine shift or a change to the common step."""
        return bool(self.moved_with)

    @property
    def everywhere(self) -> bool:
        """Every other case moved with dense: what `--accept-machine-shift` may accept."""
        return self.shared and not self.left_behind

    @property
    def slower(self) -> bool:
        return self.verdict.ratio > 1.0

    def text(self) -> str:
        """One line: a shift every case shares, one some cases share, or a reference that moved alone."""
        v = self.verdict
        own = f"{self.case} {v.ratio:.3f}x [{v.ci_low:.3f}, {v.ci_high:.3f}] on its own times"
        way = "slower" if self.slower else "faster"
        other = "improvement" if self.slower else "regression"
        common = "a machine shift or a change to the common training step"

        def ratios(cases: list[str]) -> str:
            return ", ".join(f"{c} {self.case_ratios[c]:.2f}x" for c in cases if c in self.case_ratios)

        if self.everywhere:
            accept = ""
            if self.slower:
                accept = (": accepted (--accept-machine-shift)" if self.accepted
                          else "; a failure unless --accept-machine-shift accepts it")
            every = [self.case_ratios[c] for c in self.moved_with if c in self.case_ratios] + [v.ratio]
            return f"every case {min(every):.2f}x to {max(every):.2f}x {way} on its own times, dense included ({own}): {common}{accept}"
        refused = "; --accept-machine-shift does not accept it" if self.slower else ""
        if self.shared:
            return (f"{own}, {way}, and {ratios(self.moved_with)} with it on their own times; {ratios(self.left_behind)} "
                    f"did not move: not every case moved, so not a machine shift{refused}; each case's verdict relative "
                    "to dense stands")
        one = len(self.left_behind) == 1
        return (f"{own}, {way}, while {'the other case' if one else 'the other cases'} did not move on "
                f"{'its' if one else 'their'} own times ({ratios(self.left_behind)}): dense's own time changed, not the "
                f"machine (a relative {other} of the others is dense's change, not theirs){refused}")


def reference_shifts(
    verdicts: dict[SideKey, TimeVerdict], own_ratios: dict[SideKey, float], names: dict[SideKey, str], accept: bool,
    threshold_pct: float = 10.0,
) -> list[ReferenceShift]:
    """Each reference judged beyond the band, with its group's own changes (`own_ratios`: current /
    baseline of each case's own time). A case moved with dense when its own change lies beyond the
    band (`threshold_pct`) on dense's side. A slowdown every case shares, under `accept`, becomes
    "shift accepted"; one dense shows alone, or with some cases only, stays a regression."""
    low, high = band(threshold_pct)
    shifts = []
    for key, verdict in verdicts.items():
        if not verdict.reference or verdict.verdict not in DECIDED:
            continue
        group = [k for k in verdicts if k.beside(key) and k != key and verdicts[k].basis == "relative"]

        def moved(k: SideKey) -> bool:
            ratio = own_ratios.get(k, math.nan)
            return ratio > high if verdict.ratio > 1.0 else ratio < low

        shift = ReferenceShift(
            key, names[key], verdict,
            case_ratios={names[k]: own_ratios[k] for k in group if k in own_ratios},
            moved_with=[names[k] for k in group if moved(k)],
            left_behind=[names[k] for k in group if not moved(k)],
        )
        if shift.everywhere and shift.slower and accept:
            shift.accepted = True
            verdict.verdict = "shift accepted"
        shifts.append(shift)
    return shifts
