"""`dstbench.results.intervals`: process units, the pooled between-process variance, and intervals
that cover the true value across re-runs (checked by simulation), not just within one process."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from dstbench.results.intervals import (
    MEDIAN_EFFICIENCY, BetweenProcesses, Interval, UnitSamples, UnitSummary, covers_text, difference, interval,
    judged_units, paired_units, pool_between, sample_units, summarize,
)

PROCESS = [0] * 5 + [1] * 5
REF_MS = [100.0, 101.0, 99.0, 100.5, 99.5, 102.0, 101.5, 102.5, 101.0, 103.0]
OWN_MS = [80.0, 81.0, 79.5, 80.5, 79.0, 82.0, 81.0, 82.5, 81.5, 82.0]


def tagged(ms: list[float], *, starved: set[int] = frozenset(), group: str = "g0", process: list[int] = PROCESS,
           rounds: list[int] | None = None) -> dict[str, Any]:
    """A result line's timing fields: one group, rounds 0.., two process sets of five rounds."""
    return {
        "segment_ms": list(ms),
        "segment_group": [group] * len(ms),
        "segment_round": list(range(len(ms))) if rounds is None else rounds,
        "segment_process": list(process[: len(ms)]),
        "noise": {"starved": [i in starved for i in range(len(ms))], "contended": False},
    }


# --- units ------------------------------------------------------------------------------------------


def test_paired_units_are_log_ratios_by_process_set() -> None:
    samples = paired_units(tagged(REF_MS), tagged(OWN_MS))
    assert samples.paired == 10 and samples.starved == 0
    assert sorted(samples.units) == [("g0", 0), ("g0", 1)]
    assert samples.units[("g0", 0)] == pytest.approx([math.log(r / o) for r, o in zip(REF_MS[:5], OWN_MS[:5])])
    assert samples.units[("g0", 1)] == pytest.approx([math.log(r / o) for r, o in zip(REF_MS[5:], OWN_MS[5:])])


def test_paired_units_drop_rounds_starved_on_either_side_and_count_them() -> None:
    samples = paired_units(tagged(REF_MS, starved={2}), tagged(OWN_MS, starved={7, 2, 9}))
    assert samples.paired == 10 and samples.starved == 3  # round 2 starved on both sides counts once
    assert len(samples.units[("g0", 0)]) == 4 and len(samples.units[("g0", 1)]) == 3
    assert math.log(REF_MS[2] / OWN_MS[2]) not in samples.values
    kept = paired_units(tagged(REF_MS, starved={2}), tagged(OWN_MS, starved={7, 2, 9}), drop_starved=False)
    assert kept.starved == 3 and len(kept.values) == 10


def test_paired_units_pair_only_rounds_both_timed() -> None:
    samples = paired_units(tagged(REF_MS), tagged(OWN_MS[:8]))
    assert samples.paired == 8 and len(samples.values) == 8
    # Another group's rounds are not this group's.
    assert paired_units(tagged(REF_MS), tagged(OWN_MS, group="g1")).paired == 0


def test_untagged_lines_give_no_pairs() -> None:
    untagged = {"segment_ms": list(REF_MS)}
    samples = paired_units(untagged, {"segment_ms": list(OWN_MS)})
    assert samples.paired == 0 and samples.units == {} and summarize(samples) is None
    assert paired_units(untagged, tagged(OWN_MS)).paired == 0


def test_sample_units_treat_an_untagged_line_as_one_unit() -> None:
    line = {"segment_ms": list(REF_MS), "noise": {"starved": [i == 3 for i in range(10)]}}
    samples = sample_units(line)
    assert list(samples.units) == [("untagged", 0)]
    assert samples.paired == 10 and samples.starved == 1 and len(samples.values) == 9
    assert sample_units(tagged(REF_MS)).units.keys() == {("g0", 0), ("g0", 1)}


def test_judged_units_fall_back_to_all_rounds_when_too_few_are_unstarved() -> None:
    # Four rounds of each process set starved: one round per unit is left, no spread to judge.
    few = set(range(4)) | set(range(5, 9))
    judged = judged_units(lambda drop: paired_units(tagged(REF_MS, starved=few), tagged(OWN_MS), drop))
    assert len(judged.values) == 10 and judged.starved == 8  # every round, still flagged as starved
    assert summarize(judged) is not None
    # Enough unstarved rounds left: the starved ones stay out.
    judged = judged_units(lambda drop: paired_units(tagged(REF_MS, starved={0, 5}), tagged(OWN_MS), drop))
    assert len(judged.values) == 8 and judged.starved == 2


# --- summaries and the between-process variance -----------------------------------------------------


def test_summarize_takes_unit_medians_and_the_within_variance_of_a_median() -> None:
    summary = summarize(UnitSamples({("g", 0): [0.0, 0.1, 0.2], ("g", 1): [1.0, 1.0, 1.3]}))
    assert summary.medians == pytest.approx([0.1, 1.0])
    assert summary.estimate == pytest.approx(0.55)
    # Squares about each unit's median: 0.02 + 0.09 over 4 df, for a median of 3 rounds.
    assert summary.within == pytest.approx(MEDIAN_EFFICIENCY * (0.11 / 4) / 3)
    assert summary.within_df == 4 and summary.rounds == 6 and summary.count == 2


def test_summarize_needs_a_unit_with_two_rounds() -> None:
    assert summarize(UnitSamples({})) is None
    assert summarize(UnitSamples({("g", 0): [0.1], ("g", 1): [0.2]})) is None
    assert summarize(UnitSamples({("g", 0): [0.1], ("g", 1): [0.2, 0.3]})).within_df == 1


def simulate(rng: np.random.Generator, comparisons: int, *, mu: float = 0.0, sigma_b: float, sigma_w: float,
             units: int = 2, rounds: int = 5) -> list[UnitSummary]:
    """One run's comparisons, in logs: y[u, r] = mu + b[u] + e[u, r]."""
    b = rng.normal(0.0, sigma_b, (comparisons, units, 1))
    y = mu + b + rng.normal(0.0, sigma_w, (comparisons, units, rounds))
    return [summarize(UnitSamples({("g", u): list(y[c, u]) for u in range(units)})) for c in range(comparisons)]


def test_pool_between_estimates_the_simulated_between_process_variance() -> None:
    rng = np.random.default_rng(20240601)
    between = pool_between(simulate(rng, 200, sigma_b=0.03, sigma_w=0.02))
    assert between.seen and between.df == 200
    assert 0.7 * 0.03**2 < between.variance < 1.4 * 0.03**2
    # No offsets between the processes: seen (the run had two units per case), and about zero.
    none = pool_between(simulate(rng, 200, sigma_b=0.0, sigma_w=0.02))
    assert none.seen and none.df == 200
    assert 0.0 <= none.variance < 0.1 * 0.03**2


def test_pool_between_needs_two_units() -> None:
    one_unit = summarize(UnitSamples({("g", 0): [0.1, 0.2, 0.3]}))
    assert pool_between([one_unit, None]) == BetweenProcesses()
    assert not pool_between([]).seen
    two = summarize(UnitSamples({("g", 0): [0.0, 0.0, 0.0], ("g", 1): [0.1, 0.1, 0.1]}))
    pooled = pool_between([one_unit, two, None])
    assert pooled.df == 1 and pooled.variance == pytest.approx(np.var([0.0, 0.1], ddof=1))


# --- intervals ---------------------------------------------------------------------------------------


def test_interval_by_hand() -> None:
    summary = UnitSummary([0.0, 0.2], within=0.01, within_df=8, rounds=10)
    iv = interval(summary, BetweenProcesses(0.02, 16))
    variance = 0.02 / 2 + 0.01 / 2
    df = variance**2 / ((0.01 / 2) ** 2 / 8 + (0.02 / 2) ** 2 / 16)
    assert df == pytest.approx(24.0)
    half = stats.t.ppf(0.975, df) * math.sqrt(variance)
    assert iv.value == pytest.approx(math.exp(0.1)) and iv.log_se == pytest.approx(math.sqrt(variance))
    assert (iv.low, iv.high) == pytest.approx((math.exp(0.1 - half), math.exp(0.1 + half)))
    assert iv.df == pytest.approx(df) and iv.units == 2 and iv.rounds == 10
    assert iv.covers == "2 processes x 5 rounds"
    # Between unseen: the within-process interval, narrower, and it says so.
    within = interval(summary, BetweenProcesses())
    assert within.log_se == pytest.approx(math.sqrt(0.005)) and within.df == pytest.approx(8)
    assert iv.low < within.low < within.high < iv.high
    assert within.covers == "2 processes x 5 rounds, within one process"


def test_covers_text() -> None:
    assert covers_text(2, 10, BetweenProcesses(0.001, 5)) == "2 processes x 5 rounds"
    assert covers_text(2, 10, BetweenProcesses(0.0, 5)) == "2 processes x 5 rounds"  # seen, and zero
    assert covers_text(1, 10, BetweenProcesses()) == "1 process x 10 rounds, within one process"


def _iv(value: float, log_se: float, df: float) -> Interval:
    return Interval(value, math.nan, math.nan, log_se, df, 2, 10, "")


def test_difference_by_hand() -> None:
    ratio, low, high, p = difference(_iv(1.0, 0.03, 10), _iv(1.1, 0.04, 20))
    se, d = 0.05, math.log(1.1)
    df = se**4 / (0.03**4 / 10 + 0.04**4 / 20)
    assert ratio == pytest.approx(1.1)
    assert p == pytest.approx(2 * stats.t.sf(d / se, df)) and 0.05 < p < 0.08
    half = stats.t.ppf(0.975, df) * se
    assert (low, high) == pytest.approx((math.exp(d - half), math.exp(d + half)))
    assert low < 1.0 < high  # p > 0.05: the interval covers 1
    # Reversed, the change inverts with the same p.
    back = difference(_iv(1.1, 0.04, 20), _iv(1.0, 0.03, 10))
    assert back[0] == pytest.approx(1 / 1.1) and back[3] == pytest.approx(p)


def test_difference_of_identical_estimates_has_p_1() -> None:
    same = _iv(1.3, 0.02, 12)
    ratio, low, high, p = difference(same, same)
    assert ratio == pytest.approx(1.0) and p == pytest.approx(1.0) and low < 1.0 < high
    # No spread at all: equal is p 1, different is p 0.
    assert difference(_iv(1.0, 0.0, 5), _iv(1.0, 0.0, 5))[3] == 1.0
    assert difference(_iv(1.0, 0.0, 5), _iv(1.2, 0.0, 5))[3] == 0.0


# --- coverage across re-runs, by simulation ---------------------------------------------------------

RUNS, COMPARISONS, MU = 300, 16, 0.1


@functools.lru_cache(maxsize=1)
def simulated_runs() -> tuple[list[list[Interval]], list[list[Interval]]]:
    """Each run's 16 intervals with the between-process variance pooled over the run, and the
    within-only ones (between ignored): b ~ N(0, 0.02^2) per process unit, e ~ N(0, 0.03^2)."""
    rng = np.random.default_rng(7)
    pooled, within = [], []
    for _ in range(RUNS):
        summaries = simulate(rng, COMPARISONS, mu=MU, sigma_b=0.02, sigma_w=0.03)
        between = pool_between(summaries)
        pooled.append([interval(s, between) for s in summaries])
        within.append([interval(s, BetweenProcesses()) for s in summaries])
    return pooled, within


def _coverage(runs: list[list[Interval]]) -> float:
    truth = math.exp(MU)
    return float(np.mean([iv.low <= truth <= iv.high for run in runs for iv in run]))


def test_the_interval_covers_the_true_value_across_processes() -> None:
    pooled, within = simulated_runs()
    assert 0.92 <= _coverage(pooled) <= 0.98
    assert all(iv.covers == "2 processes x 5 rounds" for run in pooled for iv in run)


def test_a_within_process_interval_covers_too_little() -> None:
    # The same data with the process offsets ignored: what the test above guards against.
    _, within = simulated_runs()
    assert _coverage(within) < 0.90


def test_intervals_of_two_runs_overlap() -> None:
    pooled, _ = simulated_runs()
    overlaps = [
        a.low <= b.high and b.low <= a.high
        for first, second in zip(pooled[0::2], pooled[1::2]) for a, b in zip(first, second)
    ]
    assert len(overlaps) == RUNS // 2 * COMPARISONS
    assert np.mean(overlaps) >= 0.97
