"""The baselines beside the reference: speedup against dense, the shape limit small_dense sets for
compact methods, and the harness options named beside the memory headline; in the tables, the
terminal headline, Markdown and HTML."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dstbench.report.headline import headline_text
from dstbench.results.derive import derive, harness_options, headline, load_frame
from dstbench.report.html import build_page, render_html, render_markdown
from dstbench.report.tables import speed_table, summary_table
from tests.report.conftest import CASES, ok_line, synthetic_lines, write_run

# small_dense's segments: median 38 ms at 0.1 (barter 40 ms), 76 ms at 0.5 (barter 80 ms).
SMALL_DENSE = [
    ("small_dense", "compact", 0.1, [38.0, 39.0, 37.0, 38.5, 37.5], 2_000_000_000, 4 * 2**20, 12 * 2**20, 0.0),
    ("small_dense", "compact", 0.5, [76.0, 77.0, 75.0, 76.5, 75.5], 5_000_000_000, 20 * 2**20, 30 * 2**20, 0.0),
]


def _row(derived: pd.DataFrame, method: str, density: float) -> pd.Series:
    rows = derived[(derived["method"] == method) & np.isclose(derived["density"], density)]
    assert len(rows) == 1
    return rows.iloc[0]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    lines = synthetic_lines() + [ok_line("synthetic", *case) for case in SMALL_DENSE]
    for line in lines:
        line.fuse_norms, line.precision = True, "fp32"
    return write_run(tmp_path, "baselines-20260102-030405", lines)


@pytest.fixture
def derived(run_dir: Path) -> pd.DataFrame:
    return derive(load_frame([run_dir]), "rigl")


def test_speedup_against_dense_beside_the_reference(derived: pd.DataFrame) -> None:
    # dense's median is 200 ms; barter@0.1 40 ms, rigl@0.5 110 ms.
    assert _row(derived, "barter", 0.1)["speedup_vs_dense"] == pytest.approx(200 / 40)
    assert _row(derived, "rigl", 0.5)["speedup_vs_dense"] == pytest.approx(200 / 110)
    barter = _row(derived, "barter", 0.1)
    assert barter["speedup_vs_dense_ci_low"] < barter["speedup_vs_dense"] < barter["speedup_vs_dense_ci_high"]
    dense = _row(derived, "dense", 1.0)
    assert dense["speedup_vs_dense"] == 1.0 and dense["speedup_vs_dense_ci_low"] == 1.0
    assert math.isnan(_row(derived, "set", 0.1)["speedup_vs_dense"])  # a failed case stays unmeasured


def test_shape_limit_for_compact_methods_only(derived: pd.DataFrame) -> None:
    barter = _row(derived, "barter", 0.1)
    assert barter["shape_limit"] == pytest.approx(100 / 38)  # rigl / small_dense at 0.1
    assert barter["shape_fraction"] == pytest.approx(38 / 40)  # small_dense / barter
    assert barter["shape_fraction"] == pytest.approx(barter["speedup"] / barter["shape_limit"])
    assert _row(derived, "barter", 0.5)["shape_limit"] == pytest.approx(110 / 76)
    small = _row(derived, "small_dense", 0.1)
    assert small["shape_fraction"] == 1.0 and small["shape_limit"] == pytest.approx(small["speedup"])
    for method, density in (("rigl", 0.1), ("dense", 1.0)):
        row = _row(derived, method, density)
        assert math.isnan(row["shape_limit"]) and math.isnan(row["shape_fraction"])


def test_no_shape_limit_without_small_dense(synthetic_run: Path) -> None:
    derived = derive(load_frame([synthetic_run]), "rigl")
    assert derived["shape_limit"].isna().all() and derived["shape_fraction"].isna().all()
    assert harness_options(derived) == [] and headline(derived)["harness"] == []  # lines that record neither


def test_harness_options_name_every_value_seen(tmp_path: Path) -> None:
    lines = [ok_line("s", *case) for case in CASES]
    for index, line in enumerate(lines):
        line.fuse_norms, line.precision = index % 2 == 0, "bf16"
    derived = derive(load_frame([write_run(tmp_path, "mixed", lines)]), "rigl")
    assert harness_options(derived) == ["fuse_norms on / off", "precision bf16"]


def test_headline_carries_speedup_vs_dense_and_harness_options(derived: pd.DataFrame, run_dir: Path) -> None:
    h = headline(derived)
    # small_dense is faster (38 ms) and smaller than barter, but a baseline is never the headline.
    assert h["speedup"]["method"] == "barter" and h["speedup"]["vs_dense"]["value"] == pytest.approx(200 / 40)
    assert h["memory"]["method"] == "barter"
    assert h["harness"] == ["fuse_norms on", "precision fp32"]
    text = headline_text(derived)
    assert "fastest vs rigl: 2.50x (barter at density 0.1" in text and "; vs dense 5.00x (95% CI [" in text
    assert "state + activation bytes; fuse_norms on, precision fp32 for every method)" in text
    # Against dense itself, nothing is repeated.
    assert headline(derive(load_frame([run_dir]), "dense"))["speedup"]["vs_dense"] is None


def test_baselines_are_named_when_nothing_else_ran(tmp_path: Path) -> None:
    lines = [ok_line("s", *case) for case in CASES if case[0] == "dense"] + [ok_line("s", *case) for case in SMALL_DENSE]
    derived = derive(load_frame([write_run(tmp_path, "only-baselines", lines)]), "dense")
    assert headline(derived)["speedup"]["method"] == "small_dense"


def test_tables_show_the_new_columns(derived: pd.DataFrame) -> None:
    table = speed_table(derived)
    cells = dict(zip(table.headers, next(r for r in table.rows if r[:2] == ["barter", "0.1"])))
    assert cells["vs dense [95% CI]"].startswith("5.00× [")
    assert (cells["shape limit"], cells["of shape limit"]) == ("2.63×", "95.0%")
    rigl = dict(zip(table.headers, next(r for r in table.rows if r[:2] == ["rigl", "0.1"])))
    assert rigl["shape limit"] == rigl["of shape limit"] == "—"
    assert "vs dense" in summary_table(derived, "rigl").splitlines()[0]


def test_markdown_and_html_headlines(derived: pd.DataFrame, run_dir: Path) -> None:
    page = build_page(derived, [run_dir], images=False)
    markdown = render_markdown(page)
    assert "**Fastest vs rigl: 2.50×** (barter at density 0.1, 95% CI [" in markdown
    assert "; **vs dense: 5.00×** (95% CI [" in markdown
    assert "state + activation bytes; fuse_norms on, precision fp32 for every method)" in markdown
    html = render_html(page)
    assert "vs dense: <strong>5.00×</strong>" in html and "fuse_norms on, precision fp32 for every method" in html


def test_speedup_plot_draws_the_shape_limit(derived: pd.DataFrame) -> None:
    from dstbench.report.plots import speedup_plot

    figure = speedup_plot(derived).figure
    labels = [t for legend in figure.legends for t in legend.get_texts()]
    assert "shape limit" in [t.get_text() for t in labels]
    dotted = [line for line in figure.axes[0].get_lines() if line.get_linestyle() == ":"]
    ys = sorted(float(y) for line in dotted for y in line.get_ydata())
    assert ys == pytest.approx(sorted([100 / 38, 110 / 76] * 2))  # barter's and small_dense's
