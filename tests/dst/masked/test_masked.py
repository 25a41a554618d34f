"""Behaviour every masked method shares: zeros stay zero, budgets hold, updates follow the schedule,
the seed fixes the topology, checkpoints keep the masks, and a suite runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

import dstbench
from dstbench.execution.orchestrator import run_suite
from dstbench.dst.masked.distributions import target_active
from dstbench.measure.trackers.memory import training_state_bytes
from tests.conftest import ADAMW, SGD, micro_batches, micro_suite, micro_vit
from tests.dst.masked.helpers import MASKED_METHODS, assert_zero_where_masked, micro_method, run_steps, state_tensors


def test_registered_as_masked() -> None:
    for name in MASKED_METHODS:
        assert dstbench.method_info(name).kind == "masked"


NESTEROV = {**SGD, "nesterov": True, "weight_decay": 0.01}


@pytest.mark.parametrize("optimizer", [SGD, NESTEROV, ADAMW], ids=["sgd", "nesterov", "adamw"])
@pytest.mark.parametrize("name", MASKED_METHODS)
def test_masked_weights_and_state_are_zero_after_every_step(name: str, optimizer: dict) -> None:
    method = micro_method(name, optimizer)
    updates = 0
    for step, before, after in run_steps(method, 12):
        assert_zero_where_masked(method, after)
        if method.update_due(step):
            updates += 1
            grown = {n: after[n] & ~before[n] for n in after}
            # Chase's last update grows nothing: its soft extra is 0 there, so it only prunes.
            if not (name == "chase" and step == method.schedule.last_update_step):
                assert sum(int(g.sum()) for g in grown.values()) > 0, f"{name} grew nothing at step {step}"
            weights = dict(method.model.named_parameters())
            for n, mask in grown.items():  # grown weights start at 0 with zero state
                assert torch.all(weights[n][mask] == 0)
                for value in state_tensors(method, weights[n]):
                    assert torch.all(value[mask] == 0)
    assert updates == 3


@pytest.mark.parametrize("name", ["set", "rigl", "mest"])
def test_each_layer_holds_its_allotment_after_every_update(name: str) -> None:
    method = micro_method(name, ADAMW, density=0.1)
    total = sum(w.numel() for w in method.prunable().values())
    assert sum(method.allotment.values()) == target_active(total, 0.1)
    changed = 0
    for step, before, after in run_steps(method, 12):
        counts = {n: int(m.sum()) for n, m in after.items()}
        assert counts == method.allotment
        assert method.density() == pytest.approx(target_active(total, 0.1) / total)
        changed += any(not torch.equal(before[n], after[n]) for n in after)
    assert changed == 3


@pytest.mark.parametrize("name", MASKED_METHODS)
def test_update_count_equals_the_schedule(name: str) -> None:
    method = micro_method(name, SGD, total_steps=40, delta_t=4, t_end=0.5)
    stats = method.train_segment(micro_batches(), 40)
    assert method.schedule.update_steps() == [4, 8, 12, 16]  # t_end (step 20) is exclusive
    assert stats.topology_updates == method.topology_updates == 4
    assert stats.topology_ms > 0 and set(stats.topology_detail_ms) == {"scoring", "prune_grow"}


@pytest.mark.parametrize("name", MASKED_METHODS)
def test_same_seed_gives_the_same_masks_update_by_update(name: str) -> None:
    runs = [micro_method(name, ADAMW, seed=seed) for seed in (7, 7, 8)]
    trajectories = [[after for _, _, after in run_steps(m, 10, micro_batches())] for m in runs]
    for same, other in zip(trajectories[0], trajectories[1]):
        assert all(torch.equal(same[n], other[n]) for n in same)
    last, different = trajectories[0][-1], trajectories[2][-1]
    assert any(not torch.equal(last[n], different[n]) for n in last)


@pytest.mark.parametrize("name", MASKED_METHODS)
def test_checkpoint_round_trip_keeps_the_masks(name: str) -> None:
    method = micro_method(name, ADAMW)
    method.train_segment(micro_batches(), 4)
    state = method.state_dict()
    restored = micro_method(name, ADAMW, seed=99)
    restored.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(method.masks().values(), restored.masks().values()))
    assert restored.density() == method.density()
    # Both continue identically (same data, same generator state).
    batches_a, batches_b = micro_batches(seed=3), micro_batches(seed=3)
    method.train_segment(batches_a, 5)
    restored.train_segment(batches_b, 5)
    assert all(torch.equal(a, b) for a, b in zip(method.masks().values(), restored.masks().values()))


@pytest.mark.parametrize("name", MASKED_METHODS)
def test_weights_and_state_are_rezeroed_only_after_a_step_on_the_dense_gradient(name: str) -> None:
    # An ordinary step masks the gradient and nothing else (the optimizer keeps the zeros); only a
    # step that took the dense gradient for an update that follows it (Chase's) needs the fix-up.
    method = micro_method(name, ADAMW)
    enforced = []
    enforce = method.mask_set.enforce

    def spy() -> None:
        enforced.append(method.step + 1)  # called inside the step being taken
        enforce()

    method.mask_set.enforce = spy  # type: ignore[method-assign]
    list(run_steps(method, 12))
    dense_grad_steps = [s for s in (3, 6, 9) if method.grow.needs_dense_grad and not method.update_replaces_step]
    assert enforced == dense_grad_steps
    assert (name == "chase") == bool(dense_grad_steps)


@pytest.mark.parametrize("name", MASKED_METHODS + ["static"])
def test_masked_state_is_dense_state_plus_one_byte_per_prunable_weight(name: str) -> None:
    """Exact: the same parameters, gradients and optimizer state as dense, plus a bool mask per
    prunable weight, plus the method's other buffers (Chase: one bool per channel)."""
    dense = dstbench.create_method("dense", micro_vit(), density=1.0, total_steps=12, optimizer=ADAMW)
    params = {} if name == "static" else {"delta_t": 3, "t_end": 11}
    method = dstbench.create_method(name, micro_vit(), density=0.2, total_steps=12, optimizer=ADAMW, **params)
    for m in (dense, method):  # one step builds the optimizer state
        m.train_segment(micro_batches(), 1)
    prunable = sum(w.numel() for w in method.prunable().values())
    channels = sum(g.channels for g in method.channels.groups) if name == "chase" else 0
    assert training_state_bytes(method)["method_buffers"] == prunable + channels
    assert training_state_bytes(method)["total"] == training_state_bytes(dense)["total"] + prunable + channels


def test_masks_are_bool_copies() -> None:
    method = micro_method("rigl", ADAMW)
    masks = method.masks()
    assert all(m.dtype == torch.bool for m in masks.values())
    next(iter(masks.values())).fill_(True)  # a copy: the method's masks are unchanged
    assert method.density() < 0.5


def test_a_checkpoint_load_zeroes_masked_positions() -> None:
    method = micro_method("set", ADAMW)
    method.train_segment(micro_batches(), 2)
    state = method.state_dict()
    name = next(iter(method.masks()))
    state["model"][name] = state["model"][name] + 1.0  # nonzero everywhere, masked positions too
    restored = micro_method("set", ADAMW)
    restored.load_state_dict(state)
    assert_zero_where_masked(restored, restored.masks())


def test_invalid_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="distribution"):
        micro_method("rigl", SGD, distribution="snip")
    with pytest.raises(ValueError, match="drop_fraction"):
        micro_method("set", SGD, drop_fraction=1.5)
    with pytest.raises(TypeError, match="unknown parameter"):
        micro_method("rigl", SGD, death_rate=0.1)


def test_a_suite_runs_every_masked_method(tmp_path: Path) -> None:
    methods = [{"name": name, "params": {"delta_t": 2}} for name in MASKED_METHODS]
    methods[-1]["params"]["death_rate"] = 0.0  # Chase's soft budget would sit above the target
    suite = micro_suite(methods=methods, densities=[0.1], timing={"warmup_steps": 2, "segment_steps": 3, "segments": 2})
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    run_dir = run_suite(path, out=tmp_path / "runs")
    results = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert sorted(r["method"] for r in results) == sorted(MASKED_METHODS)
    for result in results:
        assert result["status"] == "ok", result["error"]
        assert abs(result["density_achieved"] - 0.1) <= 0.01
        assert result["topology_updates"] >= 1
        assert result["state_breakdown"]["method_buffers"] > 0
