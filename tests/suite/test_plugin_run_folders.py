"""A run whose method comes from a plugin module beside its suite: the default launcher's case
processes find the plugin, and once the plugin is gone every command that reads run folders
(`check`, `report`, `compare`, `export`, `publish`) still reads the run; only `run` needs it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from dstbench.cli import main
from dstbench.dst.registry import registered
from dstbench.results.record import iter_results
from tests.conftest import micro_suite

PLUGIN = "beside_methods_e2e"
METHOD = "beside_set"
PLUGIN_SOURCE = f'''
from dstbench.dst.registry import register_method
from dstbench.dst.masked.masked_method import MaskedMethod
from dstbench.dst.masked.scorers import Magnitude, RandomGrow


@register_method("{METHOD}", kind="masked")
class BesideSET(MaskedMethod):
    """SET, registered by a module that sits beside its suite file."""

    prune = Magnitude()
    grow = RandomGrow()
'''


@pytest.fixture(scope="module")
def unplugged_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the suite through the default (subprocess) launcher, then uninstall the plugin: its
    module, its registration and its file are gone."""
    root = tmp_path_factory.mktemp("plugin_run")
    folder = root / "suites"
    folder.mkdir()
    (folder / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    suite = micro_suite(
        plugins=[PLUGIN], methods=["dense", {"name": METHOD, "params": {"delta_t": 2}}], densities=[0.5],
        launcher={"name": "subprocess"}, timing={"warmup_steps": 2, "segment_steps": 3, "segments": 2, "processes": 1},
        expect=[{"metric": "density_achieved", "method": METHOD, "tolerance": 0.01}],
    )
    (folder / "suite.yaml").write_text(yaml.safe_dump(suite))
    assert str(folder) not in sys.path
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)  # a relative suite path, as typed: the case processes must still find the plugin
        assert main(["run", "suites/suite.yaml", "--out", str(root / "runs")]) == 0
    assert str(folder) not in sys.path
    [run_dir] = [p for p in (root / "runs").iterdir() if p.is_dir()]
    sys.modules.pop(PLUGIN)
    registered().pop(METHOD)
    (folder / f"{PLUGIN}.py").unlink()
    return run_dir


def test_the_case_processes_found_the_plugin_beside_the_suite(unplugged_run: Path) -> None:
    lines = {line["case_id"]: line for line in iter_results(unplugged_run)}
    assert {case: line["status"] for case, line in lines.items()} == {"dense@1": "ok", f"{METHOD}@0.5": "ok"}
    assert lines[f"{METHOD}@0.5"]["method_name"] == METHOD and lines[f"{METHOD}@0.5"]["kind"] == "masked"


def test_check_reads_the_run_without_its_plugin(unplugged_run: Path, capsys: pytest.CaptureFixture) -> None:
    assert METHOD not in registered()
    assert main(["check", str(unplugged_run)]) == 0
    err = capsys.readouterr().err
    assert f"PASS  density_achieved {METHOD}@0.5" in err and "unknown method" not in err
    assert PLUGIN not in sys.modules


def test_report_compare_export_and_publish_read_it(unplugged_run: Path, tmp_path: Path) -> None:
    markdown = tmp_path / "report.md"
    assert main(["report", str(unplugged_run), "--markdown", str(markdown)]) == 0
    assert f"{METHOD}" in markdown.read_text()
    assert main(["compare", str(unplugged_run), str(unplugged_run)]) == 0
    pytest.importorskip("pytest_benchmark")
    exported = tmp_path / "bench.json"
    assert main(["export", str(unplugged_run), "--pytest-benchmark", str(exported)]) == 0
    assert {b["name"] for b in json.loads(exported.read_text())["benchmarks"]} == {"micro[dense@1]", f"micro[{METHOD}@0.5]"}
    site = tmp_path / "site"
    assert main(["publish", str(unplugged_run), "--site", str(site)]) == 0
    assert METHOD in (site / "runs" / unplugged_run.name / "index.html").read_text()


def test_only_run_needs_the_plugin(unplugged_run: Path, capsys: pytest.CaptureFixture) -> None:
    suite = unplugged_run.parent.parent / "suites" / "suite.yaml"
    assert main(["run", str(suite), "--resume", str(unplugged_run)]) == 2
    assert f"plugins: cannot import: {PLUGIN}: No module named '{PLUGIN}'" in capsys.readouterr().err
    # The run folder's own suite.yaml given to `run` is a suite to run, not a record.
    assert main(["run", str(unplugged_run / "suite.yaml"), "--out", str(unplugged_run.parent)]) == 2
    assert f"cannot import: {PLUGIN}" in capsys.readouterr().err
