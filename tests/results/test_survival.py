"""Survival to a target on hand-made curves: a step of 1/n at each seed's crossing, censored and
failed seeds kept in n, the curve ending at the last evaluation; in steps and estimated seconds."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from dstbench.results.survival import survival_curves


def seed_row(case: str, seed: int, steps: float, reached: bool | None, last_step: int = 500, status: str = "ok") -> dict[str, Any]:
    method, density = case.split("@")
    curve = [{"step": s, "top1": 0.1, "topology_updates": s // 100} for s in range(100, last_step + 1, 100)] if status == "ok" else None
    return {"run": "r", "case_id": case, "method": method, "density": float(density), "seed": seed, "status": status,
            "target_reached": reached, "steps_to_target": steps, "curve": curve,
            # 2 ms a step, 10 ms an update: seconds = steps x 0.002 + updates before x 0.01
            "step_ms_without_updates": 2.0, "update_ms": 10.0,
            "time_to_target_s": steps * 0.002 + (steps // 100) * 0.01 if math.isfinite(steps) else math.nan}


FRAME = pd.DataFrame([
    seed_row("rigl@0.5", 0, 150.0, True), seed_row("rigl@0.5", 1, 350.0, True), seed_row("rigl@0.5", 2, math.nan, False),
    seed_row("dense@1", 0, 120.0, True), seed_row("dense@1", 1, math.nan, False, status="error"),
    seed_row("set@0.5", 0, math.nan, None),  # a speed line: not judged
])


def test_steps_rise_by_a_seed_at_a_time_and_a_censored_seed_stays_out() -> None:
    curves = survival_curves(FRAME, "steps")
    rigl = curves[curves["case_id"] == "rigl@0.5"]
    assert list(zip(rigl["x"], rigl["reached"].round(4))) == [(0.0, 0.0), (150.0, 0.3333), (350.0, 0.6667), (500.0, 0.6667)]
    dense = curves[curves["case_id"] == "dense@1"]  # its failed seed counts in n and never rises
    assert list(zip(dense["x"], dense["reached"])) == [(0.0, 0.0), (120.0, 0.5), (500.0, 0.5)]
    assert set(curves["seeds"]) == {2, 3} and "set@0.5" not in set(curves["case_id"])


def test_seconds_price_each_crossing_and_the_last_evaluation() -> None:
    rigl = survival_curves(FRAME, "seconds").query("case_id == 'rigl@0.5'")
    assert list(rigl["x"]) == pytest.approx([0.0, 0.31, 0.73, 1.05])  # 500 steps x 2 ms + 5 updates x 10 ms
    unpriced = FRAME.assign(time_to_target_s=math.nan)
    assert survival_curves(unpriced, "seconds").empty  # the reaching seeds have no estimate


def test_the_report_draws_both_panels() -> None:
    from dstbench.report.survival import survival_plot

    plot = survival_plot(FRAME)
    assert plot is not None and len(plot.figure.axes) == 2
    assert "rigl@0.5 67%" in plot.alt and "dense@1 50%" in plot.alt
    import matplotlib.pyplot as plt

    plt.close(plot.figure)
