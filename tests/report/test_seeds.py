"""Pooling runs that differ only in their seed: means and Student-t intervals."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from dstbench.results.derive import load_frame
from dstbench.report.seeds import format_mean_ci, paired_difference, seed_runs, seed_summary, seed_table
from dstbench.results.pooling import mean_ci
from tests.report.conftest import result_line, write_run

SUITE = {"name": "ablation", "reference": "dense", "methods": ["dense", "barter"], "mode": "accuracy"}
TOP1 = {0: {"dense": 0.90, "barter": 0.80}, 1: {"dense": 0.92, "barter": 0.86}, 2: {"dense": 0.94, "barter": 0.83}}


def _seed_run(root: Path, seed: int, **suite_changes) -> Path:
    lines = [
        result_line("ablation", "dense", "dense", 1.0, top1=TOP1[seed]["dense"]),
        result_line("ablation", "barter", "compact", 0.1, top1=TOP1[seed]["barter"]),
    ]
    return write_run(root, f"ablation-seed{seed}", lines, suite={**SUITE, "seed": seed, **suite_changes})


def test_mean_and_student_t_interval() -> None:
    mean, low, high = mean_ci([0.90, 0.92, 0.94])
    half = 4.302652729911275 * 0.02 / math.sqrt(3)  # t(0.975, 2 dof) * s / sqrt(n)
    assert mean == pytest.approx(0.92) and (low, high) == (pytest.approx(0.92 - half), pytest.approx(0.92 + half))
    assert math.isnan(mean_ci([0.5])[1]) and mean_ci([0.5])[0] == 0.5
    assert format_mean_ci(mean, low, high) == "92.0 [87.0, 97.0]" and format_mean_ci(0.5, math.nan, math.nan) == "50.0"


def test_summary_pools_the_seeds_per_method_and_density(tmp_path: Path) -> None:
    runs = [_seed_run(tmp_path, s) for s in (0, 1, 2)]
    summary = seed_summary(load_frame(runs))
    assert summary[["method", "density", "n"]].values.tolist() == [["dense", 1.0, 3], ["barter", 0.1, 3]]
    assert summary.loc[1, "seeds"] == [0, 1, 2]
    expected = mean_ci([0.80, 0.86, 0.83])
    assert (summary.loc[1, "top1_mean"], summary.loc[1, "top1_ci_low"], summary.loc[1, "top1_ci_high"]) == pytest.approx(expected)
    assert "top5_mean" not in summary  # no run measured it
    table = seed_table(load_frame(runs))
    assert table.rows[1] == ["barter", "0.1", "3", "0, 1, 2", format_mean_ci(*expected)]


def test_runs_that_differ_in_more_than_the_seed_are_not_pooled(tmp_path: Path) -> None:
    runs = [_seed_run(tmp_path, 0), _seed_run(tmp_path, 1, mode="both")]
    with pytest.raises(ValueError, match="differ in more than the seed: mode"):
        seed_runs(runs)
    assert seed_table(load_frame(runs)) is None
    same_seed = write_run(tmp_path, "again", [result_line("ablation", "dense", "dense", 1.0, top1=0.9)], suite={**SUITE, "seed": 0})
    with pytest.raises(ValueError, match="share a seed"):
        seed_runs([runs[0], same_seed])
    assert seed_table(pd.DataFrame({"run": [str(runs[0])], "method": ["dense"]})) is None  # one run: nothing to pool


def test_paired_difference_matches_seeds(tmp_path: Path) -> None:
    runs = [_seed_run(tmp_path, s) for s in (0, 1, 2)]
    frame = load_frame(runs)
    frame = pd.concat([frame, frame[frame["method"] == "barter"].assign(method="barter_b", top1=lambda f: f["top1"] + 0.01)])
    diff = paired_difference(frame, "barter")
    row = diff.set_index("method").loc["barter_b"]
    assert row["n"] == 3 and row["diff_mean"] == pytest.approx(0.01) and row["diff_ci_high"] - row["diff_ci_low"] < 1e-9
    assert "dense" not in set(diff["method"])  # no barter case at density 1: nothing to pair with
