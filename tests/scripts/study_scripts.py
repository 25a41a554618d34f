"""What the study tests share: a study script loaded as a module (scripts/ is not a package) and a
page's text with its whitespace collapsed (wrapping is free)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def load_study_script(name: str) -> Any:
    """scripts/studies/NAME.py as a module."""
    spec = importlib.util.spec_from_file_location(f"{name}_study", ROOT / "scripts" / "studies" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flat(path: str | Path) -> str:
    """The file's text (a path relative to the repository root, or absolute), whitespace collapsed."""
    return re.sub(r"\s+", " ", (ROOT / path).read_text(encoding="utf-8"))
