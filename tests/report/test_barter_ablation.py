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


@pytest.mark.skipif(not (ABLATION / "runs").is_dir(), reason="no committed ablation runs")
def test_the_quoted_rigl_lead_over_barter_is_paired_and_not_separated_after_holm() -> None:
    import re

    from dstbench.results.derive import load_frame
    from dstbench.results.ranking import rank_cases

    runs = sorted(p.resolve() for p in (ABLATION / "runs").glob("*/") if (p / "results.jsonl").is_file())
    ranking = rank_cases(load_frame(runs), 0.1)
    pairs = ranking.attrs["pairs"]
    pair = pairs.set_index(["higher", "lower"]).loc[("rigl@0.1", "barter_split@0.1")]
    text = re.sub(r"\s+", " ", (ABLATION / "README.md").read_text(encoding="utf-8"))
    quoted = (f"`barter_split` is {pair['difference'] * 100:.1f} points below (95% CI [{pair['ci_low'] * 100:.1f}, "
              f"{pair['ci_high'] * 100:.1f}]), which the ranking's letters do not separate after Holm over the {len(pairs)} pairs")
    assert quoted in text and not pair["separated"]
