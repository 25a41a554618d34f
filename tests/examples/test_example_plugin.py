"""The example plugin package (`examples/dstbench-example-plugin/`): installed with pip into a
temporary folder, its suite run with `dstbench run` in a subprocess, its method and report section
found through their entry points. Nothing is installed into the test's environment."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dstbench.results.record import iter_results

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "dstbench-example-plugin"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the installed package (code and dist-info with its entry points)."""
    work = tmp_path_factory.mktemp("example_plugin")
    # A copy: building in place would leave build/ and *.egg-info in the checkout.
    source = work / "source"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = work / "site"
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--disable-pip-version-check", "--quiet"]
    if importlib.util.find_spec("setuptools") is not None:
        # Build with this environment's setuptools: no index needed.
        command += ["--no-build-isolation", "--no-index"]
    done = subprocess.run([*command, "--target", str(target), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def dstbench(args: list[str], cwd: Path, plugin_path: Path | None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", DSTBENCH_COLLECT_ENV="0")
    paths = [str(plugin_path)] if plugin_path is not None else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.run([sys.executable, "-m", "dstbench", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_example_plugin_runs_and_reports(plugin_path: Path, tmp_path: Path) -> None:
    ran = dstbench(["run", str(EXAMPLE / "suite.yaml"), "--out", str(tmp_path / "runs")], tmp_path, plugin_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    [run_dir] = list((tmp_path / "runs").iterdir())
    lines = {line["case_id"]: line for line in iter_results(run_dir)}
    assert {case: line["status"] for case, line in lines.items()} == {"dense@1": "ok", "set@0.5": "ok", "set_constant@0.5": "ok"}
    extras = lines["set_constant@0.5"]["method_extras"]
    # 18 steps (2 warm-up, 1 settling and 3 timed segments of 4), an update every 3 before step 14.
    assert extras["updates_done"] == 4
    # The fraction is constant: every update replaces 20% of the active weights (less the rounding
    # down per layer), where SET's cosine would replace less at each later update.
    share = extras["weights_replaced"] / extras["updates_done"] / extras["active_weights"]
    assert 0.19 < share <= 0.2

    markdown = tmp_path / "report.md"
    reported = dstbench(["report", str(run_dir), "--markdown", str(markdown)], tmp_path, plugin_path)
    assert reported.returncode == 0, reported.stderr
    text = markdown.read_text()
    assert "## Weights replaced by set_constant" in text
    row = next(line for line in text.splitlines() if line.startswith("| set_constant@0.5"))
    assert [cell.strip() for cell in row.strip("|").split("|")][:4] == ["set_constant@0.5", "0.5", "4", str(extras["weights_replaced"])]
    assert json.loads((run_dir / "run.json").read_text())["suite"] == "example-plugin"
