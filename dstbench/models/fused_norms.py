"""LayerNorm followed by a Linear as one autograd op that keeps only the norm's input for backward,
and its use in timm ViT blocks: a harness-level option (`fuse_norms`) that every method gets alike.

Unfused, autograd keeps both a norm's input (for the norm's backward) and its output (for the
Linear's weight gradient): two embedding-wide tensors per norm, plus the norm's mean and rstd.
`norm_linear` keeps the input alone and recomputes the norm in backward (an element-wise pass, no
matmul), so a block keeps one embedding-wide tensor per norm instead of two. Numerically it is the
unfused pair: the same aten norm kernels, and under autocast the matmuls run in the autocast dtype
as `F.linear` would.

`fuse_block_norms(model)` swaps every timm `Block` of a ViT for a `FusedBlock` holding the very same
child modules (so parameter names, masks, optimizer groups and checkpoints are unchanged) whose
forward runs norm1+qkv and norm2+fc1 through `norm_linear`. The compact method builds its own
blocks fused the same way when the option is set.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import Mlp
from timm.models.vision_transformer import Attention, Block, maybe_add_mask, resolve_self_attn_mask
from torch import nn


class _NormLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, norm_weight, norm_bias, weight, bias, eps):  # type: ignore[override]
        shape = [x.shape[-1]]
        y, _, _ = torch.native_layer_norm(x, shape, norm_weight, norm_bias, eps)
        out = F.linear(y, weight, bias)  # autocast, when on, applies here as to the unfused Linear
        device = x.device.type
        ctx.cast = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        ctx.eps = eps
        ctx.save_for_backward(x, norm_weight, norm_bias, weight, bias)
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        x, norm_weight, norm_bias, weight, bias = ctx.saved_tensors
        shape = [x.shape[-1]]
        # The same kernel as the forward: bit-identical y, mean and rstd.
        y, mean, rstd = torch.native_layer_norm(x, shape, norm_weight, norm_bias, ctx.eps)
        w = weight if ctx.cast is None else weight.to(ctx.cast)
        y_mm = y if ctx.cast is None else y.to(ctx.cast)
        grad_2d = grad_out.reshape(-1, grad_out.shape[-1]).to(w.dtype)
        needs = ctx.needs_input_grad
        grad_weight = grad_bias = None
        if needs[3]:
            grad_weight = (grad_2d.t() @ y_mm.reshape(-1, shape[0])).to(weight.dtype)
        if bias is not None and needs[4]:
            grad_bias = grad_2d.sum(0).to(bias.dtype)
        grad_x = grad_norm_weight = grad_norm_bias = None
        if needs[0] or needs[1] or needs[2]:
            grad_y = (grad_2d @ w).reshape(y.shape).to(y.dtype)
            grad_x, grad_norm_weight, grad_norm_bias = torch.ops.aten.native_layer_norm_backward(
                grad_y, x, shape, mean, rstd, norm_weight, norm_bias,
                [needs[0], norm_weight is not None and needs[1], norm_bias is not None and needs[2]],
            )
        return grad_x, grad_norm_weight, grad_norm_bias, grad_weight, grad_bias, None


def fusable(norm: nn.Module) -> bool:
    """Whether `norm` is a LayerNorm over the last dimension that `norm_linear` can stand in for
    (timm's `fast_norm` path computes differently, so a norm using it is left alone)."""
    return isinstance(norm, nn.LayerNorm) and len(norm.normalized_shape) == 1 and not getattr(norm, "fast_norm", False)


def norm_linear(x: torch.Tensor, norm: nn.LayerNorm, linear: nn.Module) -> torch.Tensor:
    """`linear(norm(x))`, keeping only `x` for backward. A sparse execution's layer
    (`dstbench.dst.masked.backends`) supplies its own fused op with its own kernels."""
    own = getattr(linear, "norm_linear", None)
    if own is not None:
        return own(x, norm)
    return _NormLinear.apply(x, norm.weight, norm.bias, linear.weight, linear.bias, norm.eps)


def attend(
    attn: nn.Module, qkv: torch.Tensor, heads: int, attn_mask: torch.Tensor | None = None, is_causal: bool = False
) -> torch.Tensor:
    """timm's `Attention.forward` from the output of its qkv projection on (`heads` >= 1 heads of
    `attn.head_dim`): q/k norms, fused or reference attention, the scale norm when the module has
    one, proj and its dropout. Shared by the fused timm block and the compact attention."""
    B, N, _ = qkv.shape
    qkv = qkv.reshape(B, N, 3, heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    q, k = attn.q_norm(q), attn.k_norm(k)
    if attn.fused_attn:
        x = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=attn.attn_drop.p if attn.training else 0.0, is_causal=is_causal
        )
    else:  # timm's reference path, kept so that TIMM_FUSED_ATTN=0 behaves as in timm
        scores = (q * attn.scale) @ k.transpose(-2, -1)
        scores = maybe_add_mask(scores, resolve_self_attn_mask(N, scores, attn_mask, is_causal))
        x = attn.attn_drop(scores.softmax(dim=-1)) @ v
    x = x.transpose(1, 2).reshape(B, N, heads * attn.head_dim)
    norm = getattr(attn, "norm", None)
    if norm is not None:
        x = norm(x)
    return attn.proj_drop(attn.proj(x))


def mlp_after_fc1(mlp: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """timm's `Mlp.forward` from the output of fc1 on (activation, dropout, hidden norm when the
    module has one, fc2, dropout)."""
    h = mlp.drop1(mlp.act(h))
    norm = getattr(mlp, "norm", None)
    if norm is not None:
        h = norm(h)
    return mlp.drop2(mlp.fc2(h))


def fusable_block(block: nn.Module) -> bool:
    """A plain timm `Block` with LayerNorms in front of a standard attention (no gate, which reads
    the norm output too) and a standard `Mlp` with a Linear fc1."""
    return (
        type(block) is Block
        and fusable(block.norm1)
        and fusable(block.norm2)
        and isinstance(block.attn, Attention)
        and getattr(block.attn, "gate", None) is None
        and type(block.mlp) is Mlp
        and isinstance(block.mlp.fc1, nn.Linear)
    )


class FusedBlock(Block):
    """A timm `Block` whose norm1+qkv and norm2+fc1 run as `norm_linear`. It holds the original
    block's child modules themselves, in timm's order, so every parameter keeps its name and
    identity; the computation is the block's, with fewer tensors kept for backward."""

    def __init__(self, block: Block) -> None:
        nn.Module.__init__(self)  # not Block.__init__: the children are taken over, not rebuilt
        for name, child in block.named_children():
            setattr(self, name, child)
        self.train(block.training)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        attn = self.attn
        out = attend(attn, norm_linear(x, self.norm1, attn.qkv), attn.num_heads, attn_mask, is_causal)
        x = x + self.drop_path1(self.ls1(out))
        return x + self.drop_path2(self.ls2(mlp_after_fc1(self.mlp, norm_linear(x, self.norm2, self.mlp.fc1))))


def fuse_block_norms(model: nn.Module) -> int:
    """Swap every fusable timm `Block` of `model.blocks` for a `FusedBlock`, in place; returns how
    many were swapped. Raises when none is, so that `fuse_norms: true` never silently does nothing."""
    blocks = getattr(model, "blocks", None)
    swapped = 0
    for index, block in enumerate(list(blocks) if blocks is not None else []):
        if fusable_block(block):
            blocks[index] = FusedBlock(block)
            swapped += 1
    if not swapped:
        raise ValueError("fuse_norms: the model has no timm Block with LayerNorm + Linear pairs to fuse")
    return swapped
