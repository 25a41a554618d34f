"""The command line as a new user meets it: --version, help with defaults, `list`, `run --dry-run`
and `run --set`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from dstbench import __version__
from dstbench.cli import build_parser, main
from tests.conftest import micro_suite


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"dstbench {__version__}"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_option_has_help_and_shows_its_default() -> None:
    parser = build_parser()
    assert "what does it cost in accuracy?" in parser.description  # whole, not cut mid-sentence
    for name, sub in _subparsers(parser).items():
        text = sub.format_help()
        assert "exit codes:" in text, name
        for action in sub._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            assert action.help, (name, action.dest)
            shown = action.default not in (None, False) and action.option_strings
            if shown:
                assert f"(default: {action.default})" in " ".join(text.split()), (name, action.dest)
    assert "(default: 10.0)" in _subparsers(parser)["compare"].format_help()


def test_list_shows_parameters_and_untruncated_descriptions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "rigl (masked)" in out and "delta_t=100" in out and "drop_fraction=0.3" in out
    assert "removed gradually by their unit mean magnitude." in out  # chase's second docstring line
    assert main(["list", "barter"]) == 0
    out = capsys.readouterr().out
    assert "barter (compact, dstbench.methods.barter." in out
    assert "clone_noise" in out and "relative, zero-sum noise" in out
    assert main(["list", "nosuch"]) == 2
    assert "unknown method 'nosuch'" in capsys.readouterr().err


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(micro_suite(methods=["dense", "rigl"], densities=[0.1, 0.5])))
    return path


def test_dry_run_lists_the_cases_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    assert main(["run", str(_suite(tmp_path)), "--out", str(out), "--dry-run", "--density", "0.1", "--set", "timing.segments=4"]) == 0
    text = capsys.readouterr().out
    assert "2 warmup steps + 4 timed segments of 3 steps" in text and "with --set timing.segments=4" in text
    assert "dense@1" in text and "rigl@0.1" in text and "rigl@0.5" not in text
    assert "2 of 2 selected cases would run into a new run folder; 1 more in the suite, not selected" in text
    assert not out.exists()
    # An invalid suite (here through --set) stops with exit 2, as a real run would.
    assert main(["run", str(_suite(tmp_path)), "--out", str(out), "--dry-run", "--set", "batch_size=0"]) == 2
    assert "batch_size: Input should be greater than 0 (from --set batch_size=0)" in capsys.readouterr().err
    assert main(["run", str(_suite(tmp_path)), "--dry-run", "--set", "batch_size"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err
    assert not out.exists()


def test_set_overrides_are_applied_and_recorded(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    argv = ["run", str(_suite(tmp_path)), "--out", str(out), "--only", "dense", "--set", "timing.segments=2", "--set", "model.depth=1"]
    assert main(argv) == 0
    [run_dir] = list(out.iterdir())
    [line] = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(line["segment_ms"]) == 2
    assert line["schema_version"] >= 1 and line["run_id"] == run_dir.name
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["overrides"] == {"timing.segments": 2, "model.depth": 1} and meta["run_id"] == run_dir.name
    assert meta["selected"] == ["dense@1"] and [c["case_id"] for c in meta["cases"]] == ["dense@1", "rigl@0.5", "rigl@0.1"]
    stored = (run_dir / "suite.yaml").read_text()
    assert stored.splitlines()[0].endswith("with --set timing.segments=2 model.depth=1 as validated by dstbench, every default filled in")
    assert yaml.safe_load(stored)["model"]["depth"] == 1
