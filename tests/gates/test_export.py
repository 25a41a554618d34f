"""`dstbench export --pytest-benchmark`: a file that pytest-benchmark's own CLI reads."""

from __future__ import annotations

import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from dstbench.cli import main
from tests.gates.synthetic import BASE_MS, line, scaled, write_run


def _pytest_benchmark_cli() -> list[str]:
    # The console script when it is on PATH, else the same entry point through the interpreter.
    script = shutil.which("pytest-benchmark")
    return [script] if script else [sys.executable, "-c", "from pytest_benchmark.cli import main; main()"]


def _export(run: Path, out: Path) -> int:
    return main(["export", str(run), "--pytest-benchmark", str(out)])


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, dict]:
    run = write_run(
        tmp_path / "run",
        [line("dense", 1.0), line("rigl", 0.1, segment_ms=scaled(BASE_MS, 0.9)), line("barter", 0.1, status="oom")],
    )
    out = tmp_path / "bench" / "run.json"
    assert _export(run, out) == 0
    return out, json.loads(out.read_text())


def test_one_benchmark_per_ok_case_with_per_step_stats(exported: tuple[Path, dict]) -> None:
    _, doc = exported
    assert set(doc) == {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    names = [b["name"] for b in doc["benchmarks"]]
    assert names == ["micro[dense@1]", "micro[rigl@0.1]"]  # the oom case has no samples
    rigl = doc["benchmarks"][1]
    stats = rigl["stats"]
    per_step = [ms / 1e3 / 4 for ms in scaled(BASE_MS, 0.9)]  # 4 steps per segment
    assert stats["data"] == pytest.approx(per_step)
    assert stats["rounds"] == len(BASE_MS) and stats["iterations"] == 4
    assert stats["median"] == pytest.approx(statistics.median(per_step))
    assert stats["min"] == pytest.approx(min(per_step)) and stats["max"] == pytest.approx(max(per_step))
    assert stats["ops"] == pytest.approx(1 / statistics.mean(per_step))
    assert rigl["extra_info"]["state_bytes"] == 1_000_000 and "segment_ms" not in rigl["extra_info"]
    assert rigl["params"] == {"method": "rigl", "density": 0.1} and rigl["group"] == "micro"
    assert doc["commit_info"]["id"] == "abc123"


def test_pytest_benchmark_compare_reads_exported_files(exported: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = exported
    slower = write_run(tmp_path / "slower", [line("rigl", 0.1, segment_ms=scaled(BASE_MS, 1.3))])
    second = tmp_path / "bench" / "slower.json"
    assert _export(slower, second) == 0
    proc = subprocess.run(
        [*_pytest_benchmark_cli(), "compare", str(out), str(second), "--columns=min,median,rounds,iterations"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Failed to load" not in proc.stdout + proc.stderr
    rows = [row.split() for row in proc.stdout.splitlines() if row.startswith("micro[")]
    # Each benchmark is named after its case and, in parentheses, the file it came from.
    assert sorted((r[0], r[1].rsplit("/", 1)[-1]) for r in rows) == [
        ("micro[dense@1]", "run)"), ("micro[rigl@0.1]", "run)"), ("micro[rigl@0.1]", "slower)")
    ]
    assert all(r[-2:] == ["10", "4"] for r in rows)  # rounds = segments, iterations = segment steps


@pytest.mark.skipif(importlib.util.find_spec("pygal") is None, reason="pytest-benchmark histograms need pygal")
def test_pytest_benchmark_histogram_of_an_exported_file(exported: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = exported
    proc = subprocess.run(
        [*_pytest_benchmark_cli(), "compare", str(out), f"--histogram={tmp_path / 'hist'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "hist-micro.svg").stat().st_size > 0


def test_export_of_unusable_run_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _export(tmp_path / "missing", tmp_path / "x.json") == 2
    failed = write_run(tmp_path / "failed", [line("rigl", 0.1, status="crash")])
    assert _export(failed, tmp_path / "y.json") == 2
    assert "no ok case" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "y.json").exists()
