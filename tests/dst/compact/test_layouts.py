"""The compact ViT's starting layouts: BARTER's (budgets spread over the blocks) and the uniform
one (every block alike, the embedding kept, the parameter budget as close as whole units allow)."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

import torch

from dstbench.dst.compact.compact_vit import (
    barter_layout, budgets, compact_vit, full_prunable_numel, layout_density, spread, topology, uniform_layout,
)
from dstbench.dst.update_schedule import round_half_up
from dstbench.suite.loading import read_yaml
from dstbench.suite.sweep import point_data, sweep_values
from dstbench.models.timm_models import create_vit, prunable_weights
from tests.conftest import micro_vit

SMOKE = {"img_size": 32, "patch_size": 4, "num_classes": 10, "embed_dim": 128, "depth": 4, "num_heads": 8}
VIT_SMALL = {"img_size": 32, "patch_size": 4, "num_classes": 100}


def _held(model, density: float, layout: str) -> tuple[int, int]:
    compact = compact_vit(copy.deepcopy(model), density, layout=layout)
    return sum(w.numel() for w in prunable_weights(compact).values()), full_prunable_numel(compact)


def test_barter_layout_is_the_budgets_spread_over_the_blocks() -> None:
    model = micro_vit()  # 2 blocks of 4 heads, 256 channels
    for density in (0.1, 0.3, 0.5):
        heads, hidden = budgets(model, density)
        assert barter_layout(model, density) == (spread(heads, [4, 4]), spread(hidden, [256, 256]))
    assert topology(compact_vit(micro_vit(), 0.3)) == topology(compact_vit(micro_vit(), 0.3, layout="barter"))


def _weights(model, heads: list[int], hidden: list[int]) -> int:
    return sum(4 * b.attn.qkv.in_features * b.attn.head_dim * h + 2 * b.attn.qkv.in_features * c
               for b, h, c in zip(model.blocks, heads, hidden))


@pytest.mark.parametrize("shape", [
    {"embed_dim": 64, "depth": 4, "num_heads": 4},  # cpu_accuracy's: a head weighs 32 channels
    {"embed_dim": 64, "depth": 6, "num_heads": 4},  # barter_ablation's
    {"embed_dim": 128, "depth": 4, "num_heads": 8},  # cpu_smoke's
    {"embed_dim": 96, "depth": 3, "num_heads": 3, "mlp_ratio": 2.0},
    {"embed_dim": 384, "depth": 12, "num_heads": 6},  # ViT-Small
])
def test_barter_channels_absorb_the_heads_rounding(shape: dict) -> None:
    """H rounds d x heads, halves up; C is the channel count whose weights bring the total closest
    to d x the full count (one channel more or fewer is no closer), ties to fewer."""
    with torch.device("meta"):
        model = create_vit("vit_tiny_patch16_224", img_size=32, patch_size=4, num_classes=10, **shape)
    caps_h, caps_c = [b.attn.num_heads for b in model.blocks], [b.mlp.fc1.out_features for b in model.blocks]
    full = _weights(model, caps_h, caps_c)
    for density in (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9):
        heads, hidden = budgets(model, density)
        assert heads == round_half_up(density * sum(caps_h))
        target = density * full

        def miss(c: int) -> float:
            return abs(_weights(model, spread(heads, caps_h), spread(c, caps_c)) - target)

        assert miss(hidden) <= min(miss(max(0, hidden - 1)), miss(min(sum(caps_c), hidden + 1)))
        assert miss(hidden) <= shape["embed_dim"] or hidden == 0  # half a channel's 2 x dim weights
        assert barter_layout(model, density) == (spread(heads, caps_h), spread(hidden, caps_c))


@pytest.mark.parametrize("suite", ["cpu_smoke", "cpu_accuracy", "barter_ablation", "l40_vit"])
def test_the_committed_suites_vits_hold_barters_density_within_0_005(suite: str) -> None:
    data = read_yaml(Path(__file__).parents[3] / "suites" / f"{suite}.yaml")
    points = [point_data(data, values) for values in sweep_values(data.get("sweep") or {}, data.get("sweep_mode", "product"))]
    for point in points or [data]:
        spec = dict(point["model"])
        with torch.device("meta"):
            model = create_vit(spec.pop("name"), **spec)
        for density in point["densities"]:
            assert abs(layout_density(model, *barter_layout(model, density)) - density) < 0.005, (spec, density)


# Heads per block by hand: round(d x heads), at least 1 (smoke: 8 heads; ViT-Small: 6).
HEADS = {
    "smoke": {0.05: 1, 0.1: 1, 0.3: 2, 0.5: 4, 0.7: 6},  # 0.4 -> 0 -> 1, 0.8, 2.4, 4, 5.6
    "vit_small": {0.05: 1, 0.1: 1, 0.3: 2, 0.5: 3, 0.7: 4},  # 0.3 -> 0 -> 1, 0.6, 1.8, 3, 4.2
}


@pytest.mark.parametrize("spec", [SMOKE, VIT_SMALL], ids=["smoke", "vit_small"])
@pytest.mark.parametrize("density", [0.05, 0.1, 0.3, 0.5, 0.7])
def test_uniform_layout_is_the_same_in_every_block_and_closest_to_the_budget(spec: dict, density: float) -> None:
    name = "vit_tiny_patch16_224" if spec is SMOKE else "vit_small_patch16_224"
    model = create_vit(name, **spec)
    block = model.blocks[0]
    max_heads, head_dim, max_hidden = block.attn.num_heads, block.attn.head_dim, block.mlp.fc1.out_features
    dim, depth = block.attn.qkv.in_features, len(model.blocks)
    heads, hidden = uniform_layout(model, density)
    assert len(set(heads)) == len(set(hidden)) == 1 and len(heads) == depth
    h, c = heads[0], hidden[0]
    held, full = _held(model, density, "uniform")
    assert held == depth * (4 * dim * head_dim * h + 2 * dim * c)
    budget = math.floor(density * full + 0.5)
    # Brute force: no pair of whole heads and channels per block, both at least 1, comes closer to
    # the budget (ViT-Small at 0.05: one head alone is over it, so the pair is 1 head, 1 channel).
    totals = [
        depth * (4 * dim * head_dim * heads_per_block + 2 * dim * channels)
        for heads_per_block in range(1, max_heads + 1)
        for channels in range(1, max_hidden + 1)
    ]
    assert abs(held - budget) == min(abs(total - budget) for total in totals)
    # A head holds as many weights as 2 x head_dim channels, so many pairs tie; of those the layout
    # takes the head count that follows the density.
    assert h == HEADS["smoke" if spec is SMOKE else "vit_small"][density]
    if density >= 0.1:  # one head per block fits the budget from here on
        assert abs(held / full - density) <= 0.01


def test_vit_small_at_density_0_1_keeps_one_head_per_block_and_makes_up_the_rest_in_channels() -> None:
    model = create_vit("vit_small_patch16_224", **VIT_SMALL)
    assert uniform_layout(model, 0.1) == ([1] * 12, [102] * 12)
    held, full = _held(model, 0.1, "uniform")
    assert math.isclose(held / full, 0.1, abs_tol=0.001)


def test_uniform_layout_differs_from_barters_where_barter_empties_blocks() -> None:
    model = create_vit("vit_tiny_patch16_224", **SMOKE)
    barter_heads, _ = barter_layout(model, 0.1)
    uniform_heads, _ = uniform_layout(model, 0.1)
    assert barter_heads == [1, 1, 1, 0] and uniform_heads == [1, 1, 1, 1]


def test_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="layout must be one of"):
        compact_vit(micro_vit(), 0.5, layout="pyramid")
