"""The top-1 ranking with a compact letter display (dstbench.results.ranking) on hand-made seeds:
two cases share a letter exactly when their paired difference is not significant after Holm, groups
overlap where the separations do, and a pair that cannot be tested stays together."""

from __future__ import annotations

import itertools
import random

import pandas as pd
import pytest

from dstbench.results.ranking import letter_groups, paired_test, rank_cases, separated_pairs


def per_seed(top1: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for case, values in top1.items():
        method, density = case.split("@")
        for seed, value in enumerate(values):
            rows.append({"case_id": case, "method": method, "kind": "dense" if method == "dense" else "masked",
                         "density": float(density), "seed": seed, "status": "ok", "top1": value})
    return pd.DataFrame(rows)


def test_letters_overlap_where_the_separations_do() -> None:
    # a is separated from c, b from neither: a `a`, b `ab`, c `b`.
    assert letter_groups(["a", "b", "c"], {frozenset(("a", "c"))}) == {"a": "a", "b": "ab", "c": "b"}
    assert letter_groups(["a", "b", "c"], set()) == {"a": "a", "b": "a", "c": "a"}
    every = {frozenset(p) for p in itertools.combinations("abc", 2)}
    assert letter_groups(["a", "b", "c"], every) == {"a": "a", "b": "b", "c": "c"}


def test_two_cases_share_a_letter_exactly_when_not_separated() -> None:
    rng = random.Random(0)
    cases = list("abcdef")
    for _ in range(200):
        separated = {frozenset(p) for p in itertools.combinations(cases, 2) if rng.random() < 0.4}
        letters = letter_groups(cases, separated)
        for x, y in itertools.combinations(cases, 2):
            assert bool(set(letters[x]) & set(letters[y])) == (frozenset((x, y)) not in separated), (x, y, letters)


def test_a_ranking_separates_what_the_paired_seeds_show() -> None:
    # Seeds move every case alike (0.60, 0.64, 0.62 and the like): paired, a 2-point lead holds
    # though the means' intervals overlap; static is level with barter and barter with set, while
    # set and static are separated (an overlapping display).
    frame = per_seed({
        "dense@1": [0.700, 0.740, 0.720], "set@0.1": [0.600, 0.640, 0.620],
        "barter@0.1": [0.585, 0.640, 0.605], "static@0.1": [0.580, 0.620, 0.600],
        "rigl@0.5": [0.9, 0.9, 0.9],  # another density: left out
    })
    ranking = rank_cases(frame, 0.1)
    assert ranking["case_id"].tolist() == ["dense@1", "set@0.1", "barter@0.1", "static@0.1"]
    assert ranking["top1"].iloc[0] == pytest.approx(0.72) and (ranking["seeds"] == 3).all()
    letters = dict(zip(ranking["case_id"], ranking["letters"]))
    assert letters == {"dense@1": "a", "set@0.1": "b", "barter@0.1": "bc", "static@0.1": "c"}
    pairs = ranking.attrs["pairs"].set_index(["higher", "lower"])
    assert pairs.loc[("set@0.1", "static@0.1"), "difference"] == pytest.approx(0.02)
    assert pairs.loc[("set@0.1", "static@0.1"), "p_holm"] < 0.05 < pairs.loc[("set@0.1", "barter@0.1"), "p_holm"]
    assert ("set@0.1", "static@0.1") in separated_pairs(ranking) and ("barter@0.1", "static@0.1") not in separated_pairs(ranking)


def test_one_seed_tests_nothing_and_every_case_shares_a_letter() -> None:
    ranking = rank_cases(per_seed({"dense@1": [0.9], "rigl@0.1": [0.5]}), 0.1)
    assert ranking["letters"].tolist() == ["a", "a"]
    assert pd.isna(ranking.attrs["pairs"]["p"].iloc[0])
    assert paired_test({0: 0.5, 1: 0.6}, {0: 0.4, 1: 0.5})["p"] == 0.0  # the same lead at every seed


def test_a_run_ranks_its_cases_and_the_report_shows_the_letters(both_run) -> None:  # type: ignore[no-untyped-def]
    import dstbench
    from dstbench.report.tables import accuracy_table
    from dstbench.results.derive import derive, load_frame

    run = dstbench.load_run(both_run)
    ranking = run.ranking(0.5)
    assert set(ranking["case_id"]) == {"dense@1", "rigl@0.5", "barter@0.5"} and (ranking["seeds"] == 2).all()
    assert ranking["top1"].is_monotonic_decreasing and ranking["letters"].iloc[0].startswith("a")
    table = accuracy_table(derive(load_frame([both_run]), "dense"))
    assert table is not None and "group" in table.headers and "Holm over every pair" in table.note
    with pytest.raises(ValueError, match="no sweep point"):
        run.ranking(0.5, point="embed_dim=8")


def test_any_two_cases_are_compared_paired_by_seed(both_run) -> None:  # type: ignore[no-untyped-def]
    import dstbench
    from dstbench.results.derive import load_frame
    from dstbench.report.seeds import paired_difference

    run = dstbench.load_run(both_run)
    paired = run.paired("barter@0.5", "rigl@0.5").set_index("figure")
    per_seed = run.frame(per_seed=True).set_index(["case_id", "seed"])
    by_hand = [per_seed.loc[("barter@0.5", s), "top1"] - per_seed.loc[("rigl@0.5", s), "top1"] for s in (0, 1)]
    assert paired.loc["top1", "seeds"] == 2 and paired.loc["top1", "difference"] == pytest.approx(sum(by_hand) / 2)
    assert paired.loc["top1", "ci_low"] <= paired.loc["top1", "difference"] <= paired.loc["top1", "ci_high"]
    assert {"steps_to_target", "time_to_target_s"} <= set(paired.index)
    with pytest.raises(ValueError, match="no ok line of set@0.5"):
        run.paired("set@0.5", "rigl@0.5")
    # The report's paired difference on a run over a suite's `seeds:` (it needed one run per seed).
    table = paired_difference(load_frame([both_run]), "rigl").set_index("method")
    assert table.loc["barter", "diff_mean"] == pytest.approx(sum(by_hand) / 2) and table.loc["barter", "n"] == 2
