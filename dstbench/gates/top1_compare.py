"""Top-1 in `dstbench compare`: per case, the change of its top-1 over the seeds both runs trained
it with, and whether that change can be told from seed noise.

A case is its (suite hash, method, density, point): its lines at every seed on each side (ok lines
with a top-1; a suite's `seeds:`, or one seed per run). Runs whose setups differ only in their seed
have different suite hashes (the seed is in it): their cases match by method, density and point. Where both sides have the same seeds, the change is
paired by seed: the mean of current - baseline per seed, with its Student-t interval (n - 1 degrees
of freedom), which takes out what a seed does to both runs alike (initial weights, data order).
Where the seeds differ, the difference of the means, with Welch's interval, said to be unpaired.
With one seed on a side there is no interval: seed noise (0.5-2 points on our CPU workloads) is
unknown.

The verdict, with `threshold` t in percentage points, is the rule the time verdicts use
(`dstbench.gates.time_rule`), on the change d in points with its standard error (Student-t, n - 1
degrees of freedom paired; Welch unpaired) and the band [-t, +t] of no change:

- **regression** / **improvement**: d is significantly beyond the band: the one-sided t-test
  against the band's edge on the side of the estimate, Holm-adjusted over the cases judged, has
  p < alpha;
- **unchanged**: its (1 - 2 alpha) interval (90% at alpha 0.05) lies inside the band (TOST);
- **inconclusive**: anything else, said with what would decide it (about how many times the seeds,
  or a wider band); and always with one seed on either side, since one seed cannot estimate seed
  noise (0.5-2 points on our CPU workloads).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from dstbench.gates.sides import values_by_seed
from dstbench.results.intervals import holm
from dstbench.results.run_files import setup_without_seed

@dataclasses.dataclass
class Top1Verdict:
    """One case's top-1 change (fractions: 0.01 is one point)."""

    case: str  # the case id (with its sweep point)
    method: str
    density: float
    baseline: float  # mean top-1 over the baseline's seeds
    current: float
    change: float  # current - baseline (paired: the mean of the per-seed changes)
    ci_low: float  # its (1 - 2 alpha) interval, as the verdict reads it
    ci_high: float
    paired: bool
    baseline_seeds: list[Any]  # the seeds each side's mean rests on
    current_seeds: list[Any]
    verdict: str  # "regression", "improvement", "unchanged" or "inconclusive"
    note: str

    @property
    def basis(self) -> str:
        """What the interval rests on: 'paired by seed (n=3)', 'unpaired (3 vs 2 seeds)', 'one seed'."""
        if not math.isfinite(self.ci_low):
            return "one seed" if min(len(self.baseline_seeds), len(self.current_seeds)) < 2 else "no interval"
        if self.paired:
            return f"paired by seed (n={len(self.current_seeds)})"
        return f"unpaired ({len(self.baseline_seeds)} vs {len(self.current_seeds)} seeds)"


def line_top1(line: dict[str, Any]) -> float | None:
    top1 = line.get("top1")
    return float(top1) if isinstance(top1, (int, float)) and not isinstance(top1, bool) and math.isfinite(top1) else None


def setups_differ_in_seed_only(baseline: Any, current: Any) -> bool:
    """Whether the runs' recorded setups (run.json's `setup`, what the suite hash is made of) are
    the same but for the seed: their cases are then the same cases, trained from other seeds."""
    setups = [setup_without_seed(side.meta) for side in (baseline, current)]
    return setups[0] is not None and setups[0] == setups[1]


def change_stats(base: dict[Any, float], cur: dict[Any, float]) -> tuple[float, float, float, bool]:
    """(change, its standard error, degrees of freedom, paired): paired by seed where both sides
    have the same seeds, else Welch's; NaN standard error with one seed on a side."""
    paired = set(base) == set(cur)
    if paired:
        diffs = np.asarray([cur[s] - base[s] for s in base], dtype=float)
        n = len(diffs)
        se = float(diffs.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
        return float(diffs.mean()), se, float(n - 1), True
    b, c = np.asarray(list(base.values()), dtype=float), np.asarray(list(cur.values()), dtype=float)
    change = float(c.mean() - b.mean())
    if len(b) < 2 or len(c) < 2:
        return change, math.nan, math.nan, False
    vb, vc = b.var(ddof=1) / len(b), c.var(ddof=1) / len(c)
    se = math.sqrt(vb + vc)
    df = (vb + vc) ** 2 / (vb**2 / (len(b) - 1) + vc**2 / (len(c) - 1)) if se > 0 else math.inf
    return change, se, float(df), False


def beyond_p(change: float, se: float, df: float, threshold_pp: float) -> float:
    """The one-sided p that the change lies beyond the band, against its edge on the estimate's side."""
    from scipy import stats

    limit = threshold_pp / 100.0
    edge = -limit if change < 0 else limit
    if se <= 0:
        return 0.0 if abs(change) > limit + 1e-12 else 1.0
    z = (change - edge) / se
    return float(stats.t.cdf(z, df) if change < 0 else stats.t.sf(z, df))


def interval(change: float, se: float, df: float, level: float) -> tuple[float, float]:
    """The change's `level` Student-t interval (NaN without a standard error)."""
    from scipy import stats

    if not math.isfinite(se):
        return (math.nan, math.nan)
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se if se > 0 else 0.0
    return (change - half, change + half)


def judge(change: float, low: float, high: float, adjusted_p: float, threshold_pp: float, alpha: float) -> tuple[str, str]:
    """The verdict and its note from the change, its (1 - 2 alpha) interval and its Holm-adjusted
    beyond-the-band p (see the module docstring)."""
    limit = threshold_pp / 100.0
    level = f"{(1 - 2 * alpha) * 100:g}%"
    if not math.isfinite(low):
        return "inconclusive", "one seed on a side: seed noise cannot be estimated from it; run more seeds"
    if adjusted_p < alpha:
        side = "below" if change < 0 else "above"
        return ("regression" if change < 0 else "improvement"), (
            f"significantly {side} {'-' if change < 0 else '+'}{threshold_pp:g} pp (one-sided p {adjusted_p:.3g}, Holm over the cases)")
    if -limit - 1e-12 <= low and high <= limit + 1e-12:
        return "unchanged", f"its {level} interval lies within +/-{threshold_pp:g} pp (equivalence, TOST)"
    if low > limit or high < -limit:
        return "inconclusive", (f"its {level} interval lies beyond +/-{threshold_pp:g} pp but not after Holm over the cases "
                                f"(adjusted p {adjusted_p:.3g}): more seeds would decide it")
    margin = min(abs(change - limit), abs(change + limit))
    half = (high - low) / 2
    factor = (half / margin) ** 2 if margin > 1e-6 and half > 0 else math.inf
    times = "" if not math.isfinite(factor) else f"about {factor:.1f}x" if factor < 10 else f"about {factor:,.0f}x"
    return "inconclusive", (f"its {level} interval reaches past +/-{threshold_pp:g} pp: "
                            + (f"{times} the seeds, or a wider band (--top1-threshold), would decide it" if times
                               else "the change sits on the band's edge: a wider band (--top1-threshold) would decide it"))


def compare_top1(baseline: Any, current: Any, threshold_pp: float = 1.0, alpha: float = 0.05) -> list[Top1Verdict]:
    """A verdict for every case both sides trained (ok lines with a top-1), in the baseline's order,
    Holm over the cases judged. `baseline` and `current` are `dstbench.gates.sides.Side`s. Cases
    match by suite hash, or, where the runs' setups differ only in their seed (and so in their
    hash), by method, density and point. Intervals are (1 - 2 alpha) ones, as the tests read them."""
    seedless = setups_differ_in_seed_only(baseline, current)
    (base, names), (cur, _) = values_by_seed(baseline, line_top1, seedless), values_by_seed(current, line_top1, seedless)
    found = []
    for key, base_seeds in base.items():
        cur_seeds = cur.get(key)
        if cur_seeds:
            found.append((key, base_seeds, cur_seeds, change_stats(base_seeds, cur_seeds)))
    judged = [i for i, (*_, (_, se, _, _)) in enumerate(found) if math.isfinite(se)]
    raw = {i: beyond_p(found[i][3][0], found[i][3][1], found[i][3][2], threshold_pp) for i in judged}
    adjusted = dict(zip(judged, holm([raw[i] for i in judged])))
    verdicts = []
    for i, (key, base_seeds, cur_seeds, (change, se, df, paired)) in enumerate(found):
        low, high = interval(change, se, df, 1 - 2 * alpha)
        verdict, note = judge(change, low, high, adjusted.get(i, 1.0), threshold_pp, alpha)
        if not paired:
            note = f"unpaired: the runs' seeds differ; {note}"
        verdicts.append(Top1Verdict(
            *names[key], float(np.mean(list(base_seeds.values()))), float(np.mean(list(cur_seeds.values()))), change, low,
            high, paired, list(base_seeds), list(cur_seeds), verdict, note,
        ))
    return verdicts
