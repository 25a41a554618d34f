"""The shared training step: hook order, update steps, precision, checkpoints of the base state."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import dstbench
from dstbench.dst.method_base import Method
from tests.conftest import ADAMW, SGD, micro_batches, micro_vit


class Recorder(Method):
    """Records the hooks it sees; an update is due every 3rd step."""

    @dataclasses.dataclass
    class Params:
        every: int = 3

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, int]] = []

    def after_backward(self, step: int) -> None:
        assert all(p.grad is not None for p in self.model.parameters() if p.requires_grad)
        self.calls.append(("after_backward", step))

    def before_optimizer_step(self, step: int) -> None:
        self.calls.append(("before_optimizer_step", step))

    def after_optimizer_step(self, step: int) -> None:
        self.calls.append(("after_optimizer_step", step))

    def update_due(self, step: int) -> bool:
        return step % self.params.every == 0

    def update_topology(self, step: int) -> None:
        assert not torch.is_grad_enabled()
        self.calls.append(("update_topology", step))


class ReplacingRecorder(Recorder):
    update_replaces_step = True


def make(cls: type[Method] = Recorder, **kwargs):  # type: ignore[no-untyped-def]
    return cls(micro_vit(), density=0.5, total_steps=100, optimizer=kwargs.pop("optimizer", ADAMW), **kwargs)


def test_train_segment_runs_steps_and_reports_them() -> None:
    method = make()
    stats = method.train_segment(micro_batches(), 4)
    assert stats.steps == 4 and stats.images == 32 and math.isfinite(stats.loss)
    assert stats.topology_updates == 1 and stats.topology_ms >= 0
    assert method.step == 4
    # A second segment continues the step count and reports only its own updates.
    stats = method.train_segment(micro_batches(seed=1), 3)
    assert method.step == 7 and stats.topology_updates == 1 and method.topology_updates == 2


def test_hook_order_with_an_update_after_the_step() -> None:
    method = make()
    method.train_segment(micro_batches(), 3)
    assert method.calls[-4:] == [
        ("after_backward", 3),
        ("before_optimizer_step", 3),
        ("after_optimizer_step", 3),
        ("update_topology", 3),
    ]


def test_an_update_can_replace_the_optimizer_step() -> None:
    method = make(ReplacingRecorder)
    method.train_segment(micro_batches(), 2)
    before = [p.detach().clone() for p in method.model.parameters()]
    method.train_segment(micro_batches(seed=5), 1)  # step 3: update instead of the optimizer step
    assert method.calls[-2:] == [("after_backward", 3), ("update_topology", 3)]
    assert all(torch.equal(a, b) for a, b in zip(before, method.model.parameters()))
    assert all(p.grad is None for p in method.model.parameters())


def test_params_are_parsed_and_unknown_ones_rejected() -> None:
    assert make(every=5).params.every == 5
    every = make(every=5.0).params.every  # YAML's 5.0 (or 5e0) names the int 5
    assert every == 5 and type(every) is int
    with pytest.raises(TypeError, match=r"unknown parameter\(s\) \['evry'\] \(allowed: every\)"):
        make(evry=5)


@pytest.mark.parametrize("bad", [dict(density=0.0), dict(density=1.5), dict(total_steps=0), dict(precision="fp8")])
def test_invalid_arguments(bad: dict) -> None:
    kwargs = dict(density=0.5, total_steps=10, optimizer=ADAMW) | bad
    with pytest.raises(ValueError):
        Recorder(micro_vit(), **kwargs)


def test_dense_trains_and_reports_full_density() -> None:
    method = dstbench.create_method("dense", micro_vit(), density=1.0, total_steps=10, optimizer=SGD)
    losses = [method.train_segment(micro_batches(seed=0, batch_size=16), 1).loss for _ in range(1)]
    batch = [next(micro_batches(seed=0, batch_size=16))] * 30
    losses += [method.train_segment(iter(batch), 10).loss for _ in range(3)]
    assert losses[-1] < losses[0]  # memorises one batch
    assert method.density() == 1.0
    assert isinstance(method.optimizer, torch.optim.SGD)


def test_model_and_optimizer_are_the_live_objects() -> None:
    method = make()
    params = {id(p) for group in method.optimizer.param_groups for p in group["params"]}
    assert params == {id(p) for p in method.model.parameters()}
    # Decay on matrices only, as timm groups them: not on biases, norms, tokens or position embedding.
    decay, no_decay = method.optimizer.param_groups
    model = method.model
    assert all(p.ndim >= 2 for p in decay["params"])
    undecayed = {id(p) for p in no_decay["params"]}
    assert id(model.cls_token) in undecayed and id(model.pos_embed) in undecayed
    assert all(p.ndim <= 1 or id(p) in {id(model.cls_token), id(model.pos_embed)} for p in no_decay["params"])
    assert no_decay["weight_decay"] == 0.0


def test_lr_scheduler_is_stepped_after_each_optimizer_step() -> None:
    method = make()
    method.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(method.optimizer, lambda step: 1.0 / (1 + step))
    method.train_segment(micro_batches(), 2)
    assert method.optimizer.param_groups[0]["lr"] == pytest.approx(ADAMW["lr"] / 3)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_trains_under_autocast(precision: str) -> None:
    method = make(precision=precision)
    if precision == "fp16":
        assert method.scaler is not None
    stats = method.train_segment(micro_batches(), 3)
    assert math.isfinite(stats.loss)
    assert all(p.dtype == torch.float32 for p in method.model.parameters())


def test_state_dict_round_trip_continues_identically() -> None:
    first = make()
    first.train_segment(micro_batches(), 4)
    state = first.state_dict()
    second = make()
    second.load_state_dict(state)
    assert second.step == 4 and second.topology_updates == 1
    first.train_segment(micro_batches(seed=9), 2)
    second.train_segment(micro_batches(seed=9), 2)
    for a, b in zip(first.model.parameters(), second.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_checkpoint_of_another_method_is_refused() -> None:
    state = make().state_dict()
    with pytest.raises(ValueError, match="checkpoint is of method"):
        dstbench.create_method("dense", micro_vit(), density=1.0, total_steps=10, optimizer=ADAMW).load_state_dict(state)
