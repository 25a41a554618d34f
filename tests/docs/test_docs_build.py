"""The manual builds with `mkdocs build --strict` (a broken link or anchor, a missing page, an API
object mkdocstrings cannot find or a reference marker that fails is an error), every page is in
the navigation, and the README's links lead to files that exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def _mkdocs_config() -> dict[str, Any]:
    # mkdocs.yml holds no YAML tags, so a plain reader sees what mkdocs sees.
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return config


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    monkeypatch.setenv("NO_MKDOCS_2_WARNING", "1")  # mkdocs-material's notice about its successor
    monkeypatch.chdir(ROOT)
    site = tmp_path / "site"
    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(site))
    build(config)  # raises mkdocs' Abort on the first warning, under strict
    suite_keys = (site / "reference" / "suite" / "index.html").read_text(encoding="utf-8")
    assert "timing.segments" in suite_keys and "launcher.array_parallelism" in suite_keys
    commands = (site / "reference" / "commands" / "index.html").read_text(encoding="utf-8")
    assert "--time-threshold" in commands and "--retry-failed" in commands
    assert "reference:" not in commands  # every marker was replaced
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "run_suite" in api and "load_run" in api and "MaskedMethod" in api
    assert (site / "results" / "cpu_smoke.html").is_file()
    assert not (site / "hooks.py").exists()


def test_every_page_is_in_the_navigation() -> None:
    listed = set(_nav_pages(_mkdocs_config()["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert sorted(pages - listed) == [], "add these pages to nav in mkdocs.yml"
    assert sorted(listed - pages) == [], "nav names pages that do not exist"


def test_readme_links_lead_to_files() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", readme) if "://" not in t]
    assert targets
    missing = [t for t in targets if not (ROOT / t.split("#")[0]).exists()]
    assert missing == []


def test_readme_stays_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220, "the README is the front page: move the detail into docs/"
