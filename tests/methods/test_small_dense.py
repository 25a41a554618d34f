"""Small-Dense: BARTER's initial compact ViT trained densely, with nothing of BARTER's machinery."""

from __future__ import annotations

import pytest
import torch

import dstbench
from dstbench.dst.compact.compact_vit import compact_blocks
from dstbench.measure.trackers.flops import FlopCounter
from dstbench.measure.trackers.memory import training_state_bytes, unique_bytes
from tests.conftest import ADAMW, micro_batches, micro_vit


def _create(name: str, density: float = 0.3, fuse_norms: bool = False, seed: int = 0) -> dstbench.Method:
    return dstbench.create_method(
        name, micro_vit(seed), density=density, total_steps=40, optimizer=ADAMW, fuse_norms=fuse_norms, seed=seed
    )


def test_registered_as_compact_with_only_the_layout_parameter() -> None:
    info = dstbench.method_info("small_dense")
    assert info.kind == "compact" and info.cls.param_names() == ["layout"]
    assert info.cls.Params().layout == "barter"
    with pytest.raises(TypeError, match="unknown parameter"):
        dstbench.create_method("small_dense", micro_vit(), density=0.3, total_steps=4, optimizer=ADAMW, delta_t=2)


@pytest.mark.parametrize("fuse_norms", [False, True])
@pytest.mark.parametrize("density", [0.1, 0.3])
def test_same_shapes_weights_and_flops_as_barter_at_construction(density: float, fuse_norms: bool) -> None:
    small, barter = _create("small_dense", density, fuse_norms), _create("barter", density, fuse_norms)
    ours, theirs = small.model.state_dict(), barter.model.state_dict()
    assert list(ours) == list(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert [b.fuse_norms for b in compact_blocks(small.model)] == [b.fuse_norms for b in compact_blocks(barter.model)]
    assert small.density() == barter.density()
    assert small.result_extras()["budgets"] == barter.budgets()
    assert small.result_extras()["layout"] == {k: barter.history[0][k] for k in ("heads", "hidden")}
    inputs, targets = next(micro_batches())
    counts = []
    for method in (small, barter):
        with FlopCounter() as flops:
            method.train_step(inputs, targets)
        counts.append(flops.total)
    assert counts[0] == counts[1] > 0


def test_no_update_no_hooks_no_buffers_and_state_is_barters_less_its_buffers() -> None:
    small, barter = _create("small_dense"), _create("barter")
    batches = micro_batches()
    shapes = [tuple(p.shape) for p in small.model.parameters()]
    stats = small.train_segment(batches, 6)
    barter.train_segment(micro_batches(), 1)
    assert stats.topology_updates == 0 and not small.update_due(2)
    assert [tuple(p.shape) for p in small.model.parameters()] == shapes
    assert all(not p._post_accumulate_grad_hooks for p in small.model.parameters())
    assert any(p._post_accumulate_grad_hooks for p in barter.model.parameters())  # what is left out
    assert small.method_buffers() == {}
    ours, theirs = training_state_bytes(small), training_state_bytes(barter)
    assert ours["method_buffers"] == 0
    assert ours["total"] == theirs["total"] - unique_bytes(barter.method_buffers().values())


def test_an_empty_branch_is_ignored_by_ddp() -> None:
    small = _create("small_dense", density=0.1)  # 8 heads -> 1: the second block holds none
    assert [b.attn.num_heads for b in compact_blocks(small.model)] == [1, 0]
    ignored = small.ddp_ignored_parameters()
    assert "blocks.1.attn.qkv.weight" in ignored and "blocks.1.norm1.weight" in ignored
    assert "blocks.1.attn.proj.bias" not in ignored and "blocks.0.attn.qkv.weight" not in ignored


def test_checkpoint_round_trip_continues_identically() -> None:
    method = _create("small_dense")
    method.train_segment(micro_batches(), 3)
    restored = _create("small_dense", seed=5)
    restored.load_state_dict(method.state_dict())
    method.train_segment(micro_batches(seed=2), 2)
    restored.train_segment(micro_batches(seed=2), 2)
    assert all(torch.equal(a, b) for a, b in zip(method.model.parameters(), restored.model.parameters()))
