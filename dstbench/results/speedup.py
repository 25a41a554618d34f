"""A case's speedup against a reference: paired rounds by process unit where the two were timed
side by side (`dstbench.results.intervals`), else a ratio of medians with a bootstrap interval;
and the reference line a row is compared with. `dstbench.results.derive` explains the figures."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import binom

from dstbench.results.intervals import BetweenProcesses, interval, judged_units, paired_units, pool_between, summarize
from dstbench.results.record import segment_samples
from dstbench.util.text import present

BOOTSTRAP_RESAMPLES = 2000
CI_LEVEL = 0.95


@dataclasses.dataclass
class SpeedupStats:
    """A speedup against a reference, its interval and how it was computed."""

    value: float
    ci_low: float
    ci_high: float
    basis: str  # "paired" (per-round ratios by process unit), "unpaired" (ratio of medians), "same case"
    pairs: int  # paired rounds used; 0 unless paired
    covers: str = ""  # what the interval covers, e.g. "2 processes x 5 rounds"
    starved: int = 0  # paired rounds left out: either side starved


def paired_ratios(reference: pd.Series | dict[str, Any], method: pd.Series | dict[str, Any]) -> list[float]:
    """reference_ms / method_ms of every unstarved (group, round) both were timed in."""
    return [float(np.exp(v)) for v in paired_units(reference, method).values]


def median_ci(values: list[float], level: float = CI_LEVEL) -> tuple[float, float]:
    """Order-statistic interval of the median: [x(k), x(n-k+1)] for the largest k whose coverage
    1 - 2 P(Binomial(n, 1/2) < k) is at least `level`. NaN below 6 values: even their range
    covers less than 95% (5 values: 93.8%). Within one sample only: kept for readers of old runs."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0 or 1 - 2 * binom.cdf(0, n, 0.5) < level:
        return (np.nan, np.nan)
    k = 1
    while k + 1 <= n - k and 1 - 2 * binom.cdf(k, n, 0.5) >= level:
        k += 1
    return float(ordered[k - 1]), float(ordered[n - k])


def speedup_stats(
    row: pd.Series | dict[str, Any], ref: pd.Series | dict[str, Any], *, same: bool = False,
    between: BetweenProcesses | None = None,
) -> SpeedupStats | None:
    """The speedup of `row` against `ref` (see the module docstring); None without timed samples.
    `between`: the run's pooled between-process variance (`between_processes`)."""
    own_ms, ref_ms = segment_samples(row.get("segment_ms")), segment_samples(ref.get("segment_ms"))
    if not own_ms or not ref_ms:
        return None
    if same:
        # The reference against itself: identical samples, the ratio is exactly 1.
        return SpeedupStats(1.0, 1.0, 1.0, "same case", 0)
    samples = judged_units(lambda drop: paired_units(ref, row, drop))
    if samples.paired:
        summary = summarize(samples)
        values = samples.values
        if summary is None:  # every round starved, or one round per unit: no spread to judge
            value = float(np.exp(np.median(values))) if values else np.nan
            return SpeedupStats(value, np.nan, np.nan, "paired", len(values), "", samples.starved)
        iv = interval(summary, between or BetweenProcesses(), CI_LEVEL)
        return SpeedupStats(iv.value, iv.low, iv.high, "paired", len(values), iv.covers, samples.starved)
    if not present(row.get("median_ms")) or not present(ref.get("median_ms")) or float(row["median_ms"]) <= 0:
        return None
    low, high = bootstrap_speedup_ci(ref_ms, own_ms)
    return SpeedupStats(float(ref["median_ms"]) / float(row["median_ms"]), low, high, "unpaired", 0, "1 process, unpaired")


def between_processes(frame: pd.DataFrame, reference: str | None) -> dict[Any, BetweenProcesses]:
    """Each run's between-process variance of log speedups, pooled over its comparisons with the
    reference and with dense (`dstbench.results.intervals.pool_between`)."""
    pooled: dict[Any, BetweenProcesses] = {}
    runs = frame["run"].unique() if "run" in frame else [None]
    for run in runs:
        rows = frame if run is None else frame[frame["run"] == run]
        summaries = []
        for index, row in rows.iterrows():
            if row["status"] != "ok":
                continue
            for other in dict.fromkeys(m for m in (reference, "dense") if m):
                ref = reference_row(frame, other, float(row["density"]), run)
                if ref is not None and ref.name != index:
                    summaries.append(summarize(paired_units(ref, row)))
        pooled[run] = pool_between(summaries)
    return pooled


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
