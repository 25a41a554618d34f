"""RigL: magnitude prune, dense-gradient grow, update replacing the optimizer step."""

from __future__ import annotations

import torch

import dstbench
from dstbench.methods import method_info
from tests.dst.masked.helpers import LAYER, one_layer_batches, one_layer_method


def _hand_built(method: dstbench.Method, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Distinct |w| on the active positions, distinct |g| everywhere; returns (active, w, g)."""
    generator = torch.Generator().manual_seed(seed)
    weight = method.mask_set.weights[LAYER]
    active = method.masks()[LAYER]
    signs = torch.randint(0, 2, (64,), generator=generator) * 2 - 1
    values = ((torch.randperm(64, generator=generator) + 1) * 0.01 * signs).view(8, 8).float()
    grad = ((torch.randperm(64, generator=generator) + 1) * 0.1 * -signs).view(8, 8).float()
    with torch.no_grad():
        weight.copy_(values * active)
    weight.grad = grad.clone()
    return active, weight.detach().clone(), grad


def _smallest(values: torch.Tensor, among: torch.Tensor, k: int) -> torch.Tensor:
    """Bool mask of the `k` positions of `among` with the smallest |values| (a plain sort)."""
    chosen = torch.zeros_like(among)
    scores = torch.where(among, values.abs(), torch.inf).flatten()
    chosen.view(-1)[scores.argsort()[:k]] = True
    return chosen


def _largest(values: torch.Tensor, among: torch.Tensor, k: int) -> torch.Tensor:
    chosen = torch.zeros_like(among)
    scores = torch.where(among, values.abs(), -torch.inf).flatten()
    chosen.view(-1)[scores.argsort(descending=True)[:k]] = True
    return chosen


def test_defaults_follow_the_reference() -> None:
    params = method_info("rigl").cls.Params()
    assert (params.delta_t, params.drop_fraction, params.t_end, params.distribution) == (100, 0.3, 0.75, "erk")
    assert method_info("rigl").cls.update_replaces_step


def test_hand_built_layer_prunes_smallest_weights_and_grows_largest_gradients() -> None:
    method = one_layer_method("rigl")
    active, weight, grad = _hand_built(method)
    n = int(32 * method.schedule.fraction(10))
    assert n >= 8
    dropped = _smallest(weight, active, n)
    grad[dropped] = 0.0  # so that "inactive" means the same before and after the drop
    method.mask_set.weights[LAYER].grad = grad.clone()
    grown = _largest(grad, ~active, n)
    with torch.no_grad():
        method.update_topology(10)
    new = method.masks()[LAYER]
    assert torch.equal(new, (active & ~dropped) | grown)
    after = method.mask_set.weights[LAYER]
    assert torch.all(after[grown] == 0) and torch.all(after[dropped] == 0)
    assert torch.equal(after[active & ~dropped], weight[active & ~dropped])


def test_a_pruned_weight_with_a_large_gradient_is_regrown_and_keeps_its_value() -> None:
    method = one_layer_method("rigl")
    active, weight, grad = _hand_built(method)
    smallest = _smallest(weight, active, 1)
    grad[smallest] = 1e6
    method.mask_set.weights[LAYER].grad = grad.clone()
    with torch.no_grad():
        method.update_topology(10)
    assert method.masks()[LAYER][smallest].item()
    assert method.mask_set.weights[LAYER][smallest].item() == weight[smallest].item() != 0


def test_the_update_reads_the_dense_gradient_and_replaces_the_optimizer_step() -> None:
    method = one_layer_method("rigl")
    batches = one_layer_batches()
    method.train_segment(batches, 9)
    seen = {}
    update = method.update_topology

    def spy(step: int) -> None:
        weight = method.mask_set.weights[LAYER]
        seen.update(grad=weight.grad.clone(), weight=weight.detach().clone(), active=method.masks()[LAYER])
        update(step)

    method.update_topology = spy  # type: ignore[method-assign]
    before = method.mask_set.weights[LAYER].detach().clone()
    method.train_segment(batches, 1)
    active, grad = seen["active"], seen["grad"]
    assert torch.all(grad[~active] != 0), "the update saw a masked gradient"
    assert torch.equal(seen["weight"], before), "an optimizer step ran before the update"
    new = method.masks()[LAYER]
    grown, kept = new & ~active, new & active
    n = int(grown.sum())
    assert n > 0
    # The grown positions are the top-|g| ones of the dense gradient among the inactive.
    assert torch.equal(grown, _largest(grad, ~active, n))
    after = method.mask_set.weights[LAYER]
    assert torch.equal(after[kept], before[kept])  # no optimizer step on the update step
