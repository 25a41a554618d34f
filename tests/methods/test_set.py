"""SET: magnitude prune, uniform random grow among inactive positions, update after the step."""

from __future__ import annotations

import torch

from dstbench.methods import method_info
from tests.dst.masked.helpers import LAYER, one_layer_batches, one_layer_method


def _update_once(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(active before, weights before, active after) of one update on a hand-built layer."""
    method = one_layer_method("set", seed=seed)
    weight = method.mask_set.weights[LAYER]
    active = method.masks()[LAYER]
    # Same distinct weight values for every seed, on that seed's active positions.
    values = (torch.arange(64, dtype=torch.float32).view(8, 8) + 1) * 0.01
    with torch.no_grad():
        weight.copy_(values * active)
    before = weight.detach().clone()
    with torch.no_grad():
        method.update_topology(10)
    return active, before, method.masks()[LAYER]


def test_defaults_follow_the_reference() -> None:
    info = method_info("set")
    params = info.cls.Params()
    assert (params.delta_t, params.drop_fraction, params.t_end, params.distribution) == (100, 0.3, 0.75, "erk")
    assert not info.cls.update_replaces_step  # google-research/rigl's SET updates after the step


def test_prunes_the_smallest_weights_and_grows_only_inactive_positions() -> None:
    active, before, new = _update_once(seed=0)
    n = int(32 * 0.3 * (1 + torch.cos(torch.tensor(torch.pi * 10 / 75)).item()) / 2)
    assert n >= 8
    smallest = torch.zeros_like(active)
    smallest.view(-1)[torch.where(active, before.abs(), torch.inf).flatten().argsort()[:n]] = True
    # Every active weight outside the n smallest survives; the n smallest were dropped (one may be
    # drawn again by the random grow, since dropped positions are candidates again).
    assert torch.all(new[active & ~smallest])
    grown = new & ~active
    regrown = new & smallest
    assert int(grown.sum()) + int(regrown.sum()) == n
    assert int(new.sum()) == int(active.sum()) == 32


def test_grown_positions_change_with_the_seed() -> None:
    grown = []
    for seed in (0, 1, 2):
        active, _, new = _update_once(seed)
        grown.append(new & ~active)
    assert all(int(g.sum()) > 0 for g in grown)
    assert not torch.equal(grown[0], grown[1]) and not torch.equal(grown[1], grown[2])
    again_active, _, again_new = _update_once(0)
    assert torch.equal(again_new & ~again_active, grown[0])


def test_the_update_follows_the_optimizer_step() -> None:
    method = one_layer_method("set")
    batches = one_layer_batches()
    method.train_segment(batches, 9)
    before = method.mask_set.weights[LAYER].detach().clone()
    active = method.masks()[LAYER]
    method.train_segment(batches, 1)
    new = method.masks()[LAYER]
    after = method.mask_set.weights[LAYER]
    kept = active & new
    assert method.topology_updates == 1
    assert torch.all(after[kept] != before[kept])  # the step ran on the update step
    assert torch.all(after[~new] == 0)
