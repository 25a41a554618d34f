"""scripts/gpu_check.sh, run as CI can: its --cpu dry run (the same steps on a micro model), so the
GPU check cannot rot between the GPU hosts it is meant for."""

from __future__ import annotations

import re

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"


def _run(out: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "--cpu", "--out", str(out), *args], capture_output=True, text=True, timeout=timeout)


def _lines(archive: tarfile.TarFile, folder: str) -> list[dict]:
    [member] = [m for m in archive.getmembers() if m.name.startswith(f"./{folder}/") and m.name.endswith("results.jsonl")]
    return [json.loads(line) for line in archive.extractfile(member).read().decode().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("gpu_check")
    return _run(out, "--budget", "420"), out


@pytest.mark.slow
def test_every_step_runs_on_the_cpu(dry_run: tuple[subprocess.CompletedProcess, Path]) -> None:
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for step in ("CUDA-only tests: ok", "l40_vit at 0.1 and 0.5: ok", "profile rigl, barter at 0.1: ok",
                 "torch.compile: dense, rigl at 0.5: ok"):
        assert step in proc.stdout
    assert "torch sees no CUDA device" in (out / "env.txt").read_text()
    assert (out / "gpu_check.log").read_text().endswith(proc.stdout[-200:])


@pytest.mark.slow
def test_the_outputs_hold_the_runs_reports_and_profiles(dry_run: tuple[subprocess.CompletedProcess, Path]) -> None:
    _, out = dry_run
    assert "<html" in (out / "l40_vit_short.html").read_text()[:500].lower()
    assert re.search(r"\*\*(Fastest vs rigl|No method faster than rigl)", (out / "l40_vit_short.md").read_text())
    assert not (out / "work").exists()  # packed, then removed: a few files come back from any host
    with tarfile.open(out / "gpu_check.tar.gz") as archive:
        runs = _lines(archive, "runs")
        profiles = _lines(archive, "profile")
        traces = [m.name for m in archive.getmembers() if m.name.endswith(".trace.json.gz")]
    # every method at both densities (dense once), each ok, on the device asked for
    assert {(r["method"], r["density"]) for r in runs} >= {("rigl", 0.1), ("rigl", 0.5), ("barter", 0.1), ("dense", 1.0), ("rigl_csr", 0.5)}
    assert all(r["status"] == "ok" and r["device"] == "cpu" for r in runs)
    assert {r["method"] for r in profiles} == {"rigl", "barter"} and all(r["profile"] for r in profiles)
    assert len(traces) == 2
    # Each run folder's results, run.json and suite.yaml also on their own, outside the tarball.
    folders = sorted(path.parent for path in (out / "run_folders").rglob("results.jsonl"))
    assert [f.relative_to(out / "run_folders").parts[0] for f in folders] == ["compile", "profile", "runs"]
    assert all({p.name for p in f.iterdir()} == {"results.jsonl", "run.json", "suite.yaml"} for f in folders)


@pytest.mark.slow
def test_the_compile_step_times_eager_and_compiled_in_one_run(dry_run: tuple[subprocess.CompletedProcess, Path]) -> None:
    _, out = dry_run
    [results] = (out / "run_folders" / "compile").rglob("results.jsonl")
    lines = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    compiled = {(r["method"], bool((r.get("sweep") or {}).get("compile"))) for r in lines if r["status"] == "ok"}
    assert compiled == {("dense", False), ("rigl", False), ("dense", True), ("rigl", True)}


@pytest.mark.slow
def test_a_spent_budget_skips_the_steps_and_still_packs(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--budget", "25", timeout=120)
    assert proc.returncode == 1
    assert proc.stdout.count("skipped (budget)") == 4
    assert (tmp_path / "gpu_check.tar.gz").exists() and (tmp_path / "gpu_check.log").exists()
