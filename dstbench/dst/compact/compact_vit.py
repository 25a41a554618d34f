"""A compact timm ViT: every block holds its own number of heads and FFN channels, physically.

`compact_vit(model, density)` replaces each `timm` `Block` by a `CompactBlock` with the same child
names (so parameter names, `DEFAULT_PRUNABLE` and checkpoints keep working) whose attention holds
`heads[i]` heads of the dense head size and whose MLP holds `hidden[i]` channels, taken from the
dense initialisation. A branch with no unit adds only its output bias and runs no matmul (the norm
in front of it is skipped too, since nothing reads it). With `fuse_norms` the blocks run norm1+qkv
and norm2+fc1 through `dstbench.models.fused_norms.norm_linear`, as every other method's timm blocks do when the
suite sets that option.

Each compact module remembers the *slots* of its units: the index each head or channel would have
in the full-size block. They are bookkeeping only (the forward never reads them); they let the
compact model be written into the full architecture: `full_state_dict` (public: e.g. to evaluate
or export a trained compact model as a plain timm ViT) built on `scatter_units`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from timm.models.vision_transformer import Block
from torch import nn

from dstbench.dst.compact.surgery import UnitAxis, flat_shape, resize_units, unit_shape
from dstbench.models.fused_norms import attend, fusable, mlp_after_fc1, norm_linear
from dstbench.dst.update_schedule import round_half_up


class CompactAttention(nn.Module):
    """timm's multi-head self-attention with any number of heads >= 0 of a fixed head size."""

    def __init__(self, attn: nn.Module, max_heads: int) -> None:
        super().__init__()
        if not isinstance(attn.norm, nn.Identity) or getattr(attn, "gate", None) is not None:
            raise ValueError("compact attention supports neither scale_norm nor gated attention")
        self.head_dim = int(attn.head_dim)
        self.scale = self.head_dim**-0.5
        self.fused_attn = bool(getattr(attn, "fused_attn", True))
        self.max_heads = int(max_heads)
        # timm's child order (parameters come in the dense order). q_norm and k_norm act on each
        # head alone, so they are unit-safe.
        self.qkv, self.q_norm, self.k_norm, self.attn_drop = attn.qkv, attn.q_norm, attn.k_norm, attn.attn_drop
        self.proj, self.proj_drop = attn.proj, attn.proj_drop
        self.slots: list[int] = list(range(self.num_heads))

    @property
    def max_units(self) -> int:
        """The dense width: how many heads the block may hold at most."""
        return self.max_heads

    @property
    def num_heads(self) -> int:
        # Read from the tensor, so it can never disagree with it after a resize.
        return self.qkv.weight.shape[0] // (3 * self.head_dim)

    def unit_axes(self) -> list[UnitAxis]:
        """q, k, v rows (and biases) produce a head; its proj columns consume it."""
        axes = [UnitAxis(self.qkv, "weight", 0, "in", groups=3, unit_size=self.head_dim)]
        if self.qkv.bias is not None:
            axes.append(UnitAxis(self.qkv, "bias", 0, "in", groups=3, unit_size=self.head_dim))
        axes.append(UnitAxis(self.proj, "weight", 1, "out", unit_size=self.head_dim))
        return axes

    def new_unit_values(self, n: int, generator: torch.Generator | None = None) -> list[torch.Tensor | None] | None:
        """Values of `n` new heads for `resize_units(..., new_values=...)`, one entry per unit axis,
        or None when this attention cannot make one (no qkv bias).

        Each new head's value rows are zero and its value bias a random unit vector `e`, so its
        context vector is `e` at every token whatever it attends to: its outgoing (proj) gradient is
        exactly `(sum of dL/d proj output) e^T` (see `methods/barter.py`). q and k rows are drawn as
        timm initialises them (std 0.02) and differ between heads, as do the `e`: new heads are not
        copies of each other. Drawn on the CPU from `generator`, then moved to the device."""
        if self.qkv.bias is None:
            return None
        dim = self.qkv.in_features
        weight = torch.zeros(3, n, self.head_dim, dim)
        weight[:2] = NEW_UNIT_STD * torch.randn(2, n, self.head_dim, dim, generator=generator)
        bias = torch.zeros(3, n, self.head_dim)
        direction = torch.randn(n, self.head_dim, generator=generator)
        bias[2] = direction / direction.norm(dim=1, keepdim=True).clamp(min=1e-12)
        device, dtype = self.qkv.weight.device, self.qkv.weight.dtype
        return [weight.to(device, dtype), bias.to(device, dtype), None]

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        if self.num_heads == 0:
            return self.proj_drop(_bias_only(self.proj, x))
        return self.attend(self.qkv(x), attn_mask, is_causal)

    def attend(self, qkv: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        """Everything after the qkv projection (at least one head)."""
        return attend(self, qkv, self.num_heads, attn_mask, is_causal)


class CompactMlp(nn.Module):
    """timm's two-layer MLP with any hidden width >= 0."""

    def __init__(self, mlp: nn.Module, max_hidden: int) -> None:
        super().__init__()
        if not isinstance(mlp.fc1, nn.Linear) or not isinstance(mlp.norm, nn.Identity):
            raise ValueError("compact MLP supports neither conv MLPs nor a hidden norm")
        self.max_hidden = int(max_hidden)
        self.fc1, self.act, self.drop1, self.fc2, self.drop2 = mlp.fc1, mlp.act, mlp.drop1, mlp.fc2, mlp.drop2
        self.slots: list[int] = list(range(self.hidden))

    @property
    def max_units(self) -> int:
        """The dense width: how many FFN channels the block may hold at most."""
        return self.max_hidden

    @property
    def hidden(self) -> int:
        return self.fc1.weight.shape[0]

    def unit_axes(self) -> list[UnitAxis]:
        """An fc1 row (and bias) produces a channel; its fc2 column consumes it."""
        axes = [UnitAxis(self.fc1, "weight", 0, "in")]
        if self.fc1.bias is not None:
            axes.append(UnitAxis(self.fc1, "bias", 0, "in"))
        axes.append(UnitAxis(self.fc2, "weight", 1, "out"))
        return axes

    def new_unit_values(self, n: int, generator: torch.Generator | None = None) -> list[torch.Tensor | None] | None:
        """Values of `n` new FFN channels for `resize_units(..., new_values=...)`, one entry per unit
        axis, or None when this MLP cannot make one (no fc1 bias).

        Each new channel's fc1 bias is the `b` with `act(b) = 1` and its fc1 row is drawn as timm
        initialises it (std 0.02, so rows differ): its activation is 1 on every token up to the
        random part, and its outgoing (fc2) gradient is the sum of dL/d fc2 output to first order in
        that part (see `methods/barter.py`). That part is not small at every width: the row meets a
        LayerNorm output of unit-variance entries, so the pre-activation varies by about
        0.02 * sqrt(dim) around `b` (0.28 at dim 192, 0.55 at 768), the activation by 30-60%, and
        the score is then a first-order estimate of the unit's real outgoing gradient."""
        if self.fc1.bias is None:
            return None
        dim = self.fc1.in_features
        weight = NEW_UNIT_STD * torch.randn(1, n, 1, dim, generator=generator)
        bias = torch.full((1, n, 1), unit_activation_bias(self.act))
        device, dtype = self.fc1.weight.device, self.fc1.weight.dtype
        return [weight.to(device, dtype), bias.to(device, dtype), None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.hidden == 0:
            return self.drop2(_bias_only(self.fc2, x))
        return self.finish(self.fc1(x))

    def finish(self, h: torch.Tensor) -> torch.Tensor:
        """Everything after fc1 (at least one channel)."""
        return mlp_after_fc1(self, h)


NEW_UNIT_STD = 0.02  # timm's ViT initialises Linear weights with trunc_normal_(std=0.02)


def unit_activation_bias(act: nn.Module) -> float:
    """The pre-activation `b` in [0, 10] with `act(b) = 1`, by bisection (GELU: about 1.14; ReLU: 1).
    The activation must be increasing there and reach 1, as GELU, ReLU and SiLU do."""
    lo, hi = 0.0, 10.0
    with torch.no_grad():
        if not float(act(torch.tensor(lo, dtype=torch.float64))) <= 1.0 <= float(act(torch.tensor(hi, dtype=torch.float64))):
            raise ValueError(f"{type(act).__name__} does not reach 1 on [0, 10]")
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if float(act(torch.tensor(mid, dtype=torch.float64))) < 1.0 else (lo, mid)
    return (lo + hi) / 2


def _bias_only(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """What `linear` gives for an input with no features: its bias on every token."""
    shape = (*x.shape[:-1], linear.out_features)
    return linear.bias.expand(shape) if linear.bias is not None else x.new_zeros(shape)


class CompactBlock(nn.Module):
    """A timm `Block` whose attention and MLP are compact; same child names, same computation."""

    def __init__(self, block: Block, heads: int, hidden: int, fuse_norms: bool = False) -> None:
        super().__init__()
        # timm's child order, so parameters (and optimizer groups) come in the dense order.
        self.norm1 = block.norm1
        self.attn = CompactAttention(block.attn, block.attn.num_heads)
        self.ls1, self.drop_path1, self.norm2 = block.ls1, block.drop_path1, block.norm2
        self.mlp = CompactMlp(block.mlp, block.mlp.fc1.out_features)
        self.ls2, self.drop_path2 = block.ls2, block.drop_path2
        self.fuse_norms = bool(fuse_norms) and fusable(self.norm1) and fusable(self.norm2)
        # Start from the first units of the dense initialisation (its units are i.i.d.).
        resize_units(self.attn.unit_axes(), range(heads))
        resize_units(self.mlp.unit_axes(), range(hidden))
        self.attn.slots, self.mlp.slots = list(range(heads)), list(range(hidden))

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        # An empty branch ignores its input: its norm is not even computed (nor saved for backward).
        if self.attn.num_heads == 0:
            attn = self.attn(x)
        elif self.fuse_norms:
            attn = self.attn.attend(norm_linear(x, self.norm1, self.attn.qkv), attn_mask, is_causal)
        else:
            attn = self.attn(self.norm1(x), attn_mask=attn_mask, is_causal=is_causal)
        x = x + self.drop_path1(self.ls1(attn))
        if self.mlp.hidden == 0:
            mlp = self.mlp(x)
        elif self.fuse_norms:
            mlp = self.mlp.finish(norm_linear(x, self.norm2, self.mlp.fc1))
        else:
            mlp = self.mlp(self.norm2(x))
        return x + self.drop_path2(self.ls2(mlp))


def spread(total: int, caps: Sequence[int]) -> list[int]:
    """`total` units over blocks as evenly as possible, earlier blocks taking the remainder, none
    above its cap (the dense width)."""
    if not 0 <= total <= sum(caps):
        raise ValueError(f"cannot place {total} units in blocks of {list(caps)}")
    counts = [0] * len(caps)
    left = total
    while left:
        open_blocks = [i for i, cap in enumerate(caps) if counts[i] < cap]
        share, extra = divmod(left, len(open_blocks))
        for rank, i in enumerate(open_blocks):
            add = min(caps[i] - counts[i], share + (rank < extra))
            counts[i] += add
            left -= add
    return counts


def _block_shape(block: nn.Module) -> tuple[int, int, int, int]:
    """(heads, FFN channels, weights per head, weights per channel) of a dense or compact block at
    its dense width: a head holds its q, k, v rows and proj columns, a channel its fc1 row and fc2
    column."""
    compact = isinstance(block, CompactBlock)
    heads = block.attn.max_units if compact else block.attn.num_heads
    hidden = block.mlp.max_units if compact else block.mlp.fc1.out_features
    dim = block.attn.qkv.in_features
    return heads, hidden, 4 * dim * block.attn.head_dim, 2 * dim


def budgets(model: nn.Module, density: float) -> tuple[int, int]:
    """(H, C) of a dense or compact ViT at `density`: H = round(d * total heads), halves up, as every
    count in dstbench; then C the number of FFN channels that, spread over the blocks as H is,
    brings the prunable weights (qkv, proj, fc1, fc2) closest to d times their full count (ties to
    fewer channels). Heads are the coarse unit (a ViT-Tiny head weighs as much as 96 channels), so
    rounding each budget on its own would miss the density by up to half a head per model; the
    channels absorb that, and the layout is within half a channel's weights of the target unless
    the heads alone exceed it (then C = 0)."""
    shapes = [_block_shape(b) for b in model.blocks]
    head_caps, channel_caps = [s[0] for s in shapes], [s[1] for s in shapes]
    total_heads = round_half_up(density * sum(head_caps))
    target = density * sum(h * hw + c * cw for h, c, hw, cw in shapes)
    held = sum(h * s[2] for h, s in zip(spread(total_heads, head_caps), shapes))

    def miss(channels: int) -> float:
        return abs(held + sum(c * s[3] for c, s in zip(spread(channels, channel_caps), shapes)) - target)

    # The channel weights may differ by block, so search around the estimate from their mean.
    mean_channel = sum(c * s[3] for c, s in zip(channel_caps, shapes)) / max(1, sum(channel_caps))
    guess = min(sum(channel_caps), max(0, round((target - held) / mean_channel))) if mean_channel else 0
    candidates = range(max(0, guess - 2), min(sum(channel_caps), guess + 2) + 1)
    return total_heads, min(candidates, key=lambda c: (miss(c), c))


LAYOUTS = ("barter", "uniform")


def barter_layout(model: nn.Module, density: float) -> tuple[list[int], list[int]]:
    """BARTER's initial shapes: the budgets `budgets(model, density)` `spread` over the blocks, so
    whole heads go to the earliest blocks and later ones may hold none."""
    total_heads, total_hidden = budgets(model, density)
    heads = spread(total_heads, [b.attn.num_heads for b in model.blocks])
    hidden = spread(total_hidden, [b.mlp.fc1.out_features for b in model.blocks])
    return heads, hidden


def uniform_layout(model: nn.Module, density: float) -> tuple[list[int], list[int]]:
    """Every block narrowed alike, the embedding width kept: the same `h` heads and `c` FFN
    channels in each, `h = round(density * heads per block)` and at least 1, then `c` the whole
    number of channels per block (at least 1) that brings the prunable weights (qkv, proj, fc1,
    fc2) closest to `round(density * their full count)`. Ties go to the smaller `c`.

    Heads come first because they are the coarser unit: at density 0.1 a ViT-Small block of 6 heads
    keeps 1 (0.17 of its attention), and the channels make up the parameter budget (0.066 of its
    FFN), so the model holds the sparse methods' parameter count."""
    blocks = list(model.blocks)
    widths = {(b.attn.num_heads, b.attn.head_dim, b.mlp.fc1.out_features, b.attn.qkv.in_features) for b in blocks}
    if len(widths) != 1:
        raise ValueError("a uniform layout needs blocks of one width (same heads, head size, FFN channels, embedding)")
    max_heads, head_dim, max_hidden, dim = widths.pop()
    head_weights, channel_weights = 4 * dim * head_dim, 2 * dim  # per head: q, k, v rows and proj columns
    budget = round_half_up(density * len(blocks) * (max_heads * head_weights + max_hidden * channel_weights))
    h = min(max_heads, max(1, round_half_up(density * max_heads)))
    room = budget - len(blocks) * h * head_weights  # what the channels may hold
    # Nearest whole number, halves down: on a tie the layout stays under the budget.
    c = math.ceil(room / (len(blocks) * channel_weights) - 0.5)
    c = min(max_hidden, max(1, c))
    return [h] * len(blocks), [c] * len(blocks)


def layout_density(model: nn.Module, heads: Sequence[int], hidden: Sequence[int]) -> float:
    """The share of a dense timm ViT's prunable weights (qkv, proj, fc1, fc2) that a layout holds."""
    held = full = 0
    for block, h, c in zip(model.blocks, heads, hidden):
        dim, head_dim = block.attn.qkv.in_features, block.attn.head_dim
        held += 4 * dim * h * head_dim + 2 * dim * c
        full += 4 * dim * block.attn.num_heads * head_dim + 2 * dim * block.mlp.fc1.out_features
    return held / full


def compact_vit(model: nn.Module, density: float, fuse_norms: bool = False, layout: str = "barter") -> nn.Module:
    """Turn a dense timm ViT into its compact form at `density`, in place; returns the model.

    `layout`: how many heads and FFN channels each block starts with, `barter` (`barter_layout`:
    BARTER's budgets spread over the blocks) or `uniform` (`uniform_layout`: every block alike).
    `fuse_norms`: run norm1+qkv and norm2+fc1 as `norm_linear` (keeps one embedding-wide tensor per
    norm for backward instead of two; same numbers)."""
    for block in model.blocks:
        if not isinstance(block, Block) or isinstance(block, CompactBlock):
            raise ValueError(f"expected dense timm Blocks, found {type(block).__name__}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {layout!r}")
    heads, hidden = (barter_layout if layout == "barter" else uniform_layout)(model, density)
    for index, block in enumerate(list(model.blocks)):
        model.blocks[index] = CompactBlock(block, heads[index], hidden[index], fuse_norms)
    return model


def compact_blocks(model: nn.Module) -> list[CompactBlock]:
    blocks = list(model.blocks)
    if not all(isinstance(b, CompactBlock) for b in blocks):
        raise ValueError("not a compact ViT (see compact_vit)")
    return blocks


def topology(model: nn.Module) -> list[dict[str, int]]:
    """Per block, the heads and FFN channels it holds now."""
    return [{"heads": b.attn.num_heads, "hidden": b.mlp.hidden} for b in compact_blocks(model)]


def empty_branch_parameters(model: nn.Module) -> set[str]:
    """Names of the parameters a compact ViT's forward does not use now: a block without heads (or
    FFN channels) skips that branch's norm and matmuls and adds only its output bias (what DDP
    must not wait for)."""
    unused = set()
    for index, block in enumerate(compact_blocks(model)):
        parts = (["norm1", "attn"] if block.attn.num_heads == 0 else []) + (["norm2", "mlp"] if block.mlp.hidden == 0 else [])
        for part in parts:
            for name, _ in getattr(block, part).named_parameters():
                unused.add(f"blocks.{index}.{part}.{name}")
        # The output bias of an empty branch is still added to every token.
        unused.discard(f"blocks.{index}.attn.proj.bias")
        unused.discard(f"blocks.{index}.mlp.fc2.bias")
    return unused


def full_prunable_numel(model: nn.Module) -> int:
    """Number of qkv/proj/fc1/fc2 weights the full-size model would hold."""
    total = 0
    for b in compact_blocks(model):
        dim = b.attn.qkv.in_features
        total += 4 * dim * b.attn.max_heads * b.attn.head_dim + 2 * dim * b.mlp.max_hidden
    return total


def scatter_units(tensor: torch.Tensor, axis: UnitAxis, slots: Sequence[int], max_units: int) -> torch.Tensor:
    """The full-size tensor with `tensor`'s units at `slots` and zeros at every other slot."""
    out = tensor.new_zeros(unit_shape(tensor, axis, max_units))
    index = torch.as_tensor(list(slots), dtype=torch.long, device=tensor.device)
    out.index_copy_(axis.axis + 1, index, tensor.reshape(unit_shape(tensor, axis, len(slots))))
    return out.reshape(flat_shape(tensor, axis, max_units))


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The compact model as a state dict of the full-size dense architecture (absent units zero):
    `timm.create_model(...).load_state_dict(full_state_dict(model))` gives a plain ViT computing
    the same function."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for index, b in enumerate(compact_blocks(model)):
        for part, module in (("attn", b.attn), ("mlp", b.mlp)):
            names = {id(m): n for n, m in module.named_children()}
            for axis in module.unit_axes():
                key = f"blocks.{index}.{part}.{names[id(axis.module)]}.{axis.name}"
                state[key] = scatter_units(axis.param.detach(), axis, module.slots, module.max_units)
    return state
