"""Installing dstbench must claim only the `dstbench` import name, with every package listed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def package_folders() -> set[str]:
    """Every package of the source tree, as installed: dstbench's folders with an __init__.py, and
    methods/ as dstbench.methods."""
    return {"dstbench.methods"} | {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "dstbench").rglob("__init__.py")}


def test_methods_folder_is_installed_under_the_dstbench_namespace() -> None:
    assert _setuptools()["package-dir"]["dstbench.methods"] == "methods"
    assert "packages" not in _setuptools()  # found by setup.py, never listed by hand


def _builds_wheels_offline() -> bool:
    """Whether this environment's setuptools builds a wheel without an isolated (downloaded) build
    environment: setuptools 70.1 and later carry bdist_wheel, older ones need the wheel package."""
    import importlib.util

    import setuptools
    from packaging.version import Version

    return Version(setuptools.__version__) >= Version("70.1") or importlib.util.find_spec("wheel") is not None


@pytest.mark.slow  # builds a wheel
@pytest.mark.skipif(not _builds_wheels_offline(), reason="setuptools < 70.1 without the wheel package cannot build a wheel offline")
def test_a_wheel_holds_every_package_and_claims_only_dstbench(tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys
    import zipfile

    # Built from a copy of what an install reads (as docker/Dockerfile copies it): the build's own
    # folders (build/, *.egg-info) land there, never in the checkout.
    source = tmp_path / "source"
    for name in ("dstbench", "methods"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                           str(tmp_path), str(source)], capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    [wheel] = tmp_path.glob("dstbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {".".join(Path(n).parent.parts) for n in names if n.endswith("/__init__.py")}
    assert packages == package_folders()
    assert {n.split("/")[0] for n in names if ".dist-info" not in n} == {"dstbench"}
    assert "dstbench/methods/dense.py" in names and "dstbench/report/templates/report.html.j2" in names


def test_installed_methods_import_through_the_namespace() -> None:
    import dstbench.methods.dense as dense

    assert Path(dense.__file__).resolve() == ROOT / "methods" / "dense.py"


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    import re

    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_base_install_is_lean_and_extras_name_what_they_bring() -> None:
    project = _project()
    base = _names(project["dependencies"])
    assert not base & {"pytest", "pytest-benchmark", "scikit-learn", "mlxtend", "playwright"}, base
    extras = project["optional-dependencies"]
    assert _names(extras["datasets"]) == {"scikit-learn", "mlxtend"}
    assert _names(extras["export"]) == {"pytest-benchmark"}
    assert _names(extras["cluster"]) == {"submitit"}
    # `pip install -e ".[dev]" && python -m pytest -q` runs every test: every extra and the tools.
    assert "dstbench[datasets,export,cluster]" in extras["dev"] and {"pytest", "playwright"} <= _names(extras["dev"])
    torch = next(r for r in project["dependencies"] if r.startswith("torch>") or r.startswith("torch="))
    from packaging.specifiers import SpecifierSet

    assert "2.14.1" in SpecifierSet(torch.removeprefix("torch"))


LEAN = """
import importlib, json, pkgutil, sys
from pathlib import Path
# What a lean install lacks: an import of any of these fails, and find_spec says it is missing.
for name in ("sklearn", "mlxtend", "pytest_benchmark", "pytest", "submitit"):
    sys.modules[name] = None
import dstbench
for module in pkgutil.walk_packages(dstbench.__path__, "dstbench."):
    if not module.name.endswith("__main__") and "torchrun_worker" not in module.name:
        importlib.import_module(module.name)
from dstbench.cli import main
commands, out = json.loads(sys.argv[1]), Path(sys.argv[2])
codes = []
for argv in commands:  # {RUN}: the run folder the first command made
    runs = list(out.iterdir()) if out.exists() else []
    codes.append(main([a.replace("{RUN}", str(runs[0]) if runs else "") for a in argv]))
print("CODES", json.dumps(codes))
"""


@pytest.mark.slow
def test_a_lean_install_runs_a_synthetic_suite_and_names_the_missing_extras(tmp_path: Path) -> None:
    """Every dstbench module imports, a synthetic suite runs, and what needs an extra says which,
    with scikit-learn, mlxtend, pytest-benchmark, pytest and submitit absent (as after `pip install .`)."""
    import json
    import subprocess
    import sys

    import yaml

    from tests.conftest import micro_suite

    smoke = tmp_path / "smoke.yaml"
    smoke.write_text(yaml.safe_dump(micro_suite(timing={"warmup_steps": 1, "segment_steps": 1, "segments": 2})))
    digits = tmp_path / "digits.yaml"
    digits.write_text(yaml.safe_dump(micro_suite(data={"name": "digits", "num_workers": 0}, mode="accuracy",
                                                 model={**micro_suite()["model"], "img_size": 8, "patch_size": 2})))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(micro_suite(launcher={"name": "submitit", "cluster": "local"})))
    out = tmp_path / "runs"
    commands = [
        ["run", str(smoke), "--out", str(out)],
        ["run", str(digits), "--dry-run"],
        ["run", str(cluster), "--dry-run"],
        ["export", "{RUN}", "--pytest-benchmark", str(tmp_path / "b.json")],
    ]
    done = subprocess.run(
        [sys.executable, "-c", LEAN, json.dumps(commands), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.split("CODES", 1)[1]) == [0, 2, 2, 2]
    assert "data.name: digits needs scikit-learn, which is not installed: pip install 'dstbench[datasets]'" in done.stderr
    assert "launcher submitit needs submitit, which is not installed: pip install 'dstbench[cluster]'" in done.stderr
    assert "dstbench export needs pytest-benchmark, which is not installed: pip install 'dstbench[export]'" in done.stderr
    assert not (tmp_path / "b.json").exists()
