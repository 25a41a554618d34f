"""Prune/grow scorers and the seeded top-k selection."""

from __future__ import annotations

import pytest
import torch

from dstbench.dst.masked.scorers import (
    GradientGrow,
    Magnitude,
    MagnitudeGradient,
    RandomGrow,
    drop_and_grow,
    select_top,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_select_top_picks_the_highest_candidates_only() -> None:
    scores = torch.tensor([5.0, 9.0, 1.0, 7.0, 8.0, 3.0])
    candidates = torch.tensor([True, False, True, True, True, True])
    picked = select_top(scores, candidates, 3, _gen())
    assert sorted(picked.tolist()) == [0, 3, 4]  # 9.0 is not a candidate
    assert select_top(scores, candidates, 0, _gen()).numel() == 0


def test_ties_are_broken_by_the_seed_reproducibly() -> None:
    scores = torch.zeros(100)
    candidates = torch.ones(100, dtype=torch.bool)
    scores[:3] = 1.0  # always chosen; the other 7 come from the 97 tied at 0
    draws = {seed: sorted(select_top(scores, candidates, 10, _gen(seed)).tolist()) for seed in range(4)}
    assert all(set(range(3)) <= set(d) for d in draws.values())
    assert draws[0] == sorted(select_top(scores, candidates, 10, _gen(0)).tolist())
    assert len({tuple(d) for d in draws.values()}) > 1


def test_nan_scores_rank_lowest_and_never_shrink_the_selection() -> None:
    # A NaN compares false with everything: taken as the threshold it would select nothing.
    scores = torch.tensor([float("nan"), 2.0, float("nan"), 1.0, 5.0])
    candidates = torch.tensor([True, True, True, True, False])
    for overwrite in (False, True):
        picked = select_top(scores.clone(), candidates, 3, _gen(), overwrite=overwrite)
        assert picked.numel() == 3
        assert {1, 3} < set(picked.tolist()) and 4 not in picked.tolist()
    every = select_top(scores, candidates, 4, _gen())
    assert sorted(every.tolist()) == [0, 1, 2, 3]
    # All NaN: still exactly k, all among the candidates.
    picked = select_top(torch.full((6,), float("nan")), torch.tensor([True] * 3 + [False] * 3), 2, _gen())
    assert picked.numel() == 2 and set(picked.tolist()) <= {0, 1, 2}


def test_select_top_refuses_more_than_the_candidates() -> None:
    with pytest.raises(ValueError, match="cannot select 3"):
        select_top(torch.arange(4.0), torch.tensor([True, False, True, False]), 3, _gen())


def test_overwrite_uses_the_scores_as_scratch_with_the_same_choice() -> None:
    scores = torch.randn(50, generator=_gen(2))
    candidates = torch.rand(50, generator=_gen(3)) < 0.5
    expected = select_top(scores, candidates, 7, _gen(1))
    scratch = scores.clone()
    assert torch.equal(select_top(scratch, candidates, 7, _gen(1), overwrite=True), expected)
    assert torch.all(scratch[~candidates] == -torch.inf)


def test_drop_and_grow_drops_lowest_active_and_grows_highest_inactive() -> None:
    active = torch.tensor([True, True, True, True, False, False, False, False])
    drop = torch.tensor([4.0, 1.0, 3.0, 2.0, 0.0, 0.0, 0.0, 0.0])
    grow = torch.tensor([0.0, 0.1, 0.0, 0.0, 0.5, 0.9, 0.2, 0.7])
    new = drop_and_grow(active, drop, grow, 2, 2, _gen())
    # Drops index 1 and 3 (|w| 1 and 2), grows 5 and 7 (the two largest inactive scores).
    assert new.tolist() == [True, False, True, False, False, True, False, True]


def test_a_dropped_position_can_be_regrown() -> None:
    active = torch.tensor([True, True, False, False])
    new = drop_and_grow(active, torch.tensor([1.0, 2.0, 0.0, 0.0]), torch.tensor([9.0, 0.0, 1.0, 0.5]), 1, 1, _gen())
    assert new.tolist() == [True, True, False, False]


def test_random_grow_draws_uniformly_among_inactive_positions() -> None:
    active = torch.zeros(64, dtype=torch.bool)
    active[:32] = True
    weight = torch.randn(64)
    generator = _gen(3)
    hits = torch.zeros(64)
    for _ in range(400):
        picked = select_top(RandomGrow()(weight, None, generator), ~active, 8, generator)
        hits[picked] += 1
    assert hits[:32].sum() == 0
    # 400 * 8 / 32 = 100 expected per inactive position; a score-driven grow would pile up on 8.
    assert 60 < hits[32:].min() and hits[32:].max() < 140


def test_scorers() -> None:
    weight = torch.tensor([-3.0, 1.0, 2.0])
    grad = torch.tensor([0.0, -4.0, 1.0])
    assert Magnitude()(weight, grad).tolist() == [3.0, 1.0, 2.0]
    assert MagnitudeGradient(0.5)(weight, grad).tolist() == [3.0, 3.0, 2.5]
    assert MagnitudeGradient(0.0)(weight, grad).tolist() == [3.0, 1.0, 2.0]
    assert GradientGrow()(weight, grad, _gen()).tolist() == [0.0, 4.0, 1.0]
    assert GradientGrow.needs_dense_grad and not RandomGrow.needs_dense_grad
