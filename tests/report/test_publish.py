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
