"""The HTML and Markdown reports: self-contained, escaped, and carrying every part the issue lists."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dstbench.results.derive import derive, load_frame
from dstbench.report.html import build_page, render_markdown
from tests.report.conftest import HOSTILE


class Collector(HTMLParser):
    """Every tag with its attributes, and the page's text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(html: str) -> Collector:
    collector = Collector()
    collector.feed(html)
    return collector


@pytest.fixture(scope="module")
def page(report_html: Path) -> Collector:
    return parse(report_html.read_text(encoding="utf-8"))


def test_markup_from_results_and_suite_is_text(report_html: Path, page: Collector) -> None:
    html = report_html.read_text(encoding="utf-8")
    assert not re.search(r"<script", html, re.IGNORECASE)
    assert "script" not in {tag for tag, _ in page.tags}
    text = "".join(page.text)
    assert f"suite {HOSTILE}" in text  # title and suite block, as text
    assert f"barter {HOSTILE}" in text  # method label in tables and headline
    assert f"note: {HOSTILE}" in text or f'note: "{HOSTILE}"' in text  # the method parameter
    assert f"GPU {HOSTILE}" in text  # environment record


def test_nothing_is_loaded_from_elsewhere(page: Collector) -> None:
    sources = [attrs.get("src") for tag, attrs in page.tags if "src" in attrs]
    assert sources and all(src.startswith("data:image/svg+xml;base64,") for src in sources)
    assert not [attrs for tag, attrs in page.tags if tag == "link"]
    csp = [attrs["content"] for tag, attrs in page.tags if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]
    hrefs = [attrs["href"] for tag, attrs in page.tags if tag == "a"]
    assert all(href.startswith("#") for href in hrefs)


def test_report_has_headline_tables_plots_suite_and_environment(page: Collector) -> None:
    ids = {attrs.get("id") for _, attrs in page.tags}
    for section in ("speed", "memory", "failed", "accuracy", "speedup_plot", "memory_plot", "segment_plot",
                    "topology_plot", "compact_topology_plot", "accuracy_plot", "curve_plot", "runs",
                    "environment", "gpu", "suite"):
        assert section in ids, section
    text = " ".join(" ".join(page.text).split())
    assert "Fastest vs rigl 2.50×" in text
    assert f"barter {HOSTILE} at density 0.1; 95% CI [" in text
    assert "Best memory reduction vs rigl 84.6%" in text
    assert "5 / 7 ok" in text and "2 failed" in text
    assert "SwPowerCap" in text and "0123456789abcdef" in text


def test_markdown_report(synthetic_run: Path) -> None:
    derived = derive(load_frame([synthetic_run]), "rigl")
    page = build_page(derived, [synthetic_run], images=False)
    page.runs[0].suite_text = "name: x\ndescription: '```'\n"
    markdown = render_markdown(page)
    assert "**Fastest vs rigl: 2.50×** (barter at density 0.1, 95% CI [" in markdown
    assert "\n## Speed\n\n" in markdown and "| method" in markdown and "| set" in markdown
    assert "\n## Failed cases\n" in markdown and "torch.OutOfMemoryError" in markdown
    # The suite's own backticks cannot close its code block.
    assert "\n````yaml\nname: x\ndescription: '```'\n````\n" in markdown


def test_a_run_folder_without_run_json_or_suite_yaml(synthetic_run: Path) -> None:
    from dstbench.report.html import render_html

    (synthetic_run / "run.json").unlink()
    (synthetic_run / "suite.yaml").unlink()
    page = build_page(derive(load_frame([synthetic_run]), "rigl"), [synthetic_run], images=False)
    assert "suite.yaml is missing from this run folder" in render_html(page)
    assert "suite.yaml is missing from this run folder" in render_markdown(page)
