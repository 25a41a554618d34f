"""Plot sections draw from the derived frame and stand aside when their data is absent."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from dstbench.report import plots
from dstbench.report.derive import derive, load_frame
from dstbench.report.sections import figure_to_uri
from tests.report.conftest import synthetic_lines, write_run

CORE = ["speedup_plot", "memory_plot", "segment_plot", "state_plot", "topology_plot", "compact_topology_plot"]


@pytest.fixture
def derived(synthetic_run: Path) -> pd.DataFrame:
    return derive(load_frame([synthetic_run]), "rigl")


def test_every_core_plot_draws_the_fixture(derived: pd.DataFrame) -> None:
    with plots.plot_style():
        figures = {name: getattr(plots, name)(derived) for name in CORE}
    assert all(isinstance(figure, Figure) for figure in figures.values()), figures
    # Saving is covered for every section by the page tests; one here checks the embedding.
    uri, width, height = figure_to_uri(figures["compact_topology_plot"])
    assert uri.startswith("data:image/svg+xml;base64,") and width > 0 and height > 0


def test_speedup_plot_has_the_interval_and_flop_limit(derived: pd.DataFrame) -> None:
    with plots.plot_style():
        ax = plots.speedup_plot(derived).axes[0]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels == ["rigl", "barter", "FLOP limit"]
    limits = sorted(tuple(line.get_ydata()) for line in ax.lines if line.get_linestyle() == "--")
    assert limits == [(1.0, 1.0), (5.0, 2.0)]  # rigl against itself; barter at 0.1 and 0.5


def test_plots_without_their_data_return_none(tmp_path: Path, derived: pd.DataFrame) -> None:
    assert plots.accuracy_plot(derived) is None and plots.curve_plot(derived) is None
    lines = [line for line in synthetic_lines() if line.method == "dense"]
    dense_only = derive(load_frame([write_run(tmp_path, "dense", lines)]), "dense")
    assert plots.compact_topology_plot(dense_only) is None
    assert plots.topology_plot(dense_only) is None
    failed_only = derive(load_frame([write_run(tmp_path, "failed", [l for l in synthetic_lines() if l.status != "ok"])]), "set")
    for name in CORE:
        assert getattr(plots, name)(failed_only) is None, name


def test_accuracy_plots_when_present(tmp_path: Path) -> None:
    lines = synthetic_lines()
    for line in lines:
        if line.status == "ok":
            line.top1 = 0.7
            line.curve = [{"epoch": e, "top1": 0.1 * e, "train_loss": 3.0 / e} for e in (1, 2, 3)]
    derived = derive(load_frame([write_run(tmp_path, "acc", lines)]), "rigl")
    with plots.plot_style():
        assert isinstance(plots.accuracy_plot(derived), Figure)
        assert len(plots.curve_plot(derived).axes) == 2


def test_labels_from_the_suite_are_drawn_as_text(tmp_path: Path) -> None:
    lines = synthetic_lines()
    for line in lines:
        if line.method == "barter":
            line.method = "barter $x_{1}$ 100%"  # mathtext would fail or render it as a formula
    derived = derive(load_frame([write_run(tmp_path, "dollar", lines)]), "rigl")
    with plots.plot_style():
        figure = plots.speedup_plot(derived)
        figure_to_uri(figure)
    assert "barter $x_{1}$ 100%" in figure.axes[0].get_legend_handles_labels()[1]
