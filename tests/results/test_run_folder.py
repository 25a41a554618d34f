"""`RunFolder`: a run folder read once per command: its lines loaded and derived once per reference,
shared while its files are unchanged, a new reader once they change; `dstbench report` and the end
of `dstbench run --html` derive a run once (on synthetic run folders)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import dstbench.results.derive as derive_module
import dstbench.results.expectations as expectations_module
import dstbench.results.run_folder as run_folder_module
from dstbench.cli.check import print_run_summary
from dstbench.cli.report import main as report_main, report_runs
from dstbench.results.run_folder import RunFolder, choose_reference, derived_frame
from tests.conftest import micro_suite
from tests.gates.synthetic import line, scaled, BASE_MS, write_run

EXPECT = [
    {"metric": "speedup", "method": "rigl", "vs": "dense", "min": 0.5},  # derived against dense, the reference
    {"metric": "speedup", "method": "rigl", "vs": "set", "min": 0.5},  # against another reference
]


def a_run(tmp_path: Path, expect: list[dict[str, Any]] | None = None) -> Path:
    suite = micro_suite(methods=["dense", "rigl", "set"], densities=[0.5], reference="dense", expect=expect or [])
    lines = [line("dense", 1.0), line("rigl", 0.5, kind="compact", segment_ms=scaled(BASE_MS, 0.8)), line("set", 0.5)]
    return write_run(tmp_path / "run", lines, suite)


@pytest.fixture
def derives(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The reference of every `derive` call, wherever a reader calls it from."""
    calls: list[str] = []
    real = derive_module.derive

    def counting(frame: Any, reference: str, *args: Any) -> Any:
        calls.append(reference)
        return real(frame, reference, *args)

    for module in (run_folder_module, expectations_module):
        monkeypatch.setattr(module, "derive", counting)
    return calls


def test_a_folder_is_read_and_derived_once_per_reference(tmp_path: Path, derives: list[str]) -> None:
    run = a_run(tmp_path)
    folder = RunFolder.open(run)
    assert RunFolder.open(run) is folder and RunFolder.open(str(run)) is folder
    assert folder.meta["suite"] == "micro" and folder.suite_data()["name"] == "micro" and folder.reference == "dense"
    assert [x["method"] for x in folder.lines()] == ["dense", "rigl", "set"]
    first = folder.frame()
    assert folder.frame() is first and folder.frame("dense") is first and folder.derived("dense") is first
    assert derives == ["dense"]
    folder.frame("rigl")
    assert derives == ["dense", "rigl"]
    with pytest.raises(ValueError, match="not among the methods"):
        folder.frame("gmp")
    # A folder whose lines changed gets a new reader, which reads them anew.
    with (run / "results.jsonl").open("a") as handle:
        handle.write(json.dumps(line("set", 0.5, segment_ms=scaled(BASE_MS, 0.9))) + "\n")
    fresh = RunFolder.open(run)
    with pytest.warns(UserWarning, match="more than once"):  # the case's later line counts
        assert fresh is not folder and fresh.lines()[-1]["segment_ms"] != folder.lines()[-1]["segment_ms"]


def test_choose_reference_says_why_it_falls_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = a_run(tmp_path)
    loaded = RunFolder(run).loaded()
    assert choose_reference(loaded, [run], None) == ("dense", "")
    assert choose_reference(loaded, [run], "rigl") == ("rigl", "")
    assert choose_reference(loaded, [run], "gmp")[0] is None
    (run / "suite.yaml").write_text("{not: [yaml")
    assert choose_reference(loaded, [run], None) == ("dense", "")
    assert "no reference could be read" in capsys.readouterr().err


def test_the_end_of_a_run_with_reports_derives_the_run_once(tmp_path: Path, derives: list[str]) -> None:
    # `dstbench run --html --markdown`: its summary and expectations, then both reports, from one reader.
    run = a_run(tmp_path, EXPECT)
    folder = RunFolder.open(run)
    console = Console(record=True, width=200)
    code = print_run_summary(folder, console)
    assert code == 0, console.export_text()
    assert report_runs([RunFolder.open(run)], str(tmp_path / "r.html"), str(tmp_path / "r.md")) == 0
    assert sorted(derives) == ["dense", "set"]  # the run's reference once, the other expectation's once
    assert (tmp_path / "r.html").is_file() and "PASS" in (tmp_path / "r.md").read_text()


def test_report_derives_each_run_once(tmp_path: Path, derives: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    run = a_run(tmp_path)
    assert report_main(argparse.Namespace(run_dirs=[str(run)], html=None, markdown=None, reference=None)) == 0
    assert derives == ["dense"] and "rigl" in capsys.readouterr().out
    # Several runs side by side: their lines derived together, once.
    other = write_run(tmp_path / "other", [line("dense", 1.0), line("rigl", 0.5)])
    derives.clear()
    both = derived_frame([RunFolder.open(run), RunFolder.open(other)])
    assert derives == ["dense"] and set(both["run"]) == {str(run), str(other)}


def test_run_json_changes_through_update_meta_and_a_damaged_one_is_never_rewritten(tmp_path: Path) -> None:
    from dstbench.results.run_files import RunDirError

    run = a_run(tmp_path)
    folder = RunFolder(run)
    written = folder.update_meta(lambda meta: meta.update(note="added"))
    assert json.loads((run / "run.json").read_text())["note"] == "added" == folder.meta["note"] == written["note"]
    assert written["suite"] == "micro"  # the rest kept
    (run / "run.json").write_text("{damaged")
    with pytest.raises(RunDirError, match="unreadable"):
        folder.update_meta(lambda meta: meta.update(note="again"))
    assert (run / "run.json").read_text() == "{damaged"


def test_the_target_comes_validated_from_the_folder(tmp_path: Path) -> None:
    suite = micro_suite(methods=["dense"], densities=[0.5], reference="dense", accuracy={"target_top1": 0.42})
    run = write_run(tmp_path / "run", [line("dense", 1.0)], suite)
    assert RunFolder(run).target_top1() == 0.42
    suite["accuracy"]["target_top1"] = 4.2  # not a top-1: refused as the schema refuses it
    assert RunFolder(write_run(tmp_path / "bad", [line("dense", 1.0)], suite)).target_top1() is None
