"""Report sections from installed packages: the entry-point group `dstbench.report_sections`."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path
from typing import Iterator

import pytest

from dstbench.report import sections
from dstbench.report.html import build_page
from dstbench.results.derive import derive, load_frame

GOOD = '''
from dstbench.report.sections import Table, register_table

# Imported after the built-in sections: they are registered by now.
BUILT_IN_FIRST = "environment" in __import__("dstbench.report.sections", fromlist=["_SECTIONS"])._SECTIONS


@register_table("plugin_cases", "Cases, from a plugin", order=600)
def plugin_cases(derived):
    return Table(["case"], [[str(case)] for case in derived["case_id"]])
'''
BROKEN = '''
from dstbench.report.sections import Table, register_table


@register_table("half_registered", "Registered before the error")
def half(derived):
    return Table(["x"], [["1"]])


raise RuntimeError("the plugin is broken")
'''
CLASHING = '''
from dstbench.report.sections import Table, register_table


@register_table("environment", "A plugin's environment")
def environment(derived):
    return Table(["x"], [["replaced"]])


@register_table("clash_neighbour", "Added beside the clash", order=601)
def neighbour(derived):
    return Table(["x"], [["added"]])
'''


@pytest.fixture
def plugin_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, importlib.metadata.EntryPoint]]:
    """Section modules on the path and entry points naming them; the registry, the modules and
    the once-per-process flag are restored afterwards."""
    for name, source in (("sections_good", GOOD), ("sections_broken", BROKEN), ("sections_clashing", CLASHING)):
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    sections.load_section_modules()  # the built-ins and whatever is installed, before the snapshot
    before = dict(sections._SECTIONS)
    points = {
        name: importlib.metadata.EntryPoint(name=name, value=value, group=sections.ENTRY_POINT_GROUP)
        for name, value in (
            ("good", "sections_good"), ("broken", "sections_broken"), ("clashing", "sections_clashing"),
            ("missing", "sections_not_installed"),
        )
    }
    yield points
    sections._SECTIONS.clear()
    sections._SECTIONS.update(before)
    for name in ("sections_good", "sections_broken", "sections_clashing"):
        sys.modules.pop(name, None)


@pytest.mark.slow
def test_entry_points_load_after_the_built_in_sections(
    plugin_modules: dict[str, importlib.metadata.EntryPoint], monkeypatch: pytest.MonkeyPatch, synthetic_run: Path
) -> None:
    monkeypatch.setattr(sections, "_plugins_loaded", False)
    monkeypatch.setattr(sections, "_entry_points", lambda: [plugin_modules["good"]])
    keys = [s.key for s in sections.sections()]
    assert "plugin_cases" in keys and sys.modules["sections_good"].BUILT_IN_FIRST
    page = build_page(derive(load_frame([synthetic_run]), "rigl"), [synthetic_run])
    rendered = {s.key: s for s in page.sections}
    assert rendered["plugin_cases"].table.rows == [[case] for case in load_frame([synthetic_run])["case_id"]]
    # Once per process: a second report does not look the group up again.
    monkeypatch.setattr(sections, "_entry_points", lambda: pytest.fail("entry points read twice"))
    sections.sections()


@pytest.mark.slow
def test_a_broken_plugin_warns_by_name_and_leaves_nothing_behind(
    plugin_modules: dict[str, importlib.metadata.EntryPoint], monkeypatch: pytest.MonkeyPatch, synthetic_run: Path
) -> None:
    monkeypatch.setattr(sections, "_plugins_loaded", False)
    monkeypatch.setattr(
        sections, "_entry_points", lambda: [plugin_modules["broken"], plugin_modules["missing"], plugin_modules["good"]]
    )
    with pytest.warns(UserWarning) as caught:
        keys = [s.key for s in sections.sections()]
    messages = [str(w.message) for w in caught]
    assert any("'broken' (sections_broken)" in m and "RuntimeError: the plugin is broken" in m for m in messages)
    assert any("'missing' (sections_not_installed)" in m and "ModuleNotFoundError" in m for m in messages)
    assert "half_registered" not in keys  # what it registered before failing is taken back
    assert "plugin_cases" in keys  # the plugins after it still load
    page = build_page(derive(load_frame([synthetic_run]), "rigl"), [synthetic_run])
    assert "plugin_cases" in {s.key for s in page.sections} and "environment" in {s.key for s in page.sections}


def test_a_plugin_cannot_replace_a_section(plugin_modules: dict[str, importlib.metadata.EntryPoint]) -> None:
    built_in = sections._SECTIONS["environment"]
    with pytest.warns(UserWarning, match="'clashing' .* keys already taken, kept as they were: environment"):
        assert sections.load_section_plugin(plugin_modules["clashing"])
    assert sections._SECTIONS["environment"] is built_in
    assert "clash_neighbour" in sections._SECTIONS
