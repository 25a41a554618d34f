"""Time to target across targets: targets below dense from its mean final top-1, ranks by time with
the misses last, targets read from the same curves (a lower target reached by every seed that
reached a higher one), the order said in words, and the suite's checks."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from dstbench.report.target_sweep import order_changes, target_sweep_table
from dstbench.results.run_folder import RunFolder
from dstbench.results.target_sweep import DEFAULT_BELOW_DENSE, target_sweep
from dstbench.results.time_to_target import BelowDense, targets
from dstbench.suite.loading import SuiteError, parse_suite
from tests.conftest import micro_suite

RUN = Path(__file__).resolve().parents[2] / "reports" / "cpu_accuracy" / "runs" / "cpu_accuracy-20261207-092306"


def test_a_target_below_dense_is_taken_from_its_mean_final_top1() -> None:
    frame = pd.DataFrame({"run": "r", "kind": ["dense", "dense", "masked"], "method": ["dense", "dense", "rigl"],
                          "status": "ok", "top1": [0.80, 0.90, 0.5], "density": [1.0, 1.0, 0.5]})
    [(value, basis)] = targets(frame, {"r": BelowDense(1.0)}).values()
    assert value == pytest.approx(0.84) and "1 points below dense's mean final top-1 (0.85)" in basis
    [(missing, why)] = targets(frame[frame["kind"] != "dense"], {"r": BelowDense(1.0)}).values()
    assert math.isnan(missing) and "no dense top-1" in why


def test_each_target_is_read_from_the_same_curves_and_ranked() -> None:
    sweep = target_sweep(RunFolder.open(RUN).frame(None))
    labels = [f"dense - {p:g} pp" for p in DEFAULT_BELOW_DENSE]
    assert list(pd.unique(sweep["target"])) == labels  # the default sweep, the run having dense
    for _, at in sweep.groupby("target"):
        reached = at.dropna(subset=["time_to_target_s"]).sort_values("time_to_target_s")
        assert list(reached["rank"]) == sorted(reached["rank"]) and set(at.loc[at["time_to_target_s"].isna(), "rank"]) <= {len(reached) + 1}
    share = sweep.pivot_table(index="case_id", columns="target", values="target_reached")[labels]
    assert (share.diff(axis=1).iloc[:, 1:] >= -1e-12).all().all()  # a lower target: never fewer seeds there


def test_the_table_names_its_targets_and_whether_the_order_holds() -> None:
    table = target_sweep_table(RunFolder.open(RUN).frame(None))
    assert table is not None and table.headers[:3] == ["case", "dense - 0.5 pp: time", "dense - 0.5 pp: vs rigl"]
    assert "Targets: the default: 0.5, 1, 2, 5 points below dense's mean final top-1" in table.note
    sweep = pd.DataFrame({"target": ["t1", "t1", "t2", "t2"], "case_id": ["a", "b", "a", "b"],
                          "time_to_target_s": [1.0, 2.0, 3.0, 2.5]})
    assert order_changes(sweep) == "the order by time to target of the cases that reached every target changes: t1: a, b; t2: b, a"


def test_the_suite_checks_its_sweep() -> None:
    with pytest.raises(SuiteError, match="below_dense needs dense in the run"):
        parse_suite(micro_suite(methods=["rigl"], accuracy={"target_sweep": {"below_dense": [1]}}))
    with pytest.raises(SuiteError, match=r"top-1 fractions in \(0, 1\]"):
        parse_suite(micro_suite(accuracy={"target_sweep": [0.5, 50]}))
    assert parse_suite(micro_suite(accuracy={"target_sweep": [0.5, 0.6]})).setup_hash() == parse_suite(micro_suite()).setup_hash()
