"""Do two runs of one suite agree within their intervals? The test of an interval that a single run
cannot give: the same cases measured again (another seed set, another day) should differ by no
more than the two intervals say.

Per case, z = (log v1 - log v2) / sqrt(se1^2 + se2^2), each se read from its run's 95% interval on
the log scale, (log high - log low) / (2 x 1.96): a ratio's intervals here are symmetric in log
(`dstbench.results.intervals`, `dstbench.results.target_speedup`). Where the intervals are right
and the runs independent, each z is about standard normal, so over k cases the sum of z^2 follows
a chi-square with k degrees of freedom: its upper-tail p says whether the runs differ more than
their intervals allow (small p: the intervals are too narrow, or the runs measured different
things), its lower tail whether they agree better than the intervals say (the intervals are wider
than needed: conservative), and the standard deviation of z says by how much (1 expected).
Student-t intervals read as normal make z slightly larger than it should be, so the test errs
towards "too narrow".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

import numpy as np
from scipy import stats

LEVEL = 0.95


def log_se(low: float, high: float, level: float = LEVEL) -> float:
    """The standard error on the log scale that a `level` interval [low, high] of a ratio implies;
    NaN where the interval is missing or not positive."""
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (low, high)) or high < low:
        return math.nan
    return (math.log(high) - math.log(low)) / (2 * float(stats.norm.ppf(0.5 + level / 2)))


def log_z(first: tuple[float, float, float], second: tuple[float, float, float], level: float = LEVEL) -> float:
    """z of two (value, low, high) measurements of one ratio; NaN where either lacks a usable
    value or interval (or both intervals are zero wide)."""
    (v1, l1, h1), (v2, l2, h2) = first, second
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (v1, v2)):
        return math.nan
    se = math.hypot(log_se(l1, h1, level), log_se(l2, h2, level))
    return (math.log(v1) - math.log(v2)) / se if math.isfinite(se) and se > 0 else math.nan


@dataclasses.dataclass(frozen=True)
class Agreement:
    """Over the cases with a z: how many, the sum of z^2, its chi-square upper-tail p (and lower-tail
    `p_low`), the standard deviation of z (about the mean 0, as the test assumes) and the verdict."""

    cases: int
    chi2: float
    p: float
    sd: float
    p_low: float = math.nan

    def holds(self, min_cases: int = 8, alpha: float = 0.05) -> bool | None:
        """True where p > `alpha` over at least `min_cases` cases, False where p <= `alpha`, None
        (too few cases to say) otherwise."""
        if self.cases and self.p <= alpha:
            return False
        return True if self.cases >= min_cases else None

    def text(self, min_cases: int = 8, alpha: float = 0.05) -> str:
        verdict = {True: "the intervals hold", False: "the runs differ more than their intervals allow",
                   None: f"too few cases to judge (fewer than {min_cases})"}[self.holds(min_cases, alpha)]
        if not self.cases:
            return verdict
        if self.holds(min_cases, alpha) and self.p_low <= alpha:
            verdict += f", and are wider than the runs' spread (lower tail p = {self.p_low:.3f}: conservative)"
        return f"{self.cases} cases: sum of z^2 {self.chi2:.1f} on {self.cases} df, p = {self.p:.3f}; sd of z {self.sd:.2f}: {verdict}"


def agreement(zs: Iterable[float]) -> Agreement:
    """The chi-square test of the finite z's (see the module docstring)."""
    z = np.asarray([v for v in zs if isinstance(v, (int, float)) and math.isfinite(v)], dtype=float)
    if not len(z):
        return Agreement(0, math.nan, math.nan, math.nan)
    chi2 = float((z**2).sum())
    return Agreement(len(z), chi2, float(stats.chi2.sf(chi2, len(z))), float(math.sqrt(chi2 / len(z))),
                     float(stats.chi2.cdf(chi2, len(z))))
