"""The "Density over the run" table: a gradual method's density after each of its updates."""

from __future__ import annotations

import pandas as pd

from dstbench.report.density_schedule import density_schedule_table, schedule_text


def _frame(extras: list[object]) -> pd.DataFrame:
    return pd.DataFrame({
        "method": ["gmp", "rigl"], "density": [0.1, 0.1], "density_achieved": [0.1, 0.1], "run": ["r", "r"],
        "method_extras": extras, "status": ["ok", "ok"],
    })


def test_a_gradual_method_shows_its_density_after_each_update() -> None:
    table = density_schedule_table(_frame([{"density_by_update": [[0, 1.0], [25, 0.2125], [50, 0.1]]}, {}]))
    assert table is not None and len(table.rows) == 1  # rigl has no schedule
    assert table.rows[0] == ["gmp", "0.1", "0.100", "3", "step 0: 1.000, step 25: 0.212, step 50: 0.100"]


def test_nothing_without_a_gradual_method_and_long_schedules_are_shortened() -> None:
    assert density_schedule_table(_frame([{}, None])) is None
    text = schedule_text([[step, 1.0 - step / 100] for step in range(0, 100, 5)])
    assert text.startswith("step 0: 1.000, step 5: 0.950") and "... 12 more ..." in text and text.endswith("step 95: 0.050")
