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

The verdict, with `threshold` in percentage points:
- the interval covers 0: the change is *within seed noise*: unchanged when within the threshold,
  else inconclusive (more seeds would tell);
- it does not: unchanged within the threshold, else a regression (lower) or an improvement;
- no interval: unchanged within the threshold, else inconclusive.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from dstbench.results.pooling import mean_ci
from dstbench.suite.cases import case_id

LEVEL = 0.95


@dataclasses.dataclass
class Top1Verdict:
    """One case's top-1 change (fractions: 0.01 is one point)."""

    case: str  # the case id (with its sweep point)
    method: str
    density: float
    baseline: float  # mean top-1 over the baseline's seeds
    current: float
    change: float  # current - baseline (paired: the mean of the per-seed changes)
    ci_low: float
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


def _top1_by_seed(side: Any, seedless: bool) -> tuple[dict[tuple[Any, ...], dict[Any, float]], dict[tuple[Any, ...], tuple[str, str, float]]]:
    """Each case's ok top-1 by seed, from a side's lines keyed (hash, method, density, seed), and each
    case's name (with its sweep point), method and density. `seedless`: cases keyed by (method, density, point), for runs
    whose setups differ in their seed alone (the seed is in the suite hash); else by (hash, method,
    density)."""
    found: dict[tuple[Any, ...], dict[Any, float]] = {}
    names: dict[tuple[Any, ...], tuple[str, str, float]] = {}
    for (suite_hash, method, density, seed), line in side.cases.items():
        top1 = line.get("top1")
        if line.get("status") != "ok" or not isinstance(top1, (int, float)) or not math.isfinite(top1):
            continue
        sweep = line.get("sweep") if isinstance(line.get("sweep"), dict) else None
        name = case_id(method, density, sweep)
        key = (name,) if seedless else (suite_hash, name)
        found.setdefault(key, {})[seed] = float(top1)
        names[key] = (name, method, density)
    return found, names


def setups_differ_in_seed_only(baseline: Any, current: Any) -> bool:
    """Whether the runs' recorded setups (run.json's `setup`, what the suite hash is made of) are
    the same but for the seed: their cases are then the same cases, trained from other seeds."""
    setups = [side.meta.get("setup") for side in (baseline, current)]
    if not all(isinstance(setup, dict) for setup in setups):
        return False
    return {k: v for k, v in setups[0].items() if k != "seed"} == {k: v for k, v in setups[1].items() if k != "seed"}


def welch_interval(base: list[float], cur: list[float], level: float = LEVEL) -> tuple[float, float]:
    """Welch's interval of mean(cur) - mean(base); NaNs with fewer than two values on a side."""
    from scipy import stats

    if len(base) < 2 or len(cur) < 2:
        return (math.nan, math.nan)
    vb, vc = np.var(base, ddof=1) / len(base), np.var(cur, ddof=1) / len(cur)
    diff = float(np.mean(cur) - np.mean(base))
    se = math.sqrt(vb + vc)
    if se == 0:
        return (diff, diff)
    dof = (vb + vc) ** 2 / (vb**2 / (len(base) - 1) + vc**2 / (len(cur) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    return (diff - half, diff + half)


def judge(change: float, low: float, high: float, threshold_pp: float) -> tuple[str, str]:
    """The verdict and its note (see the module docstring)."""
    limit = threshold_pp / 100.0
    within = abs(change) <= limit + 1e-12
    if not math.isfinite(low):
        if within:
            return "unchanged", f"within +/-{threshold_pp:g} pp; seed noise unknown (one seed)"
        return "inconclusive", f"beyond +/-{threshold_pp:g} pp, but with one seed it cannot be told from seed noise"
    if low <= 0.0 <= high:
        if within:
            return "unchanged", "within seed noise (the 95% CI covers 0)"
        return "inconclusive", f"beyond +/-{threshold_pp:g} pp, but within seed noise (the 95% CI covers 0): more seeds would tell"
    if within:
        return "unchanged", f"beyond seed noise, within +/-{threshold_pp:g} pp"
    return ("regression" if change < 0 else "improvement"), "beyond seed noise and the threshold"


def compare_top1(baseline: Any, current: Any, threshold_pp: float = 1.0) -> list[Top1Verdict]:
    """A verdict for every case both sides trained (ok lines with a top-1), in the baseline's order.
    `baseline` and `current` are `dstbench.gates.sides.Side`s. Cases match by suite hash, or, where
    the runs' setups differ only in their seed (and so in their hash), by method, density and point."""
    seedless = setups_differ_in_seed_only(baseline, current)
    (base, names), (cur, _) = _top1_by_seed(baseline, seedless), _top1_by_seed(current, seedless)
    verdicts = []
    for key, base_seeds in base.items():
        cur_seeds = cur.get(key)
        if not cur_seeds:
            continue
        b_values, c_values = list(base_seeds.values()), list(cur_seeds.values())
        paired = set(base_seeds) == set(cur_seeds)
        if paired:
            change, low, high = mean_ci([cur_seeds[s] - base_seeds[s] for s in base_seeds], LEVEL)
        else:
            change = float(np.mean(c_values) - np.mean(b_values))
            low, high = welch_interval(b_values, c_values)
        verdict, note = judge(change, low, high, threshold_pp)
        if not paired:
            note = f"unpaired: the runs' seeds differ; {note}"
        verdicts.append(Top1Verdict(
            *names[key], float(np.mean(b_values)), float(np.mean(c_values)), change, low, high, paired,
            list(base_seeds), list(cur_seeds), verdict, note,
        ))
    return verdicts
