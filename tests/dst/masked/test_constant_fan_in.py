"""Constant fan-in masks and neuron ablation, the parts SRigL is built from."""

from __future__ import annotations

import pytest
import torch

from dstbench.dst.masked.constant_fan_in import fan_in, live_neurons, random_fan_in_mask, top_per_row


def test_fan_in_is_the_budget_over_live_rows_and_must_fit_a_row() -> None:
    assert fan_in(32, 8, 8) == 4 and fan_in(32, 6, 8) == 5 and fan_in(64, 8, 8) == 8
    with pytest.raises(ValueError, match="fan-in of 0"):
        fan_in(7, 8, 8)
    with pytest.raises(ValueError, match="fan-in of 9"):
        fan_in(72, 8, 8)
    with pytest.raises(ValueError, match="at least one live neuron"):
        fan_in(8, 0, 8)


def test_random_fan_in_masks_hold_k_per_row_and_follow_the_seed() -> None:
    masks = [random_fan_in_mask((16, 12), 5, torch.Generator().manual_seed(seed)) for seed in (3, 3, 4)]
    assert masks[0].dtype == torch.bool and masks[0].sum(dim=1).tolist() == [5] * 16
    assert torch.equal(masks[0], masks[1]) and not torch.equal(masks[0], masks[2])
    # Not the same columns in every row: each row draws its own.
    assert len({tuple(row.nonzero().flatten().tolist()) for row in masks[0]}) > 1


def test_top_per_row_takes_each_rows_count_of_its_best_candidates() -> None:
    scores = torch.tensor([[5.0, 1.0, 4.0, 3.0], [1.0, 2.0, 3.0, 4.0], [9.0, 8.0, 7.0, float("nan")]])
    candidates = torch.tensor([[True, True, False, True], [True, True, True, True], [False, True, True, True]])
    chosen = top_per_row(scores, candidates, torch.tensor([2, 1, 3]), torch.Generator().manual_seed(0))
    assert chosen.tolist() == [
        [True, False, False, True],  # 5 and 3; 4 is no candidate
        [False, False, False, True],
        [False, True, True, True],  # all three candidates, the NaN one last
    ]


def test_top_per_row_breaks_ties_by_the_seed() -> None:
    scores = torch.zeros(4, 32)
    candidates = torch.ones(4, 32, dtype=torch.bool)
    picks = [top_per_row(scores, candidates, torch.full((4,), 3), torch.Generator().manual_seed(s)) for s in (1, 1, 2)]
    assert all(p.sum(dim=1).tolist() == [3] * 4 for p in picks)
    assert torch.equal(picks[0], picks[1]) and not torch.equal(picks[0], picks[2])


def _layer() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """8 rows x 8 columns, 4 active per row; rows 0 and 1 hold the smallest weights and gradients."""
    active = torch.zeros(8, 8, dtype=torch.bool)
    active[:, :4] = True
    magnitude = (torch.arange(64, dtype=torch.float32).view(8, 8) + 1.0) * active
    gradient = torch.arange(64, dtype=torch.float32).view(8, 8) / 64
    return active, magnitude, gradient


def test_rows_without_salient_weights_are_ablated() -> None:
    active, magnitude, gradient = _layer()
    # n_keep 20 of the 32 active: the 20 largest |w| lie in rows 3-7; the 6 largest |g| in rows 7, 6.
    live = live_neurons(active, magnitude, gradient, 20, 6, 32, 0.3, torch.Generator().manual_seed(0))
    assert live.tolist() == [False, False, False, True, True, True, True, True]


def test_enough_rows_stay_live_to_hold_the_budget_within_a_row() -> None:
    active, magnitude, gradient = _layer()
    # Only rows 6 and 7 salient, but a budget of 40 needs 40 // 8 + 1 = 6 live rows (fan-in < 8).
    live = live_neurons(active, magnitude, gradient, 8, 0, 40, 1.0, torch.Generator().manual_seed(0))
    assert int(live.sum()) >= 6 and live[6] and live[7]
    assert fan_in(40, int(live.sum()), 8) < 8


def test_gamma_sal_zero_ablates_nothing() -> None:
    active, magnitude, gradient = _layer()
    assert live_neurons(active, magnitude, gradient, 20, 6, 32, 0.0, torch.Generator()).all()
