"""The end-to-end speedup: the schedule's steps at the step time without updates, plus its updates at
their measured cost, against the reference's, on hand-made lines."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dstbench.results.derive import derive, load_frame
from tests.gates.synthetic import line, write_run


def _timed(method: str, density: float, step_ms: float, update_ms: float, updated: list[int], scheduled: int) -> dict:
    """Ten segments of 4 steps at `step_ms` per step; the segments in `updated` also hold one update
    of `update_ms`; a schedule of 1,000 steps with `scheduled` updates."""
    topology = [update_ms if i in updated else 0.0 for i in range(10)]
    ms = [4 * step_ms * (1 + 0.001 * (i % 3)) + t for i, t in enumerate(topology)]
    return line(method, density, segment_ms=ms, segment_steps=4, segment_topology_ms=topology,
                segment_topology_updates=[1 if i in updated else 0 for i in range(10)], topology_updates=len(updated),
                method_extras={"schedule_steps": 1000, "updates_scheduled": scheduled})


def test_the_schedule_with_its_updates_priced_at_the_measured_times(tmp_path: Path) -> None:
    lines = [_timed("rigl", 0.5, 10.0, 40.0, [2, 7], 20), _timed("barter", 0.5, 4.0, 8.0, [3, 8], 20),
             _timed("static", 0.5, 10.5, 0.0, [], 0), _timed("dense", 1.0, 10.5, 0.0, [], 0)]
    frame = derive(load_frame([write_run(tmp_path / "run", lines)]), "rigl").set_index("case_id")
    barter, static = frame.loc["barter@0.5"], frame.loc["static@0.5"]
    # The step time is the median over segments, less their updates: about 10.01, 4.004 and 10.51 ms.
    rigl_total = 1000 * frame.loc["rigl@0.5", "step_ms_without_updates"] + 20 * 40.0
    assert barter["speedup_end_to_end"] == pytest.approx(rigl_total / (1000 * barter["step_ms_without_updates"] + 20 * 8.0))
    assert static["speedup_end_to_end"] == pytest.approx(rigl_total / (1000 * static["step_ms_without_updates"]))
    assert barter["speedup_end_to_end_ci_low"] < barter["speedup_end_to_end"] < barter["speedup_end_to_end_ci_high"]
    assert "1000 steps with 20 updates against 20" in barter["speedup_end_to_end_basis"]
    assert frame.loc["rigl@0.5", "speedup_end_to_end"] == 1.0
    # Per step static is the slower (10.5 against 10 ms); end to end rigl's 20 updates of 40 ms cost more.
    assert frame.loc["rigl@0.5", "step_ms_without_updates"] / static["step_ms_without_updates"] < 1.0 < static["speedup_end_to_end"]
    # Dense has no rigl case at its density (1.0): no end-to-end speedup, as no per-step one.
    assert math.isnan(frame.loc["dense@1", "speedup_end_to_end"]) and "no rigl case" in frame.loc["dense@1", "speedup_end_to_end_basis"]


def test_an_unmeasured_update_or_an_unrecorded_schedule_says_why(tmp_path: Path) -> None:
    lines = [_timed("rigl", 0.5, 10.0, 40.0, [], 20), _timed("barter", 0.5, 4.0, 8.0, [3], 20)]
    old = {**_timed("set", 0.5, 10.0, 40.0, [2], 20), "method_extras": {}}
    frame = derive(load_frame([write_run(tmp_path / "run", [*lines, old])]), "rigl").set_index("case_id")
    assert math.isnan(frame.loc["barter@0.5", "speedup_end_to_end"])
    assert "no update of rigl fell in the timed segments" in frame.loc["barter@0.5", "speedup_end_to_end_basis"]
    assert "do not record their schedules" in frame.loc["set@0.5", "speedup_end_to_end_basis"]


def test_a_frames_numpy_integer_step_count_pairs_the_rounds() -> None:
    """A frame whose segment_steps are all integers holds them as numpy.int64, not int: the rounds
    must still pair (they did not, and every speedup to target and end to end read 'unpaired')."""
    import numpy as np
    import pandas as pd

    from dstbench.results.target_speedup import round_steps
    from dstbench.results.target_time import step_units

    row = pd.Series({"segment_ms": [40.0, 41.0], "segment_group": ["g", "g"], "segment_round": [0, 1], "segment_process": [0, 1],
                     "segment_steps": np.int64(4), "segment_topology_ms": [0.0, 0.0], "topology_updates": np.int64(0)})
    assert len(round_steps(row)) == 2 and step_units(row) is not None
