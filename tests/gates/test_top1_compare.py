"""`compare`'s top-1 verdict (dstbench.gates.top1_compare) on hand-made runs over seeds: paired by seed
where the runs share their seeds, unpaired (and said so) where they do not, judged by equivalence
as time is (significantly beyond the band, inside it by TOST, else inconclusive), Holm over cases."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dstbench.gates.compare import compare_runs, exit_code
from dstbench.gates.comparison_text import render
from dstbench.gates.sides import load_side
from dstbench.gates.top1_compare import beyond_p, change_stats, interval, judge
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
    assert "reaches past +/-1 pp" in verdict.note
    assert exit_code(unpaired, strict=False) == 0 and exit_code(unpaired, strict=True) == 1


def test_a_change_within_seed_noise_and_the_threshold_is_unchanged(tmp_path: Path) -> None:
    base = run(tmp_path, "base", BASELINE)
    jitter = {0: 0.805, 1: 0.846, 2: 0.901}  # +0.5, -0.4, +0.1 points
    comparison = compare_runs(load_side(base), load_side(run(tmp_path, "again", jitter)))
    verdict = top1_of(comparison)
    assert verdict.change == pytest.approx(0.002 / 3, abs=1e-9)
    assert -0.01 < verdict.ci_low < 0 < verdict.ci_high < 0.01 and verdict.verdict == "unchanged"
    assert verdict.note == "its 90% interval lies within +/-1 pp (equivalence, TOST)"
    text = render(comparison)
    assert "top-1 (mean over each run's seeds)" in text and "change [90% CI]" in text
    # dense's top-1 is the same at every seed: a change of exactly 0, inside the band.
    assert "top-1 of 2 cases: 0 regressed, 0 improved, 0 inconclusive, 2 unchanged" in text
    assert exit_code(comparison, strict=True) == 0


def test_one_seed_says_what_it_cannot_tell(tmp_path: Path) -> None:
    base, cur = run(tmp_path, "base", {0: 0.80}), run(tmp_path, "cur", {0: 0.78})
    verdict = top1_of(compare_runs(load_side(base), load_side(cur)))
    assert verdict.basis == "one seed" and math.isnan(verdict.ci_low)
    assert verdict.verdict == "inconclusive" and "one seed" in verdict.note
    # Even a case whose top-1 did not move: one seed cannot estimate seed noise.
    assert top1_of(compare_runs(load_side(base), load_side(cur)), "dense@1").verdict == "inconclusive"


def test_memory_only_leaves_top1_out(tmp_path: Path) -> None:
    base = run(tmp_path, "base", BASELINE)
    assert compare_runs(load_side(base), load_side(base), memory_only=True).top1 == []


def _verdict(change: float, se: float, df: float, adjusted: float | None = None) -> str:
    low, high = interval(change, se, df, 0.90)
    return judge(change, low, high, beyond_p(change, se, df, 1.0) if adjusted is None else adjusted, 1.0, 0.05)[0]


def test_the_verdict_rules_on_the_cases_the_old_rule_misread() -> None:
    from scipy import stats

    t95 = float(stats.t.ppf(0.975, 2))
    # -1.0 point with a 95% interval of [-10.9, +8.9] (3 seeds): was "unchanged", decides nothing.
    assert _verdict(-0.010, 0.099 / t95, 2.0) == "inconclusive"
    # -1.2 [-2.0, -0.4]: beyond zero, yet not significantly beyond the 1-point band: was "regression".
    assert _verdict(-0.012, 0.008 / t95, 2.0) == "inconclusive"
    # One seed within a point: was "unchanged"; seed noise is unknown.
    assert judge(-0.002, math.nan, math.nan, 1.0, 1.0, 0.05)[0] == "inconclusive"
    # Significantly beyond the edge, either way, and a well-measured small change inside the band.
    assert _verdict(-0.03, 0.002, 2.0) == "regression" and _verdict(0.03, 0.002, 2.0) == "improvement"
    assert _verdict(-0.002, 0.001, 2.0) == "unchanged"
    # Beyond the band but not after Holm over the cases: inconclusive, and it says so.
    verdict, note = judge(-0.02, -0.03, -0.015, 0.06, 1.0, 0.05)
    assert verdict == "inconclusive" and "not after Holm" in note
    # The change and its error: paired by seed where the seeds match, Welch's otherwise.
    change, se, df, paired = change_stats({0: 0.8, 1: 0.85, 2: 0.9}, {0: 0.79, 1: 0.84, 2: 0.89})
    assert paired and change == pytest.approx(-0.01) and se == pytest.approx(0.0, abs=1e-12) and df == 2
    change, se, df, paired = change_stats({0: 0.8, 1: 0.85, 2: 0.9}, {3: 0.8, 4: 0.85, 5: 0.9})
    assert not paired and change == pytest.approx(0.0) and se > 0.04 and 3 < df < 5
    assert math.isnan(change_stats({0: 0.8}, {1: 0.8, 2: 0.9})[1])


def test_holm_over_the_cases_holds_back_two_borderline_drops(tmp_path: Path) -> None:
    # Each case 2 points lower, with a spread that makes either alone significant beyond -1 pp
    # (one-sided p about 0.03); over two cases Holm doubles it.
    drops = {0: -0.02444, 1: -0.02, 2: -0.01556}
    base = run(tmp_path, "base", BASELINE, dense={s: 0.95 for s in BASELINE})
    cur = run(tmp_path, "cur", {s: BASELINE[s] + d for s, d in drops.items()}, dense={s: 0.95 + d for s, d in drops.items()})
    comparison = compare_runs(load_side(base), load_side(cur))
    for case in ("dense@1", "rigl@0.5"):
        verdict = top1_of(comparison, case)
        assert verdict.verdict == "inconclusive" and "not after Holm" in verdict.note, verdict.note
    single = beyond_p(*change_stats(BASELINE, {s: BASELINE[s] + d for s, d in drops.items()})[:3], 1.0)
    assert 0.02 < single < 0.05  # alone it would be a regression


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
    assert verdict.verdict == "inconclusive" and "reaches past +/-1 pp" in verdict.note  # seed spread, unpaired
