"""A ranking by top-1 that claims only what the seeds show: the cases at one density (dense with
them) ordered by mean top-1, with a compact letter display.

Every pair of cases is tested on its top-1 difference paired by seed (the seeds both trained, ok):
a two-sided paired t-test (n - 1 degrees of freedom), Holm-adjusted over all the pairs at that
density (family-wise `alpha`, 0.05 by default). Two cases share a letter exactly when their
difference is not significant; groups may overlap (a is level with b and b with c while a and c are
separated: `a`, `ab`, `b`). A pair with fewer than two common seeds cannot be tested: it shares a
letter and says so. Letters run from the group holding the highest mean (`a`) down.

The letters come from Piepho's insert-and-absorb algorithm (2004): start from one group of every
case; for each significant pair, split every group that holds both into one without each; drop a
group that another contains. A pair not significant stays together in one of the two halves of
every split, so it shares a letter at the end, and a significant pair never does.
"""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from dstbench.results.intervals import holm

ALPHA = 0.05


def paired_test(a: dict[Any, float], b: dict[Any, float], level: float = 0.95) -> dict[str, Any]:
    """The paired-by-seed difference a - b over their common seeds: its mean, `level` interval,
    two-sided p and the seeds (NaN p with fewer than two)."""
    seeds = sorted(set(a) & set(b), key=str)
    diffs = np.asarray([a[s] - b[s] for s in seeds], dtype=float)
    out: dict[str, Any] = {"seeds": len(seeds), "difference": float(diffs.mean()) if len(diffs) else math.nan,
                           "ci_low": math.nan, "ci_high": math.nan, "p": math.nan}
    if len(diffs) < 2:
        return out
    se = float(diffs.std(ddof=1) / math.sqrt(len(diffs)))
    if se == 0:
        out.update(ci_low=out["difference"], ci_high=out["difference"], p=0.0 if out["difference"] != 0 else 1.0)
        return out
    half = float(stats.t.ppf(0.5 + level / 2, len(diffs) - 1)) * se
    p = 2 * float(stats.t.sf(abs(out["difference"]) / se, len(diffs) - 1))
    out.update(ci_low=out["difference"] - half, ci_high=out["difference"] + half, p=p)
    return out


def letter_groups(order: list[str], separated: set[frozenset[str]]) -> dict[str, str]:
    """Each case's letters (`order`: best first) such that two cases share one exactly when their
    pair is not in `separated` (insert and absorb, see the module docstring)."""
    groups: list[frozenset[str]] = [frozenset(order)] if order else []
    for pair in sorted(separated, key=sorted):  # a fixed order: the same letters in every process
        i, j = sorted(pair)
        split: list[frozenset[str]] = []
        for group in groups:
            split += [group - {i}, group - {j}] if i in group and j in group else [group]
        unique = list(dict.fromkeys(split))
        groups = [g for g in unique if g and not any(g < other for other in unique)]
    position = {case: index for index, case in enumerate(order)}
    groups.sort(key=lambda g: sorted(position[c] for c in g))
    letters = list(string.ascii_lowercase) + [f"{x}{y}" for x in string.ascii_lowercase for y in string.ascii_lowercase]
    return {case: "".join(letters[k] for k, g in enumerate(groups) if case in g) for case in order}


def rank_cases(per_seed: pd.DataFrame, density: float, alpha: float = ALPHA) -> pd.DataFrame:
    """The cases of one run (and sweep point) at `density`, and dense, ordered by mean top-1, with
    `letters` (the compact letter display), `top1` (mean), `seeds`; `attrs["pairs"]` holds every
    pair's paired difference, interval, p and Holm-adjusted p. `per_seed`: one row per (case,
    seed), as `Run.frame(per_seed=True)` gives it."""
    ok = per_seed[(per_seed["status"] == "ok") & per_seed["top1"].map(lambda v: isinstance(v, (int, float)) and math.isfinite(v))]
    chosen = ok[(ok["kind"] == "dense") | np.isclose(ok["density"].astype(float), float(density))]
    by_case: dict[str, dict[Any, float]] = {}
    for _, row in chosen.iterrows():
        by_case.setdefault(str(row["case_id"]), {})[row.get("seed")] = float(row["top1"])
    order = sorted(by_case, key=lambda c: -float(np.mean(list(by_case[c].values()))))
    pairs = []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            pairs.append({"higher": a, "lower": b, **paired_test(by_case[a], by_case[b])})
    tested = [k for k, p in enumerate(pairs) if math.isfinite(p["p"])]
    for k, adjusted in zip(tested, holm([pairs[k]["p"] for k in tested])):
        pairs[k]["p_holm"] = adjusted
    for pair in pairs:
        pair.setdefault("p_holm", math.nan)
        pair["separated"] = bool(pair["p_holm"] < alpha)
    letters = letter_groups(order, {frozenset((p["higher"], p["lower"])) for p in pairs if p["separated"]})
    ranking = pd.DataFrame([{
        "case_id": case, "top1": float(np.mean(list(by_case[case].values()))), "seeds": len(by_case[case]), "letters": letters[case],
    } for case in order], columns=["case_id", "top1", "seeds", "letters"])
    ranking.attrs["pairs"] = pd.DataFrame(pairs, columns=["higher", "lower", "seeds", "difference", "ci_low", "ci_high", "p", "p_holm", "separated"])
    ranking.attrs["alpha"] = alpha
    return ranking


def separated_pairs(ranking: pd.DataFrame) -> set[tuple[str, str]]:
    """The (higher, lower) pairs a ranking separates (Holm-adjusted p below its alpha)."""
    pairs = ranking.attrs.get("pairs")
    if pairs is None or pairs.empty:
        return set()
    return {(str(p["higher"]), str(p["lower"])) for _, p in pairs.iterrows() if p["separated"]}
