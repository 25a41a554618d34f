"""Reading a compact method's topology history from `method_extras`."""

from __future__ import annotations

import numpy as np

from dstbench.report.topology import topology_history


def test_per_block_lists() -> None:
    history = topology_history({"topology_history": [
        {"step": 10, "heads": [8, 8], "hidden": [64, 64]},
        {"step": 20, "heads": [6, 4], "hidden": [40, 30]},
    ]})
    assert history["steps"] == [10, 20]
    np.testing.assert_array_equal(history["heads"], [[8, 6], [8, 4]])  # blocks x updates
    np.testing.assert_array_equal(history["hidden"], [[64, 40], [64, 30]])
    assert (history["max_heads"], history["max_hidden"]) == (8, 64)


def test_full_width_sets_the_scale() -> None:
    extras = {"topology_history": [{"step": 0, "heads": [4], "hidden": [32]}], "dense_width": {"heads": [8], "hidden": [64]}}
    history = topology_history(extras)
    assert (history["max_heads"], history["max_hidden"]) == (8, 64)


def test_block_records() -> None:
    history = topology_history({"topology_history": [{"step": 5, "blocks": [{"heads": 3, "hidden": 12}, {"heads": 2, "hidden": 8}]}]})
    np.testing.assert_array_equal(history["heads"], [[3], [2]])


def test_absent_or_malformed_reads_as_absent() -> None:
    for extras in (None, {}, {"steps_total": 3}, {"topology_history": []}, {"topology_history": [1, 2]},
                   {"topology_history": [{"step": 1, "heads": 3}]}):
        assert topology_history(extras) is None
