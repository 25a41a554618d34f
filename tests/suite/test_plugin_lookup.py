"""Where a suite's `plugins:` are found: on `sys.path` first, then beside the suite file, and
never beside a run folder's recorded suite."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from dstbench.suite.loading import SuiteError, load_suite, parse_suite, recorded_kinds, suite_folders
from tests.conftest import micro_suite


@pytest.fixture(autouse=True)
def _forget_new_modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The modules a test imports from its tmp folders are dropped afterwards (names are reused), and
    so are the methods they register."""
    import dstbench.methods as catalog
    from dstbench.dst import registry

    catalog.list_methods()  # the built-in methods registered before the copy
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("lookup_"):
            del sys.modules[name]


def write_suite(folder: Path, **overrides: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(micro_suite(**overrides)))
    return path


def test_a_plugin_beside_the_suite_is_imported_and_the_folder_leaves_sys_path(tmp_path: Path) -> None:
    folder = tmp_path / "suites"
    suite = write_suite(folder, plugins=["lookup_beside"])
    (folder / "lookup_beside.py").write_text("import lookup_helper\nWHERE = lookup_helper.WHERE\n")
    (folder / "lookup_helper.py").write_text("WHERE = 'beside'\n")  # a sibling, imported at import time
    path_before = list(sys.path)
    load_suite(suite)
    assert sys.modules["lookup_beside"].WHERE == "beside"
    assert sys.path == path_before  # nothing beside the suite answers later, unrelated imports


def test_sys_path_comes_before_the_suite_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installed = tmp_path / "installed"
    installed.mkdir()
    (installed / "lookup_twice.py").write_text("WHERE = 'sys.path'\n")
    monkeypatch.syspath_prepend(str(installed))
    folder = tmp_path / "suites"
    suite = write_suite(folder, plugins=["lookup_twice"])
    (folder / "lookup_twice.py").write_text("WHERE = 'beside'\n")
    load_suite(suite)
    assert sys.modules["lookup_twice"].WHERE == "sys.path"


def test_a_package_beside_the_suite_and_its_submodule(tmp_path: Path) -> None:
    folder = tmp_path / "suites"
    suite = write_suite(folder, plugins=["lookup_pkg.methods"])
    (folder / "lookup_pkg").mkdir(parents=True)
    (folder / "lookup_pkg" / "__init__.py").write_text("")
    (folder / "lookup_pkg" / "methods.py").write_text("WHERE = 'package'\n")
    load_suite(suite)
    assert sys.modules["lookup_pkg.methods"].WHERE == "package"


def test_a_missing_plugin_names_where_it_was_looked_for(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "suites", plugins=["lookup_nowhere"])
    with pytest.raises(SuiteError) as caught:
        load_suite(suite)
    message = str(caught.value)
    assert "plugins: cannot import: lookup_nowhere: No module named 'lookup_nowhere'" in message
    assert f"looked on sys.path and in {tmp_path / 'suites'}" in message


def test_a_missing_dependency_of_a_plugin_is_not_blamed_on_the_lookup(tmp_path: Path) -> None:
    folder = tmp_path / "suites"
    suite = write_suite(folder, plugins=["lookup_needs"])
    (folder / "lookup_needs.py").write_text("import lookup_not_installed\n")
    with pytest.raises(SuiteError) as caught:
        load_suite(suite)
    message = str(caught.value)
    assert "lookup_needs: No module named 'lookup_not_installed'" in message and "looked on" not in message


def test_a_case_process_finds_the_plugin_from_the_absolute_suite_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a case process does: the validated suite and the suite's path, from another folder."""
    folder = tmp_path / "suites"
    suite = write_suite(folder, plugins=["lookup_case"])
    (folder / "lookup_case.py").write_text("WHERE = 'case'\n")
    data = yaml.safe_load(suite.read_text())
    monkeypatch.chdir(tmp_path)
    assert suite_folders("suites/suite.yaml") == [str(folder)]
    monkeypatch.chdir(folder.parent.parent)
    parse_suite(data, str(suite.absolute()))
    assert sys.modules["lookup_case"].WHERE == "case"
    assert suite_folders("<suite>") == [] and suite_folders(tmp_path / "missing.yaml") == []


def write_run_folder(folder: Path, suite: dict, cases: list[dict] | None = None, lines: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "suite.yaml").write_text(yaml.safe_dump(suite))
    (folder / "run.json").write_text(json.dumps({"suite": suite["name"], **({"cases": cases} if cases else {})}))
    if lines is not None:
        (folder / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"torn": ')
    return folder


def test_a_recorded_suite_never_imports_code_beside_it(tmp_path: Path) -> None:
    """A run folder copied from elsewhere must not run a module it carries."""
    run = write_run_folder(tmp_path / "run", micro_suite(plugins=["lookup_carried"]))
    (run / "lookup_carried.py").write_text("raise SystemExit('imported a module carried by a run folder')\n")
    suite = load_suite(run / "suite.yaml")
    assert suite.plugins == ["lookup_carried"] and "lookup_carried" not in sys.modules
    # The same file given to `run` is a suite about to run: its plugins are required.
    with pytest.raises(SuiteError, match="lookup_carried raised SystemExit"):
        load_suite(run / "suite.yaml", recorded=False)


def test_a_recorded_suite_takes_unknown_methods_as_they_ran(tmp_path: Path) -> None:
    suite = micro_suite(
        plugins=["lookup_uninstalled"], densities=[0.5, 0.1],
        methods=["dense", {"name": "gone_sparse", "params": {"anything": 1}, "densities": [0.1]}, {"name": "gone_dense", "label": "wide"}],
        expect=[{"metric": "speedup", "method": "gone_sparse", "density": 0.1, "min": 1.0}],
    )
    cases = [
        {"case_id": "dense@1", "method": "dense", "kind": "dense", "density": 1.0},
        {"case_id": "gone_sparse@0.1", "method": "gone_sparse", "kind": "masked", "density": 0.1},
        {"case_id": "wide@1", "method": "wide", "kind": "dense", "density": 1.0},
    ]
    run = write_run_folder(tmp_path / "run", suite, cases)
    loaded = load_suite(run / "suite.yaml")
    sparse, wide = loaded.methods[1], loaded.methods[2]
    assert loaded.method_kind(sparse) == "masked" and loaded.method_densities(sparse) == [0.1]
    assert loaded.method_kind(wide) == "dense" and loaded.method_densities(wide) == [1.0]
    # The same suite about to run: its plugin, and without it its methods, are required.
    with pytest.raises(SuiteError, match="plugins: cannot import: lookup_uninstalled"):
        parse_suite(suite)
    with pytest.raises(SuiteError, match="unknown method 'gone_sparse'"):
        parse_suite({**suite, "plugins": []})


def test_recorded_kinds_come_from_run_json_else_the_result_lines(tmp_path: Path) -> None:
    cases = [{"case_id": "a@1", "method": "a", "kind": "dense", "density": 1.0}]
    assert recorded_kinds(write_run_folder(tmp_path / "meta", micro_suite(), cases)) == {"a": "dense"}
    lines = [{"method": "b", "kind": "compact"}, {"method": "c", "kind": "masked"}, ["not", "a", "line"]]
    assert recorded_kinds(write_run_folder(tmp_path / "lines", micro_suite(), None, lines)) == {"b": "compact", "c": "masked"}
    assert recorded_kinds(tmp_path / "nothing") == {}


BROKEN_PLUGIN = '''"""A method whose Params lack the schedule's fields its base reads."""
import dataclasses

from dstbench.dst.masked.masked_method import MaskLayoutParams, MaskedMethod
from dstbench.dst.registry import register_method


@register_method("lookup_const", kind="masked")
class Const(MaskedMethod):
    """Masks that never change."""

    @dataclasses.dataclass
    class Params(MaskLayoutParams):
        pass
'''

GOOD_PLUGIN = '''from dstbench.dst.masked.masked_method import MaskedMethod
from dstbench.dst.registry import register_method


@register_method("lookup_listed", kind="masked")
class Listed(MaskedMethod):
    """A plugin method that a suite names."""
'''


def test_a_broken_plugin_fails_at_dry_run_naming_its_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dstbench.cli import main

    folder = tmp_path / "suites"
    suite = write_suite(folder, plugins=["lookup_broken"], methods=["dense", "lookup_const"])
    (folder / "lookup_broken.py").write_text(BROKEN_PLUGIN)
    assert main(["run", str(suite), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "methods.1: lookup_const: lookup_broken.Const" in err and str(folder / "lookup_broken.py") in err
    assert "AttributeError" in err and "delta_t" in err


def test_list_sees_a_suites_plugin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dstbench.cli import main

    folder = tmp_path / "suites"
    suite = write_suite(folder, plugins=["lookup_good"], methods=["lookup_listed"])
    (folder / "lookup_good.py").write_text(GOOD_PLUGIN)
    assert main(["list", "lookup_listed"]) == 2
    assert "--suite SUITE" in capsys.readouterr().err
    assert main(["list", "--suite", str(suite), "lookup_listed"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("lookup_listed (masked, lookup_good.Listed)") and "A plugin method that a suite names." in out
    assert main(["list", "--suite", str(suite)]) == 0 and "lookup_listed (masked)" in capsys.readouterr().out
