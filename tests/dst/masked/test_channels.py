"""Chase's channel part: cubic schedule, global threshold with floors, removal by masking."""

from __future__ import annotations

import pytest
import torch

from dstbench.dst.masked.channels import ChannelPruner, cubic_sparsity, select_with_floors
from tests.conftest import micro_vit


def test_cubic_schedule() -> None:
    assert cubic_sparsity(0, 0.5, 100) == 0.0
    assert cubic_sparsity(50, 0.5, 100) == pytest.approx(0.5 * (1 - 0.5**3))
    assert cubic_sparsity(100, 0.5, 100) == 0.5
    assert cubic_sparsity(150, 0.5, 100) == 0.5
    values = [cubic_sparsity(t, 0.4, 90) for t in range(0, 91, 10)]
    assert values == sorted(values)
    steps = [b - a for a, b in zip(values, values[1:])]
    assert steps == sorted(steps, reverse=True)  # fast early, slow late


def test_select_with_floors_is_a_global_threshold_that_respects_floors() -> None:
    scores = [torch.tensor([0.1, 0.2, 0.3, 0.4]), torch.tensor([0.5, 0.6, 0.05, 0.7])]
    keeps = [torch.ones(4, dtype=torch.bool), torch.ones(4, dtype=torch.bool)]
    generator = torch.Generator().manual_seed(0)
    removals = select_with_floors(scores, keeps, [0, 0], 3, generator)
    assert removals[0].tolist() == [True, True, False, False] and removals[1].tolist() == [False, False, True, False]
    # Layer 0 may give only 1 channel (floor 3): the rest of the global quota comes from layer 1.
    removals = select_with_floors(scores, keeps, [3, 0], 4, generator)
    assert removals[0].tolist() == [True, False, False, False]
    assert removals[1].tolist() == [True, True, True, False]
    # Removed channels are not offered again.
    keeps[1][0] = False
    removals = select_with_floors(scores, keeps, [4, 0], 1, generator)
    assert removals[1].tolist() == [False, False, True, False]


def test_groups_cover_every_block() -> None:
    pruner = ChannelPruner(micro_vit(), 0.5, 0.2, 100)
    kinds = [(g.kind, g.producer, g.consumer, g.channels, g.floor) for g in pruner.groups]
    assert ("head", "blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight", 4, int(4 * 0.5 * 0.2)) in kinds
    assert ("ffn", "blocks.1.mlp.fc1.weight", "blocks.1.mlp.fc2.weight", 256, int(256 * 0.5 * 0.2)) in kinds
    assert len(kinds) == 4


def _perturbation_changes_output(model: torch.nn.Module, param: torch.Tensor, index: tuple) -> bool:
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    model.eval()
    with torch.no_grad():
        before = model(x)
        param[index] += 10.0
        after = model(x)
        param[index] -= 10.0
    return not torch.allclose(before, after, atol=0, rtol=0)


def _mask_channels(model: torch.nn.Module, pruner: ChannelPruner) -> None:
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, live in pruner.live_masks().items():
            params[name].mul_(live)


def test_masking_a_head_removes_exactly_that_head() -> None:
    model = micro_vit()
    pruner = ChannelPruner(model, 0.5, 0.0, 100)
    group = next(g for g in pruner.groups if g.kind == "head" and g.producer.startswith("blocks.0."))
    group.keep[2] = False
    _mask_channels(model, pruner)
    qkv = model.blocks[0].attn.qkv
    head_dim, dim = 16, 64
    for section in range(3):  # q, k and v rows of head 2 no longer matter; those of head 1 do
        assert not _perturbation_changes_output(model, qkv.weight, (section * dim + 2 * head_dim + 3, 5))
        assert not _perturbation_changes_output(model, qkv.bias, (section * dim + 2 * head_dim + 3,))
        assert _perturbation_changes_output(model, qkv.weight, (section * dim + 1 * head_dim + 3, 5))
    proj = model.blocks[0].attn.proj.weight
    assert torch.all(proj[:, 2 * head_dim : 3 * head_dim] == 0)
    assert torch.all(proj[:, : 2 * head_dim] != 0)


def test_masking_an_ffn_unit_removes_exactly_that_unit() -> None:
    model = micro_vit()
    pruner = ChannelPruner(model, 0.5, 0.0, 100)
    group = next(g for g in pruner.groups if g.kind == "ffn" and g.producer.startswith("blocks.1."))
    group.keep[7] = False
    _mask_channels(model, pruner)
    mlp = model.blocks[1].mlp
    assert torch.all(mlp.fc1.weight[7] == 0) and torch.all(mlp.fc2.weight[:, 7] == 0)
    assert not _perturbation_changes_output(model, mlp.fc1.bias, (7,))
    assert _perturbation_changes_output(model, mlp.fc1.bias, (8,))


def test_remove_follows_the_schedule_per_kind() -> None:
    model = micro_vit()
    pruner = ChannelPruner(model, 0.5, 0.2, 100)
    weights = dict(model.named_parameters())
    generator = torch.Generator().manual_seed(0)
    for step in (10, 40, 100):
        pruner.remove(step, weights, generator)
        target = cubic_sparsity(step, 0.5, 100)
        assert pruner.sparsity("ffn") == pytest.approx(1 - round((1 - target) * 512) / 512)
        assert pruner.sparsity("head") == pytest.approx(1 - round((1 - target) * 8) / 8)


def test_umm_counts_masked_weights_as_zero() -> None:
    model = micro_vit()
    pruner = ChannelPruner(model, 0.5, 0.2, 100)
    group = next(g for g in pruner.groups if g.kind == "ffn")
    fc1 = dict(model.named_parameters())[group.producer].detach().clone()
    before = group.umm(fc1)
    fc1[3, : fc1.shape[1] // 2] = 0
    after = group.umm(fc1)
    assert after[3] < before[3] and torch.equal(after[4], before[4])
    assert after[3] == pytest.approx(fc1[3].abs().sum() / fc1.shape[1])
