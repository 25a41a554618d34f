"""Installing dstbench must claim only the `dstbench` import name, with every package listed."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_methods_folder_is_installed_under_the_dstbench_namespace() -> None:
    config = _setuptools()
    assert config["package-dir"]["dstbench.methods"] == "methods"
    assert all(name == "dstbench" or name.startswith("dstbench.") for name in config["packages"])


def test_every_package_folder_is_listed() -> None:
    listed = set(_setuptools()["packages"])
    found = {"dstbench.methods"} | {
        ".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "dstbench").rglob("__init__.py")
    }
    assert found == listed


def test_installed_methods_import_through_the_namespace() -> None:
    import dstbench.methods.dense as dense

    assert Path(dense.__file__).resolve() == ROOT / "methods" / "dense.py"
