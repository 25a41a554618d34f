"""Reading a compact method's topology history from `method_extras`."""

from __future__ import annotations

import numpy as np

import pandas as pd
import pytest

from dstbench.report.compact_topology import empty_blocks, exchange_summary, topology_exchange_table, topology_history


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


def _exchange(pruned: int, pruned_clones: int, population: int, clone_population: int, moved: int, new: int = 0) -> dict:
    record = {"pruned": pruned, "pruned_clones": pruned_clones, "population": population,
              "clone_population": clone_population, "moved": moved, "cloned": pruned - new, "new": new}
    return {"heads": dict(record, pruned=1, pruned_clones=0, cloned=1, new=0), "hidden": record}


EXCHANGES = {"topology_history": [
    {"step": 0, "heads": [1, 1], "hidden": [10, 10]},
    {"step": 50, "heads": [2, 0], "hidden": [12, 8], "exchange": _exchange(6, 0, 20, 0, 2)},
    {"step": 100, "heads": [2, 0], "hidden": [12, 8], "skipped": True},
    {"step": 150, "heads": [2, 0], "hidden": [9, 11], "exchange": _exchange(4, 3, 20, 12, 3, new=1)},
    {"step": 200, "heads": [2, 0], "hidden": [9, 11], "exchange": _exchange(2, 1, 20, 8, 0)},
]}


def test_exchange_summary_totals_and_shares_after_the_first_update() -> None:
    summary = exchange_summary(EXCHANGES)
    hidden = summary["hidden"]
    assert (hidden["updates"], hidden["pruned"], hidden["moved"], hidden["new"], hidden["cloned"]) == (3, 12, 5, 1, 11)
    # Updates 2 and 3: (3 + 1) of (4 + 2) pruned were made at the previous update; (12 + 8) of 40 units were.
    assert hidden["fresh_pruned_share"] == pytest.approx(4 / 6)
    assert hidden["fresh_population_share"] == pytest.approx(20 / 40)
    assert summary["heads"]["fresh_pruned_share"] == 0.0
    assert exchange_summary({"topology_history": [{"step": 0, "heads": [1], "hidden": [2]}]}) is None
    assert exchange_summary(None) is None


def test_exchange_table_shows_each_compact_case_and_kind() -> None:
    derived = pd.DataFrame([
        {"method": "barter", "density": 0.1, "method_extras": EXCHANGES, "run": "r"},
        {"method": "rigl", "density": 0.1, "method_extras": {}, "run": "r"},
    ])
    table = topology_exchange_table(derived)
    assert [row[:3] for row in table.rows] == [["barter", "0.1", "heads"], ["barter", "0.1", "hidden"]]
    assert table.rows[1][3:] == ["3", "—", "12", "66.7%", "50.0%", "1.33×", "5", "1", "0 → 0"]  # asked: not recorded
    assert table.rows[0][-1] == "0 → 1"  # block 1 lost its only head and never got one back
    assert topology_exchange_table(derived.iloc[1:]) is None
    # Runs that record what each update asked (fraction x population) show its total beside the pruned.
    asked = {"topology_history": [dict(e, exchange={k: dict(v, asked=v["pruned"] + 0.4) for k, v in e["exchange"].items()})
                                  if "exchange" in e else e for e in EXCHANGES["topology_history"]]}
    assert exchange_summary(asked)["hidden"]["asked"] == pytest.approx(12 + 3 * 0.4)
    table = topology_exchange_table(derived.assign(method_extras=[asked, {}]))
    assert table.rows[1][4:6] == ["13.2", "12"]


def test_empty_blocks_are_counted_at_the_start_and_the_end_even_without_exchange_records() -> None:
    assert empty_blocks(EXCHANGES) == {"heads": (0, 1), "hidden": (0, 0)}
    bare = {"topology_history": [{"step": 0, "heads": [0, 2, 2], "hidden": [0, 5, 5]}, {"step": 9, "heads": [0, 0, 4], "hidden": [0, 5, 5]}]}
    assert empty_blocks(bare) == {"heads": (1, 2), "hidden": (1, 1)} and empty_blocks({}) is None
    table = topology_exchange_table(pd.DataFrame([{"method": "barter", "density": 0.1, "method_extras": bare, "run": "r"}]))
    assert [row[-1] for row in table.rows] == ["1 → 2", "1 → 1"] and table.rows[0][3] == "—"


def test_the_summary_names_compact_cases_with_empty_blocks() -> None:
    from dstbench.report.compact_topology import empty_block_notes

    derived = pd.DataFrame([
        {"method": "barter", "density": 0.1, "method_extras": EXCHANGES, "run": "r"},
        {"method": "barter", "density": 0.5, "method_extras": {"topology_history": [{"step": 0, "heads": [1, 1], "hidden": [3, 3]}]}, "run": "r"},
    ])
    assert empty_block_notes(derived) == ["barter@0.1: blocks without heads 0 → 1 of 2 (start → end)"]
