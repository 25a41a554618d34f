"""`compare`'s top-1 verdict (dstbench.gates.top1_compare) on hand-made runs over seeds: paired by seed
where the runs share their seeds, unpaired (and said so) where they do not, and when a change is
within seed noise."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dstbench.gates.compare import compare_runs, exit_code
from dstbench.gates.comparison_text import render
from dstbench.gates.sides import load_side
from dstbench.gates.top1_compare import judge, welch_interval
from tests.conftest import micro_suite
from tests.gates.synthetic import line, write_run

# Seed-to-seed spread of 5 points, as seeds move a small workload; the same seed moves both runs alike.
BASELINE = {0: 0.80, 1: 0.85, 2: 0.90}


def run(root: Path, name: str, top1: dict[int, float], dense: dict[int, float] | None = None) -> Path:
    """A run of dense and rigl@0.5 trained over the given seeds (rigl's top-1 as given)."""
    lines = []
    for seed, value in top1.items():
        lines.append(line("dense", 1.0, seed=seed, top1=(dense or {}).get(seed, 0.95)))
        lines.append(line("rigl", 0.5, seed=seed, top1=value))
    suite = {**micro_suite(), "seeds": list(top1)}
    return write_run(root / name, lines, suite)


def top1_of(comparison, case: str = "rigl@0.5"):  # type: ignore[no-untyped-def]
    return next(t for t in comparison.top1 if t.case == case)


def test_a_drop_every_seed_shows_is_a_regression_paired_and_within_noise_unpaired(tmp_path: Path) -> None:
    base = run(tmp_path, "base", BASELINE)
    # Three points lower at every seed (with a little jitter): the same drop against a 5-point spread.
    dropped = {0: 0.770, 1: 0.821, 2: 0.869}
    paired = compare_runs(load_side(base), load_side(run(tmp_path, "paired", dropped)))
    verdict = top1_of(paired)
    assert verdict.paired and verdict.basis == "paired by seed (n=3)"
    assert verdict.change == pytest.approx(-0.030, abs=1e-9)
    assert verdict.ci_high < 0 and verdict.verdict == "regression"
    assert exit_code(paired, strict=False) == 1
    assert "rigl@0.5 (top-1 -3.00 pp)" in render(paired)
    # The same figures under other seed numbers cannot be paired: the spread between seeds swamps it.
    other_seeds = dict(zip((3, 4, 5), dropped.values()))
    unpaired = compare_runs(load_side(base), load_side(run(tmp_path, "unpaired", other_seeds)))
    verdict = top1_of(unpaired)
    assert not verdict.paired and verdict.basis == "unpaired (3 vs 3 seeds)"
    assert verdict.change == pytest.approx(-0.030, abs=1e-9) and verdict.ci_low < 0 < verdict.ci_high
    assert verdict.verdict == "inconclusive" and verdict.note.startswith("unpaired: the runs' seeds differ")
    assert "within seed noise" in verdict.note
    assert exit_code(unpaired, strict=False) == 0 and exit_code(unpaired, strict=True) == 1


def test_a_change_within_seed_noise_and_the_threshold_is_unchanged(tmp_path: Path) -> None:
    base = run(tmp_path, "base", BASELINE)
    jitter = {0: 0.805, 1: 0.846, 2: 0.901}  # +0.5, -0.4, +0.1 points
    comparison = compare_runs(load_side(base), load_side(run(tmp_path, "again", jitter)))
    verdict = top1_of(comparison)
    assert verdict.change == pytest.approx(0.002 / 3, abs=1e-9)
    assert verdict.ci_low < 0 < verdict.ci_high and verdict.verdict == "unchanged"
    assert verdict.note == "within seed noise (the 95% CI covers 0)"
    text = render(comparison)
    assert "top-1 (mean over each run's seeds)" in text and "within seed noise" in text
    assert "top-1 of 2 cases: 0 regressed, 0 improved, 0 inconclusive, 2 within seed noise" in text
    assert exit_code(comparison, strict=True) == 0


def test_one_seed_says_what_it_cannot_tell(tmp_path: Path) -> None:
    base, cur = run(tmp_path, "base", {0: 0.80}), run(tmp_path, "cur", {0: 0.78})
    verdict = top1_of(compare_runs(load_side(base), load_side(cur)))
    assert verdict.basis == "one seed" and math.isnan(verdict.ci_low)
    assert verdict.verdict == "inconclusive" and "one seed" in verdict.note
    assert top1_of(compare_runs(load_side(base), load_side(cur)), "dense@1").verdict == "unchanged"


def test_memory_only_leaves_top1_out(tmp_path: Path) -> None:
    base = run(tmp_path, "base", BASELINE)
    assert compare_runs(load_side(base), load_side(base), memory_only=True).top1 == []


def test_the_verdict_rules() -> None:
    assert judge(-0.03, -0.04, -0.02, 1.0)[0] == "regression"
    assert judge(0.03, 0.02, 0.04, 1.0)[0] == "improvement"
    assert judge(-0.005, -0.006, -0.004, 1.0) == ("unchanged", "beyond seed noise, within +/-1 pp")
    assert judge(-0.03, -0.09, 0.03, 1.0)[0] == "inconclusive"
    low, high = welch_interval([0.80, 0.85, 0.90], [0.80, 0.85, 0.90])
    assert low == pytest.approx(-high) and high > 0.1
    assert math.isnan(welch_interval([0.8], [0.8, 0.9])[0])


def test_runs_that_differ_in_their_seeds_alone_match_by_case_unpaired(tmp_path: Path) -> None:
    """`seeds: [0, 1, 2]` against `seeds: [3, 4, 5]`: the first seed is in the suite hash, so no line
    matches by hash; their recorded setups differ in the seed alone, so top-1 still compares."""
    import json

    base, cur = run(tmp_path, "base", BASELINE), run(tmp_path, "cur", {3: 0.81, 4: 0.86, 5: 0.88})
    for folder, seed, digest in ((base, 0, "aaaa"), (cur, 3, "bbbb")):
        lines = [json.loads(text) for text in (folder / "results.jsonl").read_text().splitlines()]
        (folder / "results.jsonl").write_text("".join(json.dumps({**x, "suite_hash": digest}) + "\n" for x in lines))
        meta = json.loads((folder / "run.json").read_text())
        (folder / "run.json").write_text(json.dumps({**meta, "suite_hash": digest, "setup": {"seed": seed, "batch_size": 8}}))
    comparison = compare_runs(load_side(base), load_side(cur))
    assert comparison.cases == [] and {t.case for t in comparison.top1} == {"dense@1", "rigl@0.5"}
    verdict = top1_of(comparison)
    assert not verdict.paired and verdict.baseline_seeds == [0, 1, 2] and verdict.current_seeds == [3, 4, 5]
    assert verdict.verdict == "unchanged" and "within seed noise" in verdict.note
