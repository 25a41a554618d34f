"""Small-Dense with `layout: uniform`: the RigL paper's baseline, every block narrowed alike."""

from __future__ import annotations

import pytest
import torch

import dstbench
from dstbench.dst.compact.compact_vit import compact_blocks
from dstbench.models.timm_models import create_vit
from tests.conftest import ADAMW, micro_batches, micro_vit

SMOKE = {"img_size": 32, "patch_size": 4, "num_classes": 10, "embed_dim": 128, "depth": 4, "num_heads": 8}
VIT_SMALL = {"img_size": 32, "patch_size": 4, "num_classes": 100}


def _create(layout: str, density: float = 0.3) -> dstbench.Method:
    return dstbench.create_method("small_dense", micro_vit(), density=density, total_steps=10, optimizer=ADAMW, layout=layout)


# Hand-computed uniform layouts. Per block, a head holds 4 * embed * head_dim weights (its q, k, v
# rows and proj columns), an FFN channel 2 * embed (its fc1 row and fc2 column); the budget is
# round(d * the full count), h = round(d * heads) (at least 1) and c the nearest whole count that
# fills the rest.
#   micro (embed 64, 2 blocks, 4 heads of 16, 256 channels): head 4096, channel 128, full 98,304.
#     0.1: budget 9830, h 1, c = (9830 - 2*4096) / (2*128) = 6.4 -> 6, held 9728
#     0.3: budget 29,491, h 1, c = 83.2 -> 83, held 29,440;  0.5: h 2, c 128, held 49,152
#   smoke (embed 128, 4 blocks, 8 heads of 16, 512 channels): head 8192, channel 256, full 786,432.
#     0.1: budget 78,643, h 1, c = (78,643 - 4*8192) / (4*256) = 44.8 -> 45, held 78,848
#   ViT-Small (embed 384, 12 blocks, 6 heads of 64, 1536 channels): head 98,304, channel 768,
#     full 21,233,664. 0.1: budget 2,123,366, h 1, c = 102.4 -> 102, held 2,119,680 (0.09983)
MICRO_EXPECTED = {0.1: (1, 6, 9728), 0.3: (1, 83, 29_440), 0.5: (2, 128, 49_152)}


@pytest.mark.parametrize("density", [0.1, 0.3, 0.5])
def test_every_block_holds_the_hand_computed_layout_and_the_extras_say_which(density: float) -> None:
    method = _create("uniform", density)
    h, c, held = MICRO_EXPECTED[density]
    assert [b.attn.num_heads for b in compact_blocks(method.model)] == [h, h]
    assert [b.mlp.hidden for b in compact_blocks(method.model)] == [c, c]
    assert method.density() == held / 98_304
    extras = method.result_extras()
    assert extras["layout_rule"] == "uniform"
    assert extras["layout"] == {"heads": [h, h], "hidden": [c, c]}
    assert extras["budgets"] == {"heads": 2 * h, "hidden": 2 * c}
    assert _create("barter", density).result_extras()["layout_rule"] == "barter"


@pytest.mark.parametrize(
    "name, spec, heads, hidden, held, full",
    [
        ("vit_tiny_patch16_224", SMOKE, [1] * 4, [45] * 4, 78_848, 786_432),
        ("vit_small_patch16_224", VIT_SMALL, [1] * 12, [102] * 12, 2_119_680, 21_233_664),
    ],
    ids=["smoke", "vit_small"],
)
def test_small_dense_at_0_1_on_the_smoke_model_and_vit_small(
    name: str, spec: dict, heads: list[int], hidden: list[int], held: int, full: int
) -> None:
    method = dstbench.create_method(
        "small_dense", create_vit(name, **spec), density=0.1, total_steps=10, optimizer=ADAMW, layout="uniform"
    )
    assert [b.attn.num_heads for b in compact_blocks(method.model)] == heads
    assert [b.mlp.hidden for b in compact_blocks(method.model)] == hidden
    assert sum(w.numel() for w in method.prunable().values()) == held
    assert method.density() == held / full
    assert abs(method.density() - 0.1) < 0.002  # 0.1003 on the smoke model, 0.0998 on ViT-Small


def test_at_low_density_barter_empties_a_block_and_uniform_does_not() -> None:
    barter, uniform = _create("barter", 0.1), _create("uniform", 0.1)
    assert [b.attn.num_heads for b in compact_blocks(barter.model)] == [1, 0]
    assert [b.attn.num_heads for b in compact_blocks(uniform.model)] == [1, 1]
    assert uniform.ddp_ignored_parameters() == set()


def test_it_trains_without_updates_and_resumes_identically() -> None:
    method = _create("uniform")
    shapes = [tuple(p.shape) for p in method.model.parameters()]
    stats = method.train_segment(micro_batches(), 3)
    assert stats.topology_updates == 0 and [tuple(p.shape) for p in method.model.parameters()] == shapes
    restored = _create("uniform")
    restored.load_state_dict(method.state_dict())
    for m in (method, restored):
        m.train_segment(micro_batches(seed=2), 2)
    assert all(torch.equal(a, b) for a, b in zip(method.model.parameters(), restored.model.parameters()))


def test_an_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="layout must be one of"):
        _create("pyramid")
