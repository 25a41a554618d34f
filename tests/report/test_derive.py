"""Derived figures recomputed by hand from the synthetic fixture's result lines."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dstbench.results.derive import derive, headline, load_frame
from dstbench.results.speedup import bootstrap_speedup_ci
from tests.report.conftest import MIB, PEAK_OVERHEAD, synthetic_lines, write_run


def _row(derived: pd.DataFrame, method: str, density: float) -> pd.Series:
    rows = derived[(derived["method"] == method) & np.isclose(derived["density"], density)]
    assert len(rows) == 1
    return rows.iloc[0]


@pytest.fixture
def derived(synthetic_run: Path) -> pd.DataFrame:
    return derive(load_frame([synthetic_run]), "rigl")


def test_speedup_is_the_ratio_of_medians_at_the_same_density(derived: pd.DataFrame) -> None:
    # rigl@0.1 median 100 ms, barter@0.1 median 40 ms; at 0.5: 110 ms and 80 ms.
    assert _row(derived, "barter", 0.1)["speedup"] == pytest.approx(100 / 40)
    assert _row(derived, "barter", 0.5)["speedup"] == pytest.approx(110 / 80)
    assert _row(derived, "rigl", 0.1)["speedup"] == pytest.approx(1.0)
    # Dense runs at 1.0, where the masked reference did not run: nothing to compare with.
    assert math.isnan(_row(derived, "dense", 1.0)["speedup"])


def test_confidence_interval_is_ordered_and_contains_the_estimate(derived: pd.DataFrame) -> None:
    for method, density in [("barter", 0.1), ("barter", 0.5)]:
        row, ref = _row(derived, method, density), _row(derived, "rigl", density)
        assert row["speedup_ci_low"] < row["speedup"] < row["speedup_ci_high"]
        # No resampled median lies outside its samples: the ratio cannot pass the extreme pairs.
        assert row["speedup_ci_low"] >= min(ref["segment_ms"]) / max(row["segment_ms"])
        assert row["speedup_ci_high"] <= max(ref["segment_ms"]) / min(row["segment_ms"])
    reference = _row(derived, "rigl", 0.1)
    assert reference["speedup_ci_low"] == reference["speedup_ci_high"] == 1.0


def test_bootstrap_interval_by_hand() -> None:
    # Every resample of constant samples has the same median: the interval collapses on the ratio.
    assert bootstrap_speedup_ci([10.0] * 5, [4.0] * 5) == pytest.approx((2.5, 2.5))
    low, high = bootstrap_speedup_ci([9.0, 10.0, 11.0], [4.0, 5.0, 6.0])
    # Extreme resample medians: 9/6 and 11/4.
    assert 9 / 6 <= low < 2.0 < high <= 11 / 4
    assert all(math.isnan(v) for v in bootstrap_speedup_ci([], [1.0]))


def test_memory_reduction_on_state_and_activation_bytes(derived: pd.DataFrame) -> None:
    barter = _row(derived, "barter", 0.1)
    assert barter["memory_basis"] == "state + activation bytes"
    assert barter["memory_reduction"] == pytest.approx(1 - (4 + 12) / (44 + 60))
    assert barter["state_ratio"] == pytest.approx(4 / 44)
    assert barter["activation_ratio"] == pytest.approx(12 / 60)


def test_memory_reduction_on_the_allocator_peak_when_measured(tmp_path: Path) -> None:
    derived = derive(load_frame([write_run(tmp_path, "gpu", synthetic_lines(peak=True))]), "rigl")
    barter = _row(derived, "barter", 0.1)
    assert barter["memory_basis"] == "allocator peak"
    expected = 1 - (16 * MIB + PEAK_OVERHEAD) / (104 * MIB + PEAK_OVERHEAD)
    assert barter["memory_reduction"] == pytest.approx(expected)


def test_flop_limit_and_topology_share(derived: pd.DataFrame) -> None:
    barter = _row(derived, "barter", 0.1)
    assert barter["flop_limit"] == pytest.approx(10e9 / 2e9)
    assert barter["flop_fraction"] == pytest.approx(2.5 / 5.0)
    assert barter["topology_share"] == pytest.approx(10.0 / sum([40.0, 42.0, 38.0, 41.0, 39.0]))


def test_failed_cases_keep_their_rows(derived: pd.DataFrame) -> None:
    failed = derived[derived["status"] != "ok"].set_index("case_id")
    assert dict(failed["status"]) == {"set@0.1": "oom", "chase@0.5": "error"}
    assert failed[["speedup", "memory_reduction", "topology_share"]].isna().all().all()


def test_headline_names_the_best_cases(derived: pd.DataFrame) -> None:
    h = headline(derived)
    assert (h["speedup"]["method"], h["speedup"]["density"]) == ("barter", 0.1)
    assert h["speedup"]["value"] == pytest.approx(2.5)
    assert (h["memory"]["method"], h["memory"]["density"]) == ("barter", 0.1)
    assert (h["cases"], h["failed"], h["reference"]) == (7, 2, "rigl")


def test_a_dense_reference_is_compared_at_full_density(derived: pd.DataFrame, synthetic_run: Path) -> None:
    against_dense = derive(load_frame([synthetic_run]), "dense")
    assert _row(against_dense, "barter", 0.1)["speedup"] == pytest.approx(200 / 40)
    assert _row(against_dense, "rigl", 0.5)["speedup"] == pytest.approx(200 / 110)


def test_accuracy_only_cases_have_no_speedup(tmp_path: Path) -> None:
    lines = synthetic_lines()
    for line in lines:
        line.segment_ms, line.median_ms, line.iqr_ms, line.images_per_s = [], None, None, None
        line.top1 = 0.5
    derived = derive(load_frame([write_run(tmp_path, "acc", lines)]), "rigl")
    assert derived["speedup"].isna().all()
    assert _row(derived, "barter", 0.1)["memory_reduction"] == pytest.approx(1 - 16 / 104)


def _tagged(ms: list[float], group: str = "d=0.1#aaa") -> dict:
    return {"segment_ms": ms, "segment_group": [group] * len(ms), "segment_round": list(range(len(ms))),
            "median_ms": float(np.median(ms))}


def test_paired_speedup_is_the_median_of_per_round_ratios() -> None:
    from dstbench.results.speedup import median_ci, paired_ratios, speedup_stats

    # Round 3 hit both cases alike (a busy neighbour): the per-round ratio stays 4.
    ref = _tagged([100.0, 102.0, 98.0, 400.0, 101.0, 99.0, 100.0, 103.0, 97.0, 100.0])
    own = _tagged([25.0, 25.5, 24.5, 100.0, 25.0, 25.0, 26.0, 25.0, 24.0, 25.0])
    ratios = paired_ratios(ref, own)
    assert len(ratios) == 10 and ratios[3] == pytest.approx(4.0)
    stats = speedup_stats(own, ref)
    assert stats.basis == "paired" and stats.pairs == 10
    # One process set: the estimate is the median of the ratios, the interval within one process.
    assert stats.value == pytest.approx(float(np.median(ratios)))
    assert stats.ci_low < stats.value < stats.ci_high and stats.covers == "1 process x 10 rounds, within one process"
    # Two process sets whose rounds differ by an offset, seen pooled over the run: a wider interval.
    from dstbench.results.intervals import BetweenProcesses

    split = {**own, "segment_process": [0] * 5 + [1] * 5}
    wide = speedup_stats(split, {**ref, "segment_process": [0] * 5 + [1] * 5}, between=BetweenProcesses(0.01, 20))
    assert wide.covers == "2 processes x 5 rounds" and wide.ci_high / wide.ci_low > stats.ci_high / stats.ci_low
    # The order-statistic interval 0.2 used stays for readers of old runs.
    ordered = sorted(ratios)
    assert median_ci(ratios) == (ordered[1], ordered[8])  # x(2), x(9): 97.9% for n = 10
    # Too few rounds for a 95% interval: none, rather than a range labelled 95% that covers less.
    assert all(np.isnan(median_ci([1.0, 2.0, 3.0, 4.0, 5.0])))  # the range would cover 93.8%
    assert median_ci([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == (1.0, 6.0)  # 96.9%
    # Samples of another group (or untagged ones) do not pair: ratio of medians, bootstrap interval.
    other = _tagged(own["segment_ms"], group="d=0.1#bbb")
    assert speedup_stats(other, ref).basis == "unpaired"
    assert speedup_stats({"segment_ms": own["segment_ms"], "median_ms": 25.0}, ref).basis == "unpaired"


def test_noise_levels_follow_torch_benchmark_thresholds() -> None:
    from dstbench.results.derive import noise_level

    assert (noise_level(0.05), noise_level(0.15), noise_level(0.30)) == ("", "noisy", "very noisy")


def test_implausible_figures_are_flagged_and_not_headlined(tmp_path: Path) -> None:
    lines = synthetic_lines()
    for line in lines:
        if line.method == "barter" and line.density == 0.1:
            # 50x faster than rigl with a FLOP limit of 5x: beyond physics.
            line.segment_ms = [2.0, 2.1, 1.9, 2.05, 1.95]
            line.median_ms = 2.0
    derived = derive(load_frame([write_run(tmp_path, "loaded", lines)]), "rigl")
    barter = _row(derived, "barter", 0.1)
    assert "beyond its FLOP limit 5.00x" in barter["implausible"]
    h = headline(derived)
    assert "barter@0.1" in h["implausible"] and (h["speedup"]["method"], h["speedup"]["density"]) == ("barter", 0.5)
    # rigl@0.5 (masked) is 1.8x faster than dense in this fixture: flagged too.
    assert "faster than dense" in _row(derived, "rigl", 0.5)["implausible"]
    assert _row(derived, "barter", 0.5)["implausible"] == ""
    from dstbench.results.derive import run_warnings

    assert any(w.startswith("barter@0.1: implausible") for w in run_warnings(derived))
