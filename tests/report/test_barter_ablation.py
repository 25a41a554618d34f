"""The committed BARTER ablation README is what its script makes from the committed run folders."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ABLATION = Path(__file__).resolve().parents[2] / "reports" / "barter_ablation"


def _script():
    spec = importlib.util.spec_from_file_location("make_readme", ABLATION / "make_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not (ABLATION / "runs").is_dir(), reason="no committed ablation runs")
def test_generated_tables_match_the_committed_runs() -> None:
    script = _script()
    runs = sorted(p.resolve() for p in (ABLATION / "runs").glob("*/") if (p / "results.jsonl").is_file())
    block = script.generated(runs)
    readme = (ABLATION / "README.md").read_text(encoding="utf-8")
    committed = readme[readme.index(script.BEGIN) : readme.index(script.END) + len(script.END)]
    assert block == committed  # rerun `python reports/barter_ablation/make_readme.py` after new runs
    assert "| barter_split " in block and "density 0.1" in block
