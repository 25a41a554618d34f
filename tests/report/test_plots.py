"""Plot sections draw from the derived frame and stand aside when their data is absent; colour is the
method, marker the density, coincident series share one labelled line, legends stay off the data,
and every plot states its numbers in its alt text."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from dstbench.report import plots
from dstbench.results.derive import derive, load_frame
from dstbench.report.figures import NARROW_WIDTH, Plot, coincident_groups, narrow_layout, palette
from dstbench.report.sections import figure_to_uri
from tests.report.conftest import MIB, ok_line, synthetic_lines, write_run

CORE = ["speedup_plot", "memory_plot", "segment_plot", "state_plot", "topology_plot", "compact_topology_plot"]


@pytest.fixture
def derived(synthetic_run: Path) -> pd.DataFrame:
    return derive(load_frame([synthetic_run]), "rigl")


def test_every_core_plot_draws_the_fixture(derived: pd.DataFrame) -> None:
    with plots.plot_style():
        drawn = {name: getattr(plots, name)(derived) for name in CORE}
    assert all(isinstance(plot, Plot) and isinstance(plot.figure, Figure) and plot.alt for plot in drawn.values()), drawn
    # Saving is covered for every section by the page tests; one here checks the embedding.
    uri, width, height = figure_to_uri(drawn["compact_topology_plot"].figure)
    assert uri.startswith("data:image/svg+xml;base64,") and width > 0 and height > 0


def test_speedup_plot_has_the_interval_and_flop_limit(derived: pd.DataFrame) -> None:
    with plots.plot_style():
        figure = plots.speedup_plot(derived).figure
    ax = figure.axes[0]
    labels = [text.get_text() for text in figure.legends[0].get_texts()]
    assert labels == ["rigl", "barter", "FLOP limit", "density 0.5", "density 0.1"]
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
        assert isinstance(plots.accuracy_plot(derived), Plot)
        assert len(plots.curve_plot(derived).figure.axes) == 2


def test_labels_from_the_suite_are_drawn_as_text(tmp_path: Path) -> None:
    lines = synthetic_lines()
    for line in lines:
        if line.method == "barter":
            line.method = "barter $x_{1}$ 100%"  # mathtext would fail or render it as a formula
    derived = derive(load_frame([write_run(tmp_path, "dollar", lines)]), "rigl")
    with plots.plot_style():
        figure = plots.speedup_plot(derived).figure
        figure_to_uri(figure)
    assert "barter $x_{1}$ 100%" in [t.get_text() for t in figure.legends[0].get_texts()]


@pytest.mark.slow
def test_a_report_plot_is_the_same_svg_each_time(derived: pd.DataFrame) -> None:
    # Saved under the report's style (fixed SVG id salt): re-rendering a report changes no byte.
    from dstbench.report.sections import render_sections

    first, second = (
        {r.title: r.image_uri for r in render_sections(derived) if r.image_uri} for _ in range(2)
    )
    assert first and first == second


def test_palette_gives_every_series_its_own_colour() -> None:
    for count in (3, 10, 11, 23):
        colors = palette([f"s{i}" for i in range(count)])
        assert len({to_hex(c) for c in colors.values()}) == count


def test_coincident_groups_within_a_tolerance() -> None:
    points = {"set": {0.1: 75.0, 0.5: 75.0}, "rigl": {0.1: 75.0, 0.5: 75.0}, "chase": {0.1: 75.002, 0.5: 75.0},
              "barter": {0.1: 15.8, 0.5: 41.4}, "dense": {1.0: 72.0}}
    assert coincident_groups(points) == [["set", "rigl"], ["chase"], ["barter"], ["dense"]]
    assert coincident_groups(points, atol=0.01) == [["set", "rigl", "chase"], ["barter"], ["dense"]]


def _same_memory_run(tmp_path: Path, peak: bool = False) -> pd.DataFrame:
    """dense and three masked methods whose memory is identical at both densities, and barter."""
    lines = [ok_line("m", "dense", "dense", 1.0, [200.0] * 5, 10, 40 * MIB, 60 * MIB, 0.0, peak=peak)]
    for method in ("rigl", "set", "mest"):
        for density in (0.5, 0.1):
            lines.append(ok_line("m", method, "masked", density, [100.0] * 5, 10, 48 * MIB, 60 * MIB, 1.0, peak=peak))
    for density, state in ((0.5, 20), (0.1, 4)):
        lines.append(ok_line("m", "barter", "compact", density, [50.0] * 5, 5, state * MIB, 30 * MIB, 1.0, peak=peak))
    return derive(load_frame([write_run(tmp_path, "same", lines)]), "dense")


def test_coincident_memory_is_one_labelled_line_and_the_title_names_the_basis(tmp_path: Path) -> None:
    derived = _same_memory_run(tmp_path)
    with plots.plot_style():
        plot = plots.memory_plot(derived)
    labels = [t.get_text() for t in plot.figure.legends[0].get_texts()]
    assert labels[:3] == ["dense", "rigl = set = mest", "barter"]
    assert plot.title == "Training state + saved activations vs density (exact bytes)"
    # The numbers are in the alt text: rigl = set = mest at 108 MiB at both densities.
    assert "rigl = set = mest: 108.0 at 0.5, 108.0 at 0.1" in plot.alt and "barter: 50.0 at 0.5, 34.0 at 0.1" in plot.alt
    with plots.plot_style():
        peak = plots.memory_plot(_same_memory_run(tmp_path / "peak", peak=True))
    assert peak.title.startswith("Peak allocated memory (CUDA allocator)")


def test_legends_stay_off_the_axes_in_both_layouts(derived: pd.DataFrame) -> None:
    for narrow in (False, True):
        with plots.plot_style(), narrow_layout(narrow):
            figure = plots.speedup_plot(derived).figure
        renderer = FigureCanvasAgg(figure).get_renderer()
        figure.draw(renderer)  # lay out (constrained layout places the legend outside)
        legend = figure.legends[0].get_window_extent(renderer)
        axes = figure.axes[0].get_window_extent(renderer)
        assert not legend.overlaps(axes), (narrow, legend, axes)
        if narrow:
            assert figure.get_size_inches()[0] == pytest.approx(NARROW_WIDTH)
            assert legend.y1 <= axes.y0  # below the axes on a phone
        else:
            assert legend.x0 >= axes.x1  # beside them on a page


def test_a_density_keeps_its_marker_in_every_plot(tmp_path: Path) -> None:
    lines = synthetic_lines()
    for line in lines:
        line.top1 = 0.5 if line.status == "ok" else None
    derived = derive(load_frame([write_run(tmp_path, "acc", lines)]), "rigl")

    def markers(figure: Figure) -> dict[str, str]:
        return {t.get_text(): h.get_marker() for h, t in zip(figure.legends[0].legend_handles, figure.legends[0].get_texts())
                if t.get_text().startswith("density")}

    with plots.plot_style():
        speed, memory, accuracy = (markers(f(derived).figure) for f in (plots.speedup_plot, plots.memory_plot, plots.accuracy_plot))
    assert speed["density 0.1"] == memory["density 0.1"] == accuracy["density 0.1"]
    assert speed["density 0.5"] == memory["density 0.5"] != memory["density 0.1"]


def test_alt_texts_state_the_numbers(derived: pd.DataFrame) -> None:
    with plots.plot_style():
        speedup = plots.speedup_plot(derived)
        segments = plots.segment_plot(derived)
        topology = plots.compact_topology_plot(derived)
    # barter@0.1: rigl's median 100 ms / barter's 40 ms; its FLOP limit 10e9 / 2e9.
    assert "barter: 1.38× [" in speedup.alt and "2.50× [" in speedup.alt and "(FLOP limit 5.00×) at 0.1" in speedup.alt
    assert "barter @ 0.1: median 40.0 ms over 5 segments (range 38.0-42.0)" in segments.alt
    assert "barter @ 0.1, heads per block: 8, 8, 8, 8 at step 100, 4, 3, 2, 2 at step 300" in topology.alt
