"""The section registry: extra modules add tables and plots without touching the template."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest

from dstbench.report import sections
from dstbench.results.derive import derive, load_frame
from dstbench.report.html import build_page, render_html
from dstbench.report.plots import new_figure
from dstbench.report.sections import Table, register_plot, register_table, render_sections


@pytest.fixture
def extra_sections() -> Iterator[None]:
    before = dict(sections._SECTIONS)

    @register_table("extra_table", "Extra table", order=175)
    def extra_table(derived: pd.DataFrame) -> Table:
        return Table(["case", "segments"], [[str(r["case_id"]), str(len(r["segment_ms"]))] for _, r in derived.iterrows()])

    @register_plot("extra_plot", "Extra plot", order=176, caption="an extra")
    def extra_plot(derived: pd.DataFrame):  # type: ignore[no-untyped-def]
        figure, ax = new_figure(3, 2)
        ax.plot([0, 1], [0, 1])
        return figure

    @register_plot("absent_plot", "Absent plot", order=177)
    def absent_plot(derived: pd.DataFrame) -> None:
        return None

    @register_table("broken_table", "Broken table", order=178)
    def broken_table(derived: pd.DataFrame) -> Table:
        raise KeyError("profile")

    yield
    sections._SECTIONS.clear()
    sections._SECTIONS.update(before)


@pytest.mark.slow
def test_registered_sections_reach_the_page(extra_sections: None, synthetic_run: Path) -> None:
    derived = derive(load_frame([synthetic_run]), "rigl")
    page = build_page(derived, [synthetic_run])
    rendered = {s.key: s for s in page.sections}
    assert rendered["extra_table"].table.rows[0][1] == "5"
    assert rendered["extra_plot"].image_uri.startswith("data:image/svg+xml")
    assert "absent_plot" not in rendered
    assert rendered["broken_table"].error == "KeyError: 'profile'"
    keys = list(rendered)
    assert keys.index("failed") < keys.index("extra_table") < keys.index("extra_plot") < keys.index("environment")
    html = render_html(page)
    assert 'id="extra_table"' in html and 'id="extra_plot"' in html and "an extra" in html
    assert "This section could not be built: KeyError: &#39;profile&#39;" in html


def test_terminal_selection_leaves_out_plots_and_page_only_tables(synthetic_run: Path) -> None:
    derived = derive(load_frame([synthetic_run]), "rigl")
    keys = [s.key for s in render_sections(derived, images=False, terminal_only=True)]
    assert keys[:4] == ["speed", "memory", "tracker_fields", "failed"]
    assert "environment" not in keys and not any(k.endswith("_plot") for k in keys)


def test_a_missing_section_module_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sections, "SECTION_MODULES", sections.SECTION_MODULES + ("dstbench.report.not_there_yet",))
    assert sections.sections()
