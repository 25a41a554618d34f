"""`compare --metric`: a tracker's field judged per case in its declared direction, an exact one by
its change alone, a sampled one over seeds by the equivalence rule; an unknown name is unusable input."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from dstbench.gates.compare import compare_runs, exit_code
from dstbench.gates.comparison_text import render
from dstbench.gates.field_compare import compare_field
from dstbench.gates.sides import CompareInputError, Side, side_key


def side(values: dict[int, dict[str, Any]], method: str = "rigl") -> Side:
    """One case (rigl@0.5) at the given seeds, each line's fields as given."""
    lines = [{"status": "ok", "method": method, "density": 0.5, "seed": seed, "params": {}, "suite_hash": "h", **fields}
             for seed, fields in values.items()]
    return Side(Path("run"), {}, {side_key(line): line for line in lines})


def verdict(name: str, base: dict[int, dict[str, Any]], cur: dict[int, dict[str, Any]], **kw: Any) -> Any:
    options = {"time_threshold": 10.0, "memory_threshold": 1.0, "alpha": 0.05, **kw}
    [found] = compare_field(side(base), side(cur), name, **options)
    return found


def test_an_exact_field_is_judged_as_memory_in_its_direction() -> None:
    grew = verdict("flops_per_step", {0: {"flops_per_step": 100}}, {0: {"flops_per_step": 110}})
    assert (grew.verdict, grew.basis, round(grew.change, 3)) == ("regression", "exact", 0.1)
    assert verdict("flops_per_step", {0: {"flops_per_step": 100}}, {0: {"flops_per_step": 100.5}}).verdict == "unchanged"
    assert verdict("flops_per_step", {0: {"flops_per_step": 100}}, {0: {"flops_per_step": 80}}).verdict == "improvement"


def test_a_sampled_field_is_judged_over_seeds_by_the_equivalence_rule() -> None:
    base = {s: {"rss_peak_bytes": v} for s, v in enumerate([100.0, 102.0, 98.0, 101.0, 99.0])}
    same = {s: {"rss_peak_bytes": v + 0.5} for s, v in enumerate([100.0, 102.0, 98.0, 101.0, 99.0])}
    worse = {s: {"rss_peak_bytes": v * 1.5} for s, v in enumerate([100.0, 102.0, 98.0, 101.0, 99.0])}
    assert verdict("rss_peak_bytes", base, same).verdict == "unchanged"
    regressed = verdict("rss_peak_bytes", base, worse)
    assert regressed.verdict == "regression" and regressed.basis == "paired by seed (n=5)"
    assert regressed.ci_low > 0.1 and math.isclose(regressed.change, 0.5)
    one = verdict("rss_peak_bytes", {0: {"rss_peak_bytes": 100.0}}, {0: {"rss_peak_bytes": 300.0}})
    assert (one.verdict, one.basis) == ("inconclusive", "one seed")


def test_a_regressed_field_fails_the_gate_and_is_named() -> None:
    base, cur = side({0: {"flops_per_step": 100}}), side({0: {"flops_per_step": 200}})
    comparison = compare_runs(base, cur, memory_only=True, metrics=("flops_per_step",))
    assert exit_code(comparison, strict=False) == 1
    text = render(comparison)
    assert "tracker fields (--metric" in text and "rigl@0.5 (flops_per_step +100.0%)" in text
    with pytest.raises(CompareInputError, match="--metric: unknown metric nope: not a numeric field"):
        compare_runs(base, cur, memory_only=True, metrics=("nope",))
