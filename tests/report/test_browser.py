"""The report and the published site in a real browser: Debian's chromium driven by playwright.

Skipped where /usr/bin/chromium or the playwright package is missing, unless
`DSTBENCH_REQUIRE_BROWSER=1` (set by `.ci/run` once chromium is installed): then missing either fails.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.report.conftest import HOSTILE

CHROMIUM = Path("/usr/bin/chromium")
REQUIRED = os.environ.get("DSTBENCH_REQUIRE_BROWSER") == "1"
if REQUIRED:
    playwright_api = importlib.import_module("playwright.sync_api")  # an ImportError fails the run
else:
    playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists() and not REQUIRED, reason="needs Debian's chromium at /usr/bin/chromium"),
]
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


class Watched:
    """A page that records console errors, page errors and every request it makes; any request
    to the network is refused."""

    def __init__(self, browser: Any, **context: Any) -> None:
        self.context = browser.new_context(**context)
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("console", lambda msg: msg.type == "error" and self.errors.append(msg.text))
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def _route(self, route: Any) -> None:
        if route.request.url.startswith(("file:", "data:")):
            route.continue_()
        else:
            route.abort()

    def offsite(self) -> list[str]:
        return [url for url in self.requests if not url.startswith(("file:", "data:"))]


def test_report_in_chromium(browser: Any, report_html: Path) -> None:
    watched = Watched(browser, viewport={"width": 1280, "height": 900})
    page = watched.page
    page.goto(report_html.as_uri(), wait_until="load")
    tables = page.locator("table")
    assert tables.count() >= 6
    for i in range(tables.count()):
        tables.nth(i).scroll_into_view_if_needed()
        assert tables.nth(i).is_visible()
    images = page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
    assert len(images) >= 7 and all(done and width > 0 for done, width in images)
    # Markup from the suite is shown as text, never run.
    assert page.evaluate("document.querySelectorAll('script').length") == 0
    assert HOSTILE in page.locator("h1").inner_text()
    # The suite's expectations, each with its verdict; a failed one is marked.
    verdicts = page.locator("#expectations tbody tr")
    # Failures first, one row each; the cases each passing gate covers share one row.
    assert verdicts.count() == 3 and page.locator("#expectations tr.failed").count() == 2
    assert page.locator("#expectations tbody tr").nth(0).get_attribute("class") == "failed"
    assert watched.errors == [] and watched.offsite() == []
    assert watched.requests == [report_html.as_uri()]
    watched.context.close()


def test_wide_tables_scroll_inside_their_box_at_desktop_width(browser: Any, report_html: Path) -> None:
    watched = Watched(browser, viewport={"width": 1400, "height": 900})
    page = watched.page
    page.goto(report_html.as_uri(), wait_until="load")
    # Nothing runs past the window: a table wider than its box scrolls inside it.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    boxes = page.evaluate(
        "Array.from(document.querySelectorAll('.scroll')).map(e => [e.getBoundingClientRect().right, "
        "getComputedStyle(e).overflowX, e.querySelector('table').getBoundingClientRect().width, e.clientWidth])"
    )
    assert boxes and all(right <= 1400 and overflow == "auto" for right, overflow, _, _ in boxes)
    # The Time to accuracy table (the run has accuracy curves) fits its box: no sideways scroll.
    section = page.locator("#time_to_accuracy .scroll")
    assert section.count() == 1 and section.evaluate("e => e.scrollWidth <= e.clientWidth")
    watched.context.close()


def test_report_on_a_phone_and_in_print(browser: Any, report_html: Path) -> None:
    watched = Watched(browser, viewport={"width": 390, "height": 844}, is_mobile=True, device_scale_factor=2)
    page = watched.page
    page.goto(report_html.as_uri(), wait_until="load")
    # Wide tables scroll inside their own box; the page itself never scrolls sideways.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    widths = page.evaluate("Array.from(document.images).map(i => i.getBoundingClientRect().width)")
    assert all(0 < w <= 390 for w in widths)
    # Each plot shows its phone layout, scaled down little enough that its text stays readable.
    shown = page.evaluate(
        "Array.from(document.querySelectorAll('figure picture')).map(p => {const i = p.querySelector('img');"
        " const s = p.querySelector('source'); return [i.currentSrc === s.srcset, i.getBoundingClientRect().width / i.naturalWidth]})"
    )
    assert len(shown) >= 7 and all(narrow and scale >= 0.75 for narrow, scale in shown), repr(shown)
    page.emulate_media(media="print")
    assert page.locator("ul.toc").is_hidden()
    assert page.locator("#speed table").is_visible()
    assert watched.errors == [] and watched.offsite() == []
    watched.context.close()


def test_report_is_usable_from_the_keyboard(browser: Any, report_html: Path) -> None:
    watched = Watched(browser, viewport={"width": 1280, "height": 900})
    page = watched.page
    page.goto(report_html.as_uri(), wait_until="load")
    # Every scroll box is a named region a keyboard can reach, around a captioned table.
    regions = page.locator("div.scroll")
    assert regions.count() >= 6
    for i in range(regions.count()):
        region = regions.nth(i)
        assert region.get_attribute("tabindex") == "0" and region.get_attribute("role") == "region"
        assert region.get_attribute("aria-label")
        assert region.locator("table > caption").text_content().strip()
    page.locator("#speed div.scroll").focus()
    assert page.evaluate("document.activeElement.closest('section').id") == "speed"
    # Plots describe their numbers to a screen reader.
    alts = page.evaluate("Array.from(document.images).map(i => i.alt)")
    assert all(any(ch.isdigit() for ch in alt) for alt in alts), alts
    # The suite as run is collapsed until asked for, and opens from the keyboard.
    details = page.locator("#suite details").first
    assert details.get_attribute("open") is None and page.locator("#suite pre").first.is_hidden()
    details.locator("summary").focus()
    page.keyboard.press("Enter")
    assert details.get_attribute("open") is not None and page.locator("#suite pre").first.is_visible()
    assert watched.errors == [] and watched.offsite() == []
    watched.context.close()


def _check_links(watched: Watched) -> None:
    """Every link on the current page leads to a file of the site."""
    for href in watched.page.evaluate("Array.from(document.links).map(a => a.href)"):
        assert href.startswith("file://"), href
        assert Path(href.split("#")[0].removeprefix("file://")).is_file(), href


def test_published_site_navigates(browser: Any, published_site: Path) -> None:
    watched = Watched(browser, viewport={"width": 1280, "height": 900})
    page = watched.page
    page.goto((published_site / "index.html").as_uri(), wait_until="load")
    assert page.title() == "dstbench runs"
    _check_links(watched)

    page.click("text=synthetic-20260101-120000")
    assert page.url.endswith("/runs/synthetic-20260101-120000/index.html")
    assert page.title() == "dstbench report: synthetic"
    assert page.evaluate("Array.from(document.images).every(i => i.naturalWidth > 0)")
    _check_links(watched)

    page.click("nav.site >> text=History")
    assert page.url.endswith("/history.html") and page.title() == "dstbench history"
    assert page.evaluate("Array.from(document.images).every(i => i.naturalWidth > 0)")
    _check_links(watched)
    page.click("th >> text=2026-01-05 12:00")
    assert page.url.endswith("/runs/synthetic-20260105-120000/index.html")

    page.click("nav.site >> text=All runs")
    assert page.url.endswith("/index.html") and page.title() == "dstbench runs"
    assert watched.errors == [] and watched.offsite() == []
    watched.context.close()
