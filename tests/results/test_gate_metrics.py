"""`expect:` on a tracker's declared field: gated line by line on what its declaration shows, with
its unit and direction; a name that is neither built in nor declared fails, before a run and in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from dstbench.results.expectations import evaluate
from dstbench.results.gate_metrics import gate_metrics, unknown_metrics
from dstbench.results.run_folder import RunFolder
from dstbench.suite.schema_sections import METRICS, Expectation

SMOKE = Path(__file__).resolve().parents[2] / "reports" / "baselines" / "cpu_smoke"


def outcomes(**exp: object) -> list:  # type: ignore[type-arg]
    folder = RunFolder.open(SMOKE)
    return evaluate([Expectation(**exp)], "dense", folder.loaded())


def test_a_declared_field_is_gated_by_its_declaration() -> None:
    passed = outcomes(metric="rss_peak_bytes", method="dense", max=2**40)
    assert [o.verdict for o in passed] == ["PASS"] and passed[0].message.endswith("(bytes, lower is better)")
    failed = outcomes(metric="flops_per_step", method="rigl", density=0.1, max=1.0)
    assert [o.verdict for o in failed] == ["FAIL"] and "> max 1" in failed[0].message
    energy = outcomes(metric="energy", method="dense", max=1.0)  # shown as joules per step: not measured here
    assert [o.verdict for o in energy] == ["FAIL"] and energy[0].message == "energy not measured"


def test_a_name_nobody_declares_fails() -> None:
    assert unknown_metrics([Expectation(metric="rss_peek_bytes", max=1.0)]) == ["rss_peek_bytes"]
    [outcome] = outcomes(metric="rss_peek_bytes", max=1.0)
    assert outcome.verdict == "FAIL" and "unknown metric rss_peek_bytes" in outcome.message
    assert gate_metrics()[:len(METRICS)] == METRICS and "rss_peak_bytes" in gate_metrics()
    assert "segment_ms" not in gate_metrics()  # a list is not one number


def test_a_metric_name_must_be_a_name() -> None:
    with pytest.raises(ValueError):
        Expectation(metric="rss peak", max=1.0)
