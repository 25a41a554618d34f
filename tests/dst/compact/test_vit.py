"""The compact ViT computes exactly what the full-size ViT computes with the other units zeroed."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from dstbench.dst.compact.surgery import resize_units
from dstbench.dst.compact.unit_exchange import assign_slots
from dstbench.dst.compact.compact_vit import (
    compact_blocks,
    compact_vit,
    full_prunable_numel,
    full_state_dict,
    scatter_units,
    spread,
    topology,
)
from dstbench.measure.trackers import ActivationCounter
from tests.conftest import micro_vit

HEAD_DIM = 16  # micro ViT: embed 64, 4 heads


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)


def _resize(module: torch.nn.Module, sources: list[int], noise: float = 0.0) -> None:
    module.slots = assign_slots(module.slots, sources, module.max_units)
    resize_units(module.unit_axes(), sources, noise=noise, generator=torch.Generator().manual_seed(1))


def _scrambled(seed: int = 0) -> torch.nn.Module:
    """A compact micro ViT after exchanges: block 0 has a cloned head and no channel, block 1 no
    head and permuted channels with clones (noisy split)."""
    model = compact_vit(micro_vit(seed), 0.5)  # [2, 2] heads, [128, 128] channels
    b0, b1 = compact_blocks(model)
    _resize(b0.attn, [1, 0, 1], noise=0.2)
    _resize(b0.mlp, [])
    _resize(b1.attn, [])
    perm = torch.randperm(128, generator=torch.Generator().manual_seed(seed))[:100].tolist()
    _resize(b1.mlp, perm + perm[:20], noise=0.2)
    return model


def _unit_masks(block: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Bool masks over the full-size heads and channels of a compact block: True where held."""
    masks = {}
    for kind, module in (("heads", block.attn), ("hidden", block.mlp)):
        masks[kind] = torch.zeros(module.max_units, dtype=torch.bool)
        masks[kind][module.slots] = True
    return masks


def _zeroed_dense(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """The dense micro ViT with the compact model's units written at their slots, built by hand."""
    dense = micro_vit(seed)
    own = dict(model.named_parameters())
    with torch.no_grad():
        for name, param in dense.named_parameters():
            if name in own and own[name].shape == param.shape:
                param.copy_(own[name])
        for i, block in enumerate(compact_blocks(model)):
            attn, mlp = dense.blocks[i].attn, dense.blocks[i].mlp
            for p in (attn.qkv.weight, attn.qkv.bias, attn.proj.weight, mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight):
                p.zero_()
            heads = block.attn.num_heads
            for j, slot in enumerate(block.attn.slots):
                for part in range(3):  # q, k, v rows of the head
                    rows = slice(part * 64 + slot * HEAD_DIM, part * 64 + (slot + 1) * HEAD_DIM)
                    mine = slice((part * heads + j) * HEAD_DIM, (part * heads + j + 1) * HEAD_DIM)
                    attn.qkv.weight[rows] = block.attn.qkv.weight[mine]
                    attn.qkv.bias[rows] = block.attn.qkv.bias[mine]
                attn.proj.weight[:, slot * HEAD_DIM : (slot + 1) * HEAD_DIM] = block.attn.proj.weight[:, j * HEAD_DIM : (j + 1) * HEAD_DIM]
            for j, slot in enumerate(block.mlp.slots):
                mlp.fc1.weight[slot] = block.mlp.fc1.weight[j]
                mlp.fc1.bias[slot] = block.mlp.fc1.bias[j]
                mlp.fc2.weight[:, slot] = block.mlp.fc2.weight[:, j]
    return dense


def test_budgets_are_spread_evenly_from_the_dense_initialisation() -> None:
    dense = micro_vit(0, depth=3)
    # H = round(3.6) = 4 heads of 4096 weights; C brings the total closest to 0.3 x 147,456 =
    # 44,236.8: (44,236.8 - 16,384) / 128 weights per channel = 217.6, so 218.
    model = compact_vit(copy.deepcopy(dense), 0.3)
    assert topology(model) == [{"heads": 2, "hidden": 73}, {"heads": 1, "hidden": 73}, {"heads": 1, "hidden": 72}]
    block = compact_blocks(model)[1]
    torch.testing.assert_close(block.mlp.fc1.weight, dense.blocks[1].mlp.fc1.weight[:73], rtol=0, atol=0)
    torch.testing.assert_close(block.attn.proj.weight, dense.blocks[1].attn.proj.weight[:, :16], rtol=0, atol=0)
    assert full_prunable_numel(model) == sum(p.numel() for n, p in dense.named_parameters() if n.endswith(("qkv.weight", "proj.weight", "fc1.weight", "fc2.weight")) and n.startswith("blocks"))
    assert spread(10, [4, 4, 4]) == [4, 3, 3] and spread(11, [2, 8, 8]) == [2, 5, 4]
    with pytest.raises(ValueError):
        spread(13, [4, 4, 4])
    with pytest.raises(ValueError):
        compact_vit(model, 0.5)  # already compact


@pytest.mark.parametrize(
    ("fuse", "variant"),
    [(True, {}), (False, {}), (True, {"qk_norm": True, "init_values": 0.1, "qkv_bias": False})],
    ids=["fused", "unfused", "qk_norm_layerscale_nobias"],
)
def test_density_one_is_the_dense_model(fuse: bool, variant: dict) -> None:
    dense = micro_vit(1, **variant)
    model = compact_vit(copy.deepcopy(dense), 1.0, fuse_norms=fuse)
    x, y = _batch()
    F.cross_entropy(dense(x), y).backward()
    out = model(x)
    F.cross_entropy(out, y).backward()
    torch.testing.assert_close(out, dense(x), rtol=0, atol=1e-5)
    # Same parameter names in the same order (optimizer groups, state dicts, DEFAULT_PRUNABLE).
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in dense.named_parameters()]
    for (name, a), b in zip(model.named_parameters(), dense.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_timm_reference_attention_path_agrees() -> None:
    model = _scrambled(7)
    reference = _zeroed_dense(model, 7)
    for m in (*compact_blocks(model), *reference.blocks):
        m.attn.fused_attn = False  # what TIMM_FUSED_ATTN=0 selects
    x, _ = _batch(3)
    assert (model(x) - reference(x)).abs().max() <= 1e-5


def test_removing_a_unit_equals_zeroing_it_in_the_full_model() -> None:
    model = compact_vit(micro_vit(2), 0.5)
    b0, b1 = compact_blocks(model)
    _resize(b0.attn, [1])  # head 0 of block 0 removed
    _resize(b1.mlp, [i for i in range(128) if i != 5])  # channel 5 of block 1 removed
    x, _ = _batch()
    reference = _zeroed_dense(model, 2)
    assert (model(x) - reference(x)).abs().max() <= 1e-5
    full = micro_vit(2)
    full.load_state_dict(full_state_dict(model))
    for a, b in zip(full.state_dict().values(), reference.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_compact_and_masked_full_model_agree_on_loss_and_gradients() -> None:
    model = _scrambled(3)
    full = _zeroed_dense(model, 3)
    x, y = _batch(1)
    loss = F.cross_entropy(model(x), y)
    full_loss = F.cross_entropy(full(x), y)
    torch.testing.assert_close(loss, full_loss, rtol=1e-6, atol=1e-6)
    loss.backward()
    full_loss.backward()
    full_grads = dict(full.named_parameters())
    checked = set()
    for i, block in enumerate(compact_blocks(model)):
        masks = _unit_masks(block)
        for part, module, mask in (("attn", block.attn, masks["heads"]), ("mlp", block.mlp, masks["hidden"])):
            names = {id(m): n for n, m in module.named_children()}
            for axis in module.unit_axes():
                key = f"blocks.{i}.{part}.{names[id(axis.module)]}.{axis.name}"
                grad = full_grads[key].grad
                if axis.param.grad is None:  # an empty unit kind: the full model's gradient is zero
                    assert float(grad.abs().max()) == 0.0, key
                else:
                    mine = scatter_units(axis.param.grad, axis, module.slots, len(mask))
                    torch.testing.assert_close(mine, grad, rtol=1e-4, atol=1e-6, msg=key)
                checked.add(key)
    for name, param in model.named_parameters():
        if name in checked:
            continue
        if param.grad is None:  # the norm in front of an empty branch: nothing reads it
            assert float(full_grads[name].grad.abs().max()) == 0.0, name
        else:
            torch.testing.assert_close(param.grad, full_grads[name].grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_cloning_heads_and_channels_keeps_the_output(noise: float) -> None:
    model = compact_vit(micro_vit(4), 0.5)
    x, _ = _batch(2)
    before = model(x).detach()
    b0, b1 = compact_blocks(model)
    _resize(b0.attn, [0, 1, 1, 1], noise=noise)  # head 1 into three copies
    _resize(b1.attn, [1, 0, 0], noise=noise)
    _resize(b0.mlp, list(range(128)) + [7, 7, 3], noise=noise)
    _resize(b1.mlp, list(range(127, -1, -1)) + list(range(0, 128, 2)), noise=noise)
    assert topology(model) == [{"heads": 4, "hidden": 131}, {"heads": 3, "hidden": 192}]
    assert (model(x) - before).abs().max() <= 1e-5


def test_fused_norms_keep_fewer_activations_for_the_same_result() -> None:
    x, y = _batch()
    outputs, saved = [], []
    for fuse in (True, False):
        model = compact_vit(micro_vit(6), 0.25, fuse_norms=fuse)
        counter = ActivationCounter(model)
        with counter:
            out = model(x)
        outputs.append(out.detach())
        saved.append(counter.total)
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=1e-6)
    # Per fused norm (2 blocks x 2 norms) its output (4 x 17 tokens x 64) and its mean and rstd
    # (4 x 17 each), fp32: recomputed in backward instead of kept.
    assert saved[1] - saved[0] == 4 * (4 * 17 * 64 + 2 * 4 * 17) * 4
