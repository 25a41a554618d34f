"""`execution: csr` trains as `masked` does (same losses, masks, density) for every masked method,
stores only what it holds, resumes from checkpoints; and the executions' refusals."""

from __future__ import annotations

import copy
import types
from typing import Any

import pytest
import torch

import dstbench
from dstbench.dst.masked.csr import CsrLinear, CsrMaskSet
from dstbench.measure.trackers import training_state_bytes
from tests.conftest import ADAMW, SGD, micro_batches, micro_vit
from tests.dst.masked.helpers import MASKED_METHODS, micro_method

STEPS = 10  # updates at steps 3, 6 and 9

VARIANTS = [(name, {}) for name in MASKED_METHODS] + [("mest", {"ems": True, "grad_lambda": 0.5})]


def _train(method: dstbench.Method, steps: int = STEPS, seed: int = 0) -> tuple[list[float], list[dict[str, torch.Tensor]]]:
    batches = micro_batches(seed=seed)
    losses, masks = [], []
    for _ in range(steps):
        losses.append(method.train_segment(batches, 1).loss)
        masks.append(method.masks())
    return losses, masks


@pytest.mark.parametrize("name, params", VARIANTS, ids=[f"{n}{'-' + '-'.join(p) if p else ''}" for n, p in VARIANTS])
def test_csr_trains_as_masked_does(name: str, params: dict[str, Any]) -> None:
    masked = micro_method(name, ADAMW, **params)
    csr = micro_method(name, ADAMW, execution="csr", **params)
    assert isinstance(csr.mask_set, CsrMaskSet) and isinstance(csr.model.blocks[0].mlp.fc1, CsrLinear)
    losses_masked, masks_masked = _train(masked)
    losses_csr, masks_csr = _train(csr)
    for step, (a, b) in enumerate(zip(losses_masked, losses_csr), 1):
        assert abs(a - b) <= 1e-3 * abs(a), f"step {step}: loss {b} vs {a}"
    for step, (a, b) in enumerate(zip(masks_masked, masks_csr), 1):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), f"step {step}: masks differ"
    assert csr.topology_updates == masked.topology_updates == 3
    # Exact density: what the masks hold is what is stored.
    assert csr.density() == masked.density()
    assert csr.mask_set.total_active() == sum(layer.values.numel() for layer in csr.mask_set.layers.values())


def test_csr_with_sgd_and_fused_norms_trains_as_masked_does() -> None:
    masked = micro_method("rigl", SGD, fuse_norms=True)
    csr = micro_method("rigl", SGD, fuse_norms=True, execution="csr")
    (losses_masked, masks_masked), (losses_csr, masks_csr) = _train(masked), _train(csr)
    assert max(abs(a - b) / abs(a) for a, b in zip(losses_masked, losses_csr)) <= 1e-3
    assert all(torch.equal(masks_masked[-1][k], masks_csr[-1][k]) for k in masks_masked[-1])


def test_the_dense_gradient_is_computed_on_update_steps_only(monkeypatch: pytest.MonkeyPatch) -> None:
    flagged: list[tuple[int, bool]] = []
    original = CsrLinear.weight_grad

    def spy(self: CsrLinear, *args: Any) -> torch.Tensor:
        flagged.append((method.step + 1, self.want_dense_grad))
        return original(self, *args)

    monkeypatch.setattr(CsrLinear, "weight_grad", spy)
    method = micro_method("rigl", ADAMW, execution="csr")
    _train(method, steps=4)
    assert {step for step, dense in flagged if dense} == {3}
    assert {step for step, _ in flagged} == {1, 2, 3, 4}
    flagged.clear()
    method = micro_method("set", ADAMW, execution="csr")  # grows at random: never needs it
    _train(method, steps=4)
    assert flagged and not any(dense for _, dense in flagged)


def test_state_bytes_count_only_what_csr_stores() -> None:
    masked = micro_method("rigl", ADAMW)
    csr = micro_method("rigl", ADAMW, execution="csr")
    _train(masked, steps=1)
    _train(csr, steps=1)
    full, sparse = training_state_bytes(masked), training_state_bytes(csr)
    layers = csr.mask_set.layers.values()
    nnz = sum(layer.nnz for layer in layers)
    prunable = csr.mask_set.numel()
    assert sparse["parameters"] == full["parameters"] - 4 * prunable + 4 * nnz
    assert sparse["gradients"] == full["gradients"] - 4 * prunable + 4 * nnz
    assert sparse["optimizer_state"] == full["optimizer_state"] - 2 * 4 * prunable + 2 * 4 * nnz  # AdamW moments
    indices = sum(t.numel() * t.element_size() for layer in layers for t in layer.index_buffers().values())
    assert sparse["method_buffers"] == indices
    assert "blocks.0.attn.qkv.weight" not in dict(csr.model.named_parameters())


@pytest.mark.parametrize("name", ["rigl", "chase"])
def test_csr_checkpoint_resumes_where_it_stopped(name: str) -> None:
    method = micro_method(name, ADAMW, execution="csr")
    _train(method, steps=4)  # past an update (chase: a soft budget, so the values were resized)
    state = copy.deepcopy(method.state_dict())
    resumed = micro_method(name, ADAMW, execution="csr")
    resumed.load_state_dict(state)
    assert resumed.mask_set.counts == method.mask_set.counts
    losses, masks = _train(method, steps=4, seed=3)
    losses_resumed, masks_resumed = _train(resumed, steps=4, seed=3)
    assert losses_resumed == losses
    assert all(torch.equal(masks[-1][k], masks_resumed[-1][k]) for k in masks[-1])


def test_a_checkpoint_loads_only_into_its_own_execution() -> None:
    masked = micro_method("rigl", ADAMW)
    _train(masked, steps=4)
    with pytest.raises(ValueError, match="made with execution 'masked'; this case runs 'csr'"):
        micro_method("rigl", ADAMW, execution="csr").load_state_dict(copy.deepcopy(masked.state_dict()))


def test_static_checks_its_prunable_pattern() -> None:
    with pytest.raises(ValueError, match="prunable is not a valid regular expression"):
        dstbench.create_method("static", micro_vit(), density=0.2, total_steps=12, optimizer=ADAMW, prunable="blocks.(")


def test_execution_is_in_the_result_extras() -> None:
    extras = micro_method("rigl", ADAMW, execution="csr").result_extras()
    assert extras["execution"] == "csr" and extras["flops_basis"] == "executed"


def test_unknown_execution_is_rejected() -> None:
    with pytest.raises(ValueError, match="execution must be one of"):
        micro_method("rigl", ADAMW, execution="bsr")


def test_csr_refuses_distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dstbench.dst.masked.backends.distributed", types.SimpleNamespace(is_distributed=lambda: True))
    with pytest.raises(ValueError, match="does not run distributed"):
        micro_method("rigl", ADAMW, execution="csr")


@pytest.mark.parametrize(
    "name, params, fragment",
    [("chase", {}, "whole channels"), ("mest", {"ems": True}, "ems holds more")],
)
def test_methods_that_cannot_hold_2to4_refuse_it(name: str, params: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        micro_method(name, ADAMW, density=0.5, execution="semi_structured", **params)
