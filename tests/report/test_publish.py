"""`dstbench publish`: a static site whose relative links all resolve."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from dstbench.cli import main
from dstbench.report.history import SiteRun
from tests.report.conftest import synthetic_lines, write_run
from tests.report.test_html import parse

RUNS = ["synthetic-20260105-120000", "synthetic-20260101-120000"]  # newest first


def links(page: Path) -> list[str]:
    return [attrs["href"] for tag, attrs in parse(page.read_text(encoding="utf-8")).tags if tag == "a"]


def test_site_layout(published_site: Path) -> None:
    assert (published_site / ".nojekyll").exists()
    for name in RUNS:
        folder = published_site / "runs" / name
        assert {p.name for p in folder.iterdir()} == {"index.html", "results.jsonl", "suite.yaml", "run.json"}


def test_every_link_is_relative_and_resolves(published_site: Path) -> None:
    pages = [published_site / "index.html", published_site / "history.html"]
    pages += [published_site / "runs" / name / "index.html" for name in RUNS]
    for page in pages:
        for href in links(page):
            parts = urlsplit(href)
            assert not parts.scheme and not parts.netloc and not href.startswith("/"), (page, href)
            if parts.path:
                assert (page.parent / parts.path).resolve().is_file(), (page, href)


def test_index_lists_runs_newest_first_with_headlines(published_site: Path) -> None:
    hrefs = [h for h in links(published_site / "index.html") if h.startswith("runs/")]
    assert hrefs == [f"runs/{name}/index.html" for name in RUNS]
    text = " ".join(" ".join(parse((published_site / "index.html").read_text()).text).split())
    assert "2.50× vs rigl (barter @ 0.1)" in text and "84.6% (barter @ 0.1, state + activation bytes)" in text
    assert "NVIDIA L40S (cuda)" in text and "0123456789ab" in text and "5 / 7" in text


def test_history_follows_time_order(published_site: Path) -> None:
    page = parse((published_site / "history.html").read_text(encoding="utf-8"))
    heads = [attrs["href"] for tag, attrs in page.tags if tag == "a" and attrs["href"].startswith("runs/")]
    assert heads == [f"runs/{name}/index.html" for name in reversed(RUNS)]  # oldest first
    text = " ".join(" ".join(page.text).split())
    # barter@0.1: 48 ms in the older run (scaled by 1.2), 40 ms in the newer; failures show their status.
    assert "barter @ 0.1 48.0 ms · 2.50× 40.0 ms · 2.50×" in text
    assert "set @ 0.1 oom oom" in text
    assert any(tag == "img" for tag, _ in page.tags)


@pytest.mark.slow
def test_publishing_again_keeps_earlier_runs(published_site: Path, tmp_path: Path) -> None:
    import shutil

    site = tmp_path / "site"
    shutil.copytree(published_site, site)
    third = write_run(tmp_path / "runs", "synthetic-20260109-120000", synthetic_lines(scale=0.9), created="2026-01-09T12:00:00+00:00")
    assert main(["publish", str(third), "--site", str(site)]) == 0
    hrefs = [h for h in links(site / "index.html") if h.startswith("runs/")]
    assert hrefs == [f"runs/{name}/index.html" for name in ["synthetic-20260109-120000", *RUNS]]


def test_site_run_time_label() -> None:
    import pandas as pd

    run = SiteRun("x", {}, "2026-01-05T12:00:00+00:00", pd.DataFrame(), {}, [])
    assert run.when == "2026-01-05 12:00" and SiteRun("x", {}, "", pd.DataFrame(), {}, []).when == "x"


def test_files_named_by_results_are_copied_and_nothing_outside(tmp_path: Path) -> None:
    lines = synthetic_lines()
    lines[1].profile = {"trace": "profile/rigl.json.gz", "memory_snapshot": "../secret.pickle"}
    run = write_run(tmp_path / "runs", "profiled", lines)
    (run / "profile").mkdir()
    (run / "profile" / "rigl.json.gz").write_bytes(b"trace")
    (tmp_path / "runs" / "secret.pickle").write_bytes(b"no")
    from dstbench.report.publish import _copy_run

    _copy_run(run, tmp_path / "site" / "profiled")
    assert (tmp_path / "site" / "profiled" / "profile" / "rigl.json.gz").read_bytes() == b"trace"
    assert not (tmp_path / "site" / "secret.pickle").exists()


def test_a_run_without_a_readable_line_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "torn"
    run.mkdir()
    (run / "results.jsonl").write_text('{"case_id": "rigl@0.1", "sta')  # a torn first line
    with pytest.warns(UserWarning, match="unreadable"):
        assert main(["publish", str(run), "--site", str(tmp_path / "site")]) == 2
    assert not (tmp_path / "site").exists()


def test_history_colours_each_method_and_marks_each_density(tmp_path: Path) -> None:
    """Eleven (method, density) series, as in the smoke suite: a colour per method (none shared),
    a marker per density, and the masked methods' identical memory on one annotated line."""
    from matplotlib.colors import to_hex

    from dstbench.report.history import _figure, _long
    from dstbench.report.publish import load_site_run
    from tests.report.conftest import MIB, ok_line

    def lines(scale: float) -> list:
        out = [ok_line("h", "dense", "dense", 1.0, [200.0 * scale] * 5, 10, 40 * MIB, 60 * MIB, 0.0)]
        for density in (0.5, 0.1):
            for i, method in enumerate(("set", "rigl", "mest", "chase")):
                out.append(ok_line("h", method, "masked", density, [(100.0 + i) * scale] * 5, 10, 48 * MIB, 60 * MIB, 1.0))
            out.append(ok_line("h", "barter", "compact", density, [40.0 * scale] * 5, 2, int(density * 40 * MIB), 12 * MIB, 1.0))
        return out

    runs = [load_site_run(write_run(tmp_path, f"h-2026010{i}-000000", lines(1 + i / 10), created=f"2026-01-0{i}T00:00:00+00:00"))
            for i in (1, 2)]
    long = _long(runs)
    assert long["series"].nunique() == 11
    plot = _figure(long, runs)
    memory = plot.figure.axes[2]
    colors = {to_hex(line.get_color()) for ax in plot.figure.axes for line in ax.get_lines()}
    assert len(colors) == 6  # one per method
    legend = {t.get_text(): h for h, t in zip(plot.figure.legends[0].legend_handles, plot.figure.legends[0].get_texts())}
    assert len({to_hex(legend[m].get_color()) for m in ("dense", "set", "rigl", "mest", "chase", "barter")}) == 6
    assert legend["density 0.5"].get_marker() != legend["density 0.1"].get_marker()
    notes = [t.get_text() for t in memory.texts]
    # Their memory is the same at both densities, in both runs: one line, named once.
    assert notes == ["set = rigl = mest = chase @ 0.5, 0.1"]
    assert "memory (MiB), set = rigl = mest = chase @ 0.5, 0.1: 108.0 MiB, 108.0 MiB" in plot.alt
