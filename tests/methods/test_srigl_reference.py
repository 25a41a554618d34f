"""SRigL's reference behaviours as parameters (calgaryml/condensed-sparsity): each against a
restatement of what the reference does, on small layers and the micro ViT."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import dstbench
from dstbench.dst.masked.constant_fan_in import live_neurons
from dstbench.dst.update_schedule import UpdateSchedule
from tests.conftest import ADAMW, SGD, micro_batches, micro_vit

LAYER = "blocks.0.mlp.fc1.weight"


def _srigl(optimizer: dict = ADAMW, **params: Any) -> dstbench.Method:
    params = {"delta_t": 3, "t_end": 11, **params}  # updates at steps 3, 6 and 9
    return dstbench.create_method("srigl", micro_vit(), density=0.2, total_steps=12, optimizer=optimizer, **params)


def _reference_ablation(counts: list[int], n_ones: int, columns: int, gamma_sal: float, k0: int) -> list[bool]:
    """condensed-sparsity's `_get_neurons_to_ablate`, restated: the threshold (an absolute count from
    1 up, else a fraction of k0, at least 1), lowered to the saliency of the neuron at index
    `min_neurons` = ceil(n_ones / columns) in descending order; a neuron below it is ablated."""
    threshold = gamma_sal if gamma_sal >= 1 else max(1, int(gamma_sal * k0))
    min_neurons = n_ones // columns + (0 if n_ones % columns == 0 else 1)
    ordered = sorted(counts, reverse=True)
    if ordered[min_neurons] < threshold:
        threshold = ordered[min_neurons]
    return [c >= threshold for c in counts]


@pytest.mark.parametrize("gamma_sal", [0.3, 0.9, 1.0, 2.0, 3.5])
def test_ablation_follows_the_reference_including_an_absolute_count(gamma_sal: float) -> None:
    generator = torch.Generator().manual_seed(0)
    rows, columns, k = 12, 10, 3
    active = torch.zeros(rows, columns, dtype=torch.bool)
    for row in range(rows):
        active[row, torch.randperm(columns, generator=generator)[:k]] = True
    magnitude = torch.rand(rows, columns, generator=generator) * active
    gradient = torch.rand(rows, columns, generator=generator)
    n_active, n_drop = rows * k, 10
    n_keep = n_active - n_drop
    live = live_neurons(active, magnitude, gradient, n_keep, n_drop, rows * k, gamma_sal, torch.Generator().manual_seed(1))
    salient = torch.zeros(rows * columns, dtype=torch.bool)
    salient[magnitude.flatten().argsort(descending=True)[:n_keep]] = True  # distinct scores: no ties
    salient[gradient.flatten().argsort(descending=True)[:n_drop]] = True
    counts = salient.view(rows, columns).sum(dim=1).tolist()
    assert live.tolist() == _reference_ablation(counts, n_active, columns, gamma_sal, k)


def test_a_fractional_t_end_is_truncated_as_the_reference_does() -> None:
    # 0.75 x 1001 = 750.75: the reference's T_end = int(750.75) = 750 ends before step 750's update.
    truncated = UpdateSchedule(delta_t=50, t_end=0.75, drop_fraction=0.3, total_steps=1001, truncate_t_end=True)
    rounded = UpdateSchedule(delta_t=50, t_end=0.75, drop_fraction=0.3, total_steps=1001)
    assert truncated.t_end_step == 750 and truncated.update_steps()[-1] == 700
    assert rounded.t_end_step == 751 and rounded.update_steps()[-1] == 750
    assert truncated.fraction(100) == pytest.approx(0.3 / 2 * (1 + math.cos(100 * math.pi / 750)))
    method = dstbench.create_method("srigl", micro_vit(), density=0.2, total_steps=1001, optimizer=ADAMW, delta_t=50)
    assert method.schedule.t_end_step == 750
    assert dstbench.create_method("srigl", micro_vit(), density=0.2, total_steps=1001, optimizer=ADAMW, delta_t=50,
                                  t_end_truncated=False).schedule.t_end_step == 751


@pytest.mark.parametrize("step_on_update", [False, True])
def test_step_on_update_takes_the_optimizer_step_before_the_update(step_on_update: bool) -> None:
    # The reference (`if pruner(): optimizer.step()`) takes no optimizer step on an update step: a
    # weight active before and after the update keeps its value; with step_on_update it moves.
    method = _srigl(SGD, step_on_update=step_on_update, gamma_sal=0.0)
    batches = micro_batches()
    method.train_segment(batches, 2)
    before_weight = method.mask_set.weights[LAYER].detach().clone()
    before_mask = method.mask_set.active(LAYER)
    method.train_segment(batches, 1)  # step 3: the update
    kept = before_mask & method.mask_set.active(LAYER)
    moved = ~torch.isclose(method.mask_set.weights[LAYER][kept], before_weight[kept])
    assert method.topology_updates == 1
    assert bool(moved.any()) == step_on_update
    assert method.result_extras()["reference_behaviour"]["step_on_update"] is step_on_update


def test_grad_accumulation_grows_by_the_mean_dense_gradient_of_the_last_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    method = _srigl(SGD, grad_accumulation=2, gamma_sal=0.0)
    seen: dict[int, torch.Tensor] = {}
    weight = method.mask_set.weights[LAYER]
    weight.register_hook(lambda grad: seen.__setitem__(method.step + 1, grad.detach().clone()))  # the dense gradient, every step
    grown_by: list[torch.Tensor] = []
    original = type(method.grow).__call__

    def spy(self: Any, w: torch.Tensor, grad: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if w.shape == weight.shape and len(grown_by) == 0:
            grown_by.append(grad.detach().clone())
        return original(self, w, grad, generator)

    monkeypatch.setattr(type(method.grow), "__call__", spy)
    method.train_segment(micro_batches(), 3)  # the update at step 3 reads steps 2 and 3
    assert method.topology_updates == 1 and method.accumulating(2) and not method.accumulating(1)
    torch.testing.assert_close(grown_by[0], (seen[2] + seen[3]) / 2)
    assert method.accumulated == {}  # the window's sum is spent by its update


def test_a_checkpoint_inside_an_accumulation_window_keeps_its_partial_sum() -> None:
    import copy

    method = _srigl(SGD, grad_accumulation=2, gamma_sal=0.0)
    batches = micro_batches()
    method.train_segment(batches, 2)  # step 2 opens the window of the update at step 3
    assert method.accumulated
    resumed = _srigl(SGD, grad_accumulation=2, gamma_sal=0.0)
    resumed.load_state_dict(copy.deepcopy(method.state_dict()))
    assert all(torch.equal(resumed.accumulated[n], g) for n, g in method.accumulated.items())
    for m in (method, resumed):
        m.train_segment(micro_batches(seed=4), 1)  # step 3: the update
    assert all(torch.equal(a, b) for a, b in zip(method.masks().values(), resumed.masks().values()))


def test_grad_accumulation_runs_on_csr_alike() -> None:
    masked, csr = _srigl(grad_accumulation=2, gamma_sal=0.0), _srigl(grad_accumulation=2, gamma_sal=0.0, execution="csr")
    for method in (masked, csr):
        method.train_segment(micro_batches(), 7)
    assert all(torch.equal(a, b) for a, b in zip(masked.masks().values(), csr.masks().values()))


def test_reset_state_momentum_keeps_adams_moments_and_zeroes_only_sgds_momentum() -> None:
    # The reference zeroes SGD's momentum_buffer where a weight is masked and leaves Adam's moments:
    # at a dropped position they stay (and decay), and a regrown weight starts from them.
    for reset_state, moments_left in (("all", False), ("momentum", True)):
        method = _srigl(ADAMW, reset_state=reset_state)
        method.train_segment(micro_batches(), 5)  # one update, at step 3
        weight = method.mask_set.weights[LAYER]
        inactive = ~method.mask_set.active(LAYER)
        exp_avg = method.optimizer.state[weight]["exp_avg"]
        assert bool((exp_avg[inactive] != 0).any()) == moments_left
        assert bool((weight[inactive] == 0).all())  # the weights stay masked after every step either way
    sgd = _srigl(SGD, reset_state="momentum")
    sgd.train_segment(micro_batches(), 5)
    weight = sgd.mask_set.weights[LAYER]
    assert bool((sgd.optimizer.state[weight]["momentum_buffer"][~sgd.mask_set.active(LAYER)] == 0).all())


@pytest.mark.parametrize("mode", ["speed", "accuracy"])
def test_the_reference_parameters_run_in_speed_and_accuracy_modes(mode: str, tmp_path: Any) -> None:
    from dstbench.execution.case_session import CaseTask, run_case
    from dstbench.suite.loading import parse_suite
    from dstbench.suite.plan import expand_cases
    from tests.conftest import micro_suite

    methods = [{"name": "srigl", "params": {"delta_t": 5, "step_on_update": True, "grad_accumulation": 4}}]
    if mode == "accuracy":  # a generated workload with a test split (tests/data/test_teacher.py's)
        model = {**micro_suite()["model"], "img_size": 8, "patch_size": 4, "in_chans": 1, "num_classes": 4}
        data = {"name": "teacher", "teacher": {"classes": 4, "train_size": 64, "test_size": 32}}
        suite = parse_suite(micro_suite(methods=methods, densities=[0.2], mode=mode, model=model, data=data))
    else:  # segments long enough to hold the updates at steps 5 and 10
        timing = {"warmup_steps": 2, "segment_steps": 5, "segments": 3, "total_steps": 40}
        suite = parse_suite(micro_suite(methods=methods, densities=[0.2], mode=mode, timing=timing))
    [case] = expand_cases(suite)
    result = run_case(CaseTask(suite.model_dump(mode="json"), "s.yaml", case.to_dict(), str(tmp_path)))
    assert result.status == "ok", result.error
    updates = result.topology_updates if mode == "speed" else result.method_extras["topology_updates_total"]
    assert updates > 0
    assert result.method_extras["reference_behaviour"] == {
        "step_on_update": True, "grad_accumulation": 4, "reset_state": "all", "t_end_truncated": True}
