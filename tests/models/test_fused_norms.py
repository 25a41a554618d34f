"""The fused LayerNorm+Linear op, and `fuse_norms` as a harness option every method gets alike."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import Block

import dstbench
from dstbench.dst.compact.compact_vit import CompactBlock
from dstbench.models.fused_norms import FusedBlock, fuse_block_norms, norm_linear
from dstbench.measure.trackers import ActivationCounter
from tests.conftest import ADAMW, micro_batches, micro_vit

pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)


def test_norm_linear_is_layernorm_then_linear() -> None:
    torch.manual_seed(5)
    norm, linear = torch.nn.LayerNorm(6).double(), torch.nn.Linear(6, 3).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.normal_()
    x = torch.randn(2, 4, 6, dtype=torch.double, requires_grad=True)
    fn = lambda x, nw, nb, w, b: norm_linear(x, norm, linear)  # noqa: E731 - reads the module params
    assert torch.autograd.gradcheck(fn, (x, norm.weight, norm.bias, linear.weight, linear.bias))
    torch.testing.assert_close(norm_linear(x, norm, linear), linear(norm(x)))
    norm, linear = norm.float(), linear.float()
    xf = x.detach().float().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = norm_linear(xf, norm, linear)
    fused.float().sum().backward()
    grads = [p.grad.clone() for p in (xf, linear.weight, norm.weight)]
    for p in (xf, linear.weight, norm.weight):
        p.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = linear(norm(xf))
    plain.float().sum().backward()
    assert fused.dtype == plain.dtype == torch.bfloat16
    torch.testing.assert_close(fused, plain)
    for grad, p in zip(grads, (xf, linear.weight, norm.weight)):
        torch.testing.assert_close(grad, p.grad, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("variant", [{}, {"qk_norm": True, "init_values": 0.1, "qkv_bias": False}], ids=["plain", "qk_norm_layerscale_nobias"])
def test_fused_timm_blocks_compute_the_unfused_model(variant: dict) -> None:
    plain = micro_vit(1, **variant)
    fused = copy.deepcopy(plain)
    params_before = dict(fused.named_parameters())
    assert fuse_block_norms(fused) == 2
    assert all(type(b) is FusedBlock for b in fused.blocks)
    # The same Parameter objects under the same names: masks, optimizer groups, checkpoints hold.
    assert list(dict(fused.named_parameters()).items()) == list(params_before.items())
    assert fused.state_dict().keys() == plain.state_dict().keys()
    x, y = _batch()
    out_plain, out_fused = plain(x), fused(x)
    torch.testing.assert_close(out_fused, out_plain, rtol=0, atol=1e-6)
    F.cross_entropy(out_plain, y).backward()
    F.cross_entropy(out_fused, y).backward()
    for (name, a), b in zip(fused.named_parameters(), plain.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_fused_timm_blocks_keep_fewer_activations() -> None:
    x, _ = _batch()
    saved = []
    for fuse in (True, False):
        model = micro_vit(6)
        if fuse:
            fuse_block_norms(model)
        with ActivationCounter(model) as counter:
            model(x)
        saved.append(counter.total)
    # Per fused norm (2 blocks x 2 norms) its output (4 x 17 tokens x 64) and its mean and rstd
    # (4 x 17 each), fp32: recomputed in backward instead of kept.
    assert saved[1] - saved[0] == 4 * (4 * 17 * 64 + 2 * 4 * 17) * 4


def test_a_model_without_fusable_blocks_is_refused() -> None:
    model = micro_vit()
    fuse_block_norms(model)
    with pytest.raises(ValueError, match="fuse_norms"):
        fuse_block_norms(model)  # already fused: nothing left to fuse, which must not pass silently


@pytest.mark.parametrize("name", ["dense", "set", "rigl", "mest", "chase", "barter"])
def test_every_method_fuses_its_blocks_only_when_asked(name: str) -> None:
    for fuse in (False, True):
        density = 1.0 if name == "dense" else 0.3
        method = dstbench.create_method(
            name, micro_vit(), density=density, total_steps=20, optimizer=ADAMW, fuse_norms=fuse
        )
        assert method.fuse_norms is fuse
        for block in method.model.blocks:
            if name == "barter":
                assert isinstance(block, CompactBlock) and block.fuse_norms is fuse
            else:
                assert type(block) is (FusedBlock if fuse else Block)


@pytest.mark.parametrize("name", ["rigl", "chase"])
def test_masked_training_is_the_same_with_fused_norms(name: str) -> None:
    """Masked weights get no update through the fused op, and training follows the unfused run
    (same masks, weights equal to rounding) across topology updates."""
    runs = []
    for fuse in (False, True):
        method = dstbench.create_method(
            name, micro_vit(), density=0.3, total_steps=20, optimizer=ADAMW, fuse_norms=fuse, delta_t=3, t_end=10
        )
        method.train_segment(micro_batches(), 7)  # updates at steps 3 and 6
        assert method.topology_updates == 2
        params = dict(method.model.named_parameters())
        for pname, mask in method.masks().items():
            assert torch.all(params[pname][~mask] == 0)
            for value in method.optimizer.state[params[pname]].values():
                if value.shape == mask.shape:
                    assert torch.all(value[~mask] == 0)
        runs.append(method)
    plain, fused = runs
    assert all(torch.equal(a, b) for a, b in zip(plain.masks().values(), fused.masks().values()))
    for (pname, a), b in zip(fused.model.named_parameters(), plain.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=pname)
