"""Pooling a case over its seeds (dstbench.results.pooling): an accuracy's interval stays a fraction."""

from __future__ import annotations

import pandas as pd

from dstbench.results.pooling import pool_seeds


def test_a_top1_interval_near_100_percent_is_cut_at_1(tmp_path) -> None:  # type: ignore[no-untyped-def]
    frame = pd.DataFrame({
        "run": str(tmp_path), "case_id": "dense@1", "method": "dense", "kind": "dense", "density": 1.0, "status": "ok",
        "seed": [0, 1, 2], "top1": [1.0, 0.99, 0.90], "top5": [1.0, 1.0, 1.0],
    })
    row = pool_seeds(frame).iloc[0]
    assert abs(row["top1"] - 0.96333) < 1e-4
    assert 0.0 <= row["top1_ci_low"] < row["top1"] < row["top1_ci_high"] == 1.0  # the t interval reached past 1
    assert row["top5_ci_low"] == row["top5_ci_high"] == 1.0
