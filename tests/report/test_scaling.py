"""The Scaling section (a run with a sweep) and what the other tables show of sweeps and
torch.compile, on synthetic run folders whose figures can be recomputed by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dstbench.report.figures import plot_style
from dstbench.report.scaling import axes_of, scaling_plot, scaling_table, swept_rows
from dstbench.report.tables import speed_table
from dstbench.results.derive import derive, load_frame
from dstbench.suite.cases import case_id
from tests.gates.synthetic import BASE_MS, line, scaled, write_run
from tests.conftest import micro_suite

WIDTHS = [(192, 3, "aaaaaaaaaaaaaaa1"), (384, 6, "aaaaaaaaaaaaaaa2")]
# Per width: (method, kind, ms factor, FLOPs per step); speedups against rigl by hand: barter 2.0 at
# 192 and 3.2 at 384, small_dense (the shape limit) 2.5 and 4.0, FLOP limit 5 at both.
CASES = {
    192: [("dense", "dense", 1.0, 10e9), ("rigl", "masked", 1.0, 10e9), ("small_dense", "compact", 0.4, 2e9),
          ("barter", "compact", 0.5, 2e9)],
    384: [("dense", "dense", 4.0, 40e9), ("rigl", "masked", 4.0, 40e9), ("small_dense", "compact", 1.0, 8e9),
          ("barter", "compact", 1.25, 8e9)],
}


def _sweep_run(tmp_path: Path, extra: dict[str, Any] | None = None, *, product: bool = False) -> Path:
    lines, hashes = [], []
    batches = [8, 16] if product else [None]
    for (width, heads, digest) in WIDTHS:
        for batch in batches:
            sweep = {"model.embed_dim": width, "model.num_heads": heads}
            if batch is not None:
                sweep["batch_size"] = batch
            suite_hash = digest[:-1] + str(batch or 0)
            hashes.append(suite_hash)
            for method, kind, factor, flops in CASES[width]:
                density = 1.0 if kind == "dense" else 0.1
                lines.append(line(
                    method, density, kind=kind, method_name=method, segment_ms=scaled(BASE_MS, factor * (batch or 8) / 8),
                    flops_per_step=int(flops), suite_hash=suite_hash, sweep=sweep, case_id=case_id(method, density, sweep),
                    state_bytes=int(1_000_000 * factor), **(extra or {}),
                ))
    run = write_run(tmp_path / "run", lines, suite=micro_suite(reference="rigl"))
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "suite_hash": "b" * 16, "point_hashes": hashes}))
    return run


def _derived(run: Path) -> Any:
    return derive(load_frame([run]), "rigl")


def test_scaling_table_lists_each_point_within_its_point(tmp_path: Path) -> None:
    derived = _derived(_sweep_run(tmp_path))
    table = scaling_table(derived)
    assert table is not None
    assert table.headers[:4] == ["method", "density", "embed_dim", "num_heads"]
    rows = {(r[0], r[2]): dict(zip(table.headers, r)) for r in table.rows}
    assert ("rigl", "192") not in rows  # the reference's own figures are 1 and 0 by construction
    assert rows[("barter", "192")]["speedup vs rigl [95% CI]"].startswith("2.00×")
    assert rows[("barter", "384")]["speedup vs rigl [95% CI]"].startswith("3.20×")
    assert rows[("barter", "384")]["vs dense [95% CI]"].startswith("3.20×")
    assert rows[("barter", "192")]["FLOP limit"] == rows[("barter", "384")]["FLOP limit"] == "5.00×"
    assert rows[("barter", "192")]["shape limit"] == "2.50×" and rows[("barter", "384")]["shape limit"] == "4.00×"
    assert rows[("barter", "384")]["of shape limit"] == "80.0%"
    # Rows run method by method, each along the axis.
    assert [(r[0], r[2]) for r in table.rows][:2] == [("dense", "192"), ("dense", "384")]


def test_scaling_plot_draws_each_axis_with_its_limits(tmp_path: Path) -> None:
    derived = _derived(_sweep_run(tmp_path))
    rows = swept_rows(derived)
    # num_heads moves in lockstep with embed_dim: named beside it, not an axis of its own.
    assert axes_of(rows) == [("model.embed_dim", ["model.num_heads"])]
    with plot_style():
        plot = scaling_plot(derived)
    assert plot is not None and plot.title == "Speedup and memory reduction against embed_dim (num_heads 3 · 6)"
    assert "barter @ 0.1, speedup vs rigl against embed_dim (num_heads 3 · 6): 2.00× " in plot.alt
    assert "(FLOP limit 5.00×) at 192" in plot.alt and "at 384" in plot.alt
    speed_panel = plot.figure.axes[0]
    dashed = [l for l in speed_panel.get_lines() if l.get_linestyle() == "--"]
    dotted = [l for l in speed_panel.get_lines() if l.get_linestyle() == ":"]
    assert dashed and dotted  # the FLOP limit of every line, the shape limit of the compact ones
    assert sorted(dotted[-1].get_ydata().tolist()) == pytest.approx([2.5, 4.0])
    # Three panels: against rigl, against dense, memory reduction.
    assert len([ax for ax in plot.figure.axes if ax.get_xlabel()]) == 3


def test_a_product_sweep_has_an_axis_per_key(tmp_path: Path) -> None:
    derived = _derived(_sweep_run(tmp_path, product=True))
    assert [axis for axis, _ in axes_of(swept_rows(derived))] == ["model.embed_dim", "batch_size"]
    table = scaling_table(derived)
    assert table is not None and table.headers[2:5] == ["embed_dim", "num_heads", "batch_size"]
    with plot_style():
        plot = scaling_plot(derived)
    assert plot is not None and len([ax for ax in plot.figure.axes if ax.get_xlabel()]) == 6
    # A line per method, density and value of the other axis.
    assert "barter @ 0.1 · batch_size=16, speedup vs rigl against embed_dim" in plot.alt


def test_no_scaling_section_without_a_sweep(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", [line("rigl", 0.1), line("barter", 0.1, kind="compact")], suite=micro_suite(reference="rigl"))
    derived = _derived(run)
    assert scaling_table(derived) is None and scaling_plot(derived) is None
    assert "point" not in speed_table(derived).headers


def test_speed_table_names_points_and_shows_compilation(tmp_path: Path) -> None:
    compiled = {
        "compile": {"backend": "inductor", "fullgraph": False, "dynamic": None}, "compile_s": 12.5, "recompiles": 2,
        "recompile_ms": 450.0, "topology_recompile_ms": 450.0, "topology_ms": 50.0,
    }
    derived = _derived(_sweep_run(tmp_path, compiled))
    table = speed_table(derived)
    assert table.headers[0] == "point" and table.headers[-3:] == ["compile s", "recompiles", "flags"]
    row = dict(zip(table.headers, next(r for r in table.rows if r[1] == "barter" and r[0] == "embed_dim=192,num_heads=3")))
    assert row["compile s"] == "12.5" and row["recompiles"] == "2 (450 ms)"
    # The topology share counts the recompilation charged to the updates: (50 + 450) ms of the segments.
    barter = derived[(derived["method"] == "barter") & (derived["point"] == "embed_dim=192,num_heads=3")].iloc[0]
    assert barter["topology_share"] == pytest.approx(500.0 / sum(scaled(BASE_MS, 0.5)))
