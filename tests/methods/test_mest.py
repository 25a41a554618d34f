"""MEST: |w| + lambda |g| prune, random grow, no dense gradient, and the EM&S soft budget."""

from __future__ import annotations

import torch

from dstbench.methods import method_info
from tests.conftest import ADAMW, micro_batches
from tests.dst.masked.helpers import LAYER, micro_method, one_layer_batches, one_layer_method


def test_defaults_follow_the_reference() -> None:
    params = method_info("mest").cls.Params()
    assert (params.delta_t, params.drop_fraction, params.t_end, params.distribution) == (100, 0.3, 0.75, "erk")
    assert params.grad_lambda == 0.0 and params.ems is False and params.ems_extra == 0.05


def _drop_on_hand_built(grad_lambda: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    method = one_layer_method("mest", grad_lambda=grad_lambda)
    weight = method.mask_set.weights[LAYER]
    active = method.masks()[LAYER]
    generator = torch.Generator().manual_seed(0)
    values = ((torch.randperm(64, generator=generator) + 1) * 0.01).view(8, 8).float()
    # The gradient ranks the active weights the other way round from their magnitudes.
    grad = (65 - (values / 0.01)) * 0.01
    with torch.no_grad():
        weight.copy_(values * active)
    weight.grad = grad.clone()
    with torch.no_grad():
        method.update_topology(10)
    return active, values, grad, method.masks()[LAYER]


def _expected_drop(scores: torch.Tensor, active: torch.Tensor, n: int) -> torch.Tensor:
    dropped = torch.zeros_like(active)
    dropped.view(-1)[torch.where(active, scores, torch.inf).flatten().argsort()[:n]] = True
    return dropped


def test_prune_score_is_magnitude_plus_lambda_gradient() -> None:
    n = int(32 * 0.3 * (1 + torch.cos(torch.tensor(torch.pi * 10 / 75)).item()) / 2)
    for grad_lambda in (0.0, 10.0):
        active, values, grad, new = _drop_on_hand_built(grad_lambda)
        expected = _expected_drop(values + grad_lambda * grad, active, n)
        # Survivors are exactly the active weights outside the expected drop (plus random regrowth).
        assert torch.all(new[active & ~expected])
        assert int((active & ~new).sum()) <= n
        assert int((new & ~active).sum()) + int((new & expected).sum()) == n
    magnitude = _expected_drop(values, active, n)
    assert not torch.equal(magnitude, _expected_drop(values + 10.0 * grad, active, n))


def test_never_reads_a_dense_gradient() -> None:
    method = one_layer_method("mest")
    batches = one_layer_batches()
    method.train_segment(batches, 9)
    seen = {}
    update = method.update_topology

    def spy(step: int) -> None:
        seen.update(grad=method.mask_set.weights[LAYER].grad.clone(), active=method.masks()[LAYER])
        update(step)

    method.update_topology = spy  # type: ignore[method-assign]
    method.train_segment(batches, 1)
    assert torch.all(seen["grad"][~seen["active"]] == 0)


def test_ems_grows_an_extra_budget_and_prunes_back_to_the_allotment() -> None:
    method = micro_method("mest", ADAMW, density=0.1, ems=True, ems_extra=0.05)
    plans: dict[int, dict[str, tuple[int, int]]] = {}
    plan_update = method.plan_update

    def spy(step: int) -> dict[str, tuple[int, int]]:
        held = method.mask_set.counts
        plans[step] = plan = plan_update(step)
        for name, (drop, _) in plan.items():  # back below the allotment first (what was added goes)
            mutation = int(method.allotment[name] * method.schedule.fraction(step))
            assert held[name] - drop == method.allotment[name] - mutation
        return plan

    method.plan_update = spy  # type: ignore[method-assign]
    batches = micro_batches()
    for step in range(1, 13):
        method.train_segment(batches, 1)
        if not method.update_due(step):
            continue
        counts = {name: int(mask.sum()) for name, mask in method.masks().items()}
        assert sum(counts.values()) == method.soft_budget(step)
        assert all(counts[name] >= budget for name, budget in method.allotment.items())
        if step < method.schedule.last_update_step:
            assert method.soft_extra(step) > 0 and method.density() > 0.1
        else:  # the last update grows no extra: training ends at the target
            assert counts == method.allotment
    assert sorted(plans) == method.schedule.update_steps() == [3, 6, 9]
