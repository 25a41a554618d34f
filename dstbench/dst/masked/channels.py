"""Chase's channel part: score channels by UMM, remove them gradually by masking.

A channel is an FFN hidden unit (its fc1 row produces it, its fc2 column consumes it; fc1 and fc2
linears, or 1x1 convolutions as in a ConvNeXt), an attention head (its q, k and v rows of `qkv`
produce it, its columns of `proj` consume it), or a ResNet block's inner channel (an output channel
of conv1, or of a bottleneck's conv2, with its batch norm, consumed by the next convolution's input
channel). Channels that feed a residual sum (a block's last convolution, the stem, a ConvNeXt's
depthwise convolution) are never removed: removing one would need every block on that residual
stream to drop it together. Each
kind is pruned towards its own channel sparsity on Zhu & Gupta's cubic schedule, which reaches
`S_c` at `t_end_step` (the caller passes its last update step, so the final sparsity is reached by
an update that actually runs), with one global threshold across blocks and a per-block floor of `floor_ratio * (1 - S_c) * C` channels.
Removal is by masking, so tensors keep their size (Chase builds the smaller network only to measure
inference).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch
from timm.layers import ConvMlp, Mlp
from timm.models.resnet import BasicBlock, Bottleneck
from timm.models.vision_transformer import Attention

from dstbench.dst.optimizer import zero_state
from dstbench.dst.update_schedule import round_half_up
from dstbench.dst.masked.scorers import select_top

KINDS = ("ffn", "head", "channel")


def cubic_sparsity(step: int, final: float, t_end_step: int) -> float:
    """Channel sparsity at `step`: `final * (1 - (1 - t / T) ** 3)`, 0 at step 0 and `final` from T."""
    if t_end_step <= 0:
        return final
    progress = min(max(step, 0), t_end_step) / t_end_step
    return final * (1.0 - (1.0 - progress) ** 3)


@dataclasses.dataclass
class ChannelGroup:
    """The channels of one block of one kind. Rows of the producer are laid out as
    `sections x channels x unit` (qkv: 3 x heads x head_dim; fc1: 1 x hidden x 1); the consumer's
    columns as `channels x unit`."""

    kind: str
    producer: str  # parameter names
    consumer: str
    producer_bias: str | None
    channels: int
    sections: int
    unit: int
    floor: int
    keep: torch.Tensor  # bool [channels]
    dims: int = 2  # of the producer and consumer weights: 4 for convolutions
    norm: tuple[str, ...] = ()  # the per-channel parameters of a norm between them (a batch norm's weight, bias)

    def umm(self, producer: torch.Tensor) -> torch.Tensor:
        """Unit mean magnitude: mean |w| of each channel's producing weights, masked ones as 0."""
        rows = producer.view(self.sections, self.channels, self.unit, -1)
        return rows.abs().mean(dim=(0, 2, 3))

    def row_keep(self) -> torch.Tensor:
        return self.keep.view(1, -1, 1).expand(self.sections, self.channels, self.unit).reshape(-1)

    def column_keep(self) -> torch.Tensor:
        return self.keep.view(-1, 1).expand(self.channels, self.unit).reshape(-1)


def select_with_floors(
    scores: list[torch.Tensor],
    keeps: list[torch.Tensor],
    floors: list[int],
    n_remove: int,
    generator: torch.Generator,
) -> list[torch.Tensor]:
    """Bool removal masks: the `n_remove` live channels with the lowest scores over all layers
    (one global threshold), never taking a layer below its floor.

    A layer can give at most `live - floor` channels, and it gives its lowest-scoring ones first,
    so the global choice is made among each layer's `live - floor` lowest channels.
    """
    offered, layer_of = [], []
    for layer, (score, keep, floor) in enumerate(zip(scores, keeps, floors)):
        cap = max(0, int(keep.sum()) - floor)
        picked = select_top(-score, keep, cap, generator)
        offered.append(picked)
        layer_of.append(torch.full_like(picked, layer))
    index = torch.cat(offered)
    layers = torch.cat(layer_of)
    pooled = torch.cat([score[picked] for score, picked in zip(scores, offered)])
    chosen = select_top(-pooled, torch.ones_like(pooled, dtype=torch.bool), min(n_remove, index.numel()), generator)
    removals = [torch.zeros_like(keep) for keep in keeps]
    for layer, removal in enumerate(removals):
        removal[index[chosen][layers[chosen] == layer]] = True
    return removals


def _out_channels(layer: torch.nn.Module) -> int:
    # A linear, or what an execution swapped in for it (csr's `CsrLinear`), has `out_features`.
    return layer.out_channels if isinstance(layer, torch.nn.Conv2d) else layer.out_features


def channel_pairs(model: torch.nn.Module, kinds: tuple[str, ...] = KINDS) -> list[tuple[str, str, str, str, str | None, int]]:
    """(kind, module prefix, producer, consumer, norm between them or None, sections) of every
    channel group `model` has: timm `Attention` heads, `Mlp`/`ConvMlp` units, ResNet blocks' inner
    channels (a grouped consumer, as in ResNeXt, is left out: its input channels are not one column each)."""
    pairs = []
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, Attention) and "head" in kinds:
            pairs.append(("head", prefix, "qkv", "proj", None, 3))
        elif isinstance(module, (Mlp, ConvMlp)) and "ffn" in kinds:
            norm = module.norm if any(True for _ in module.norm.parameters()) else None
            pairs.append(("ffn", prefix, "fc1", "fc2", "norm" if norm is not None else None, 1))
        elif isinstance(module, (BasicBlock, Bottleneck)) and "channel" in kinds:
            inner = [("conv1", "bn1", "conv2")] + ([("conv2", "bn2", "conv3")] if isinstance(module, Bottleneck) else [])
            pairs += [("channel", prefix, p, c, n, 1) for p, n, c in inner if getattr(module, c).groups == 1]
    return pairs


class ChannelPruner:
    """The channel groups of a model (`channel_pairs`), and their gradual removal."""

    def __init__(
        self,
        model: torch.nn.Module,
        final_sparsity: float,
        floor_ratio: float,
        t_end_step: int,
        kinds: tuple[str, ...] = KINDS,
    ) -> None:
        if not 0.0 <= final_sparsity < 1.0:
            raise ValueError(f"channel sparsity must be in [0, 1), got {final_sparsity}")
        self.final_sparsity = final_sparsity
        self.t_end_step = t_end_step
        self.groups: list[ChannelGroup] = []
        modules = dict(model.named_modules())
        for kind, prefix, producer, consumer, norm, sections in channel_pairs(model, kinds):
            block = modules[prefix[:-1]]
            layer = getattr(block, producer)
            # Heads: q, k and v rows of head_dim each; any other channel is one row.
            channels = block.num_heads if kind == "head" else _out_channels(layer)
            norm_names = tuple(f"{prefix}{norm}.{p}" for p, _ in getattr(block, norm).named_parameters()) if norm else ()
            self.groups.append(
                ChannelGroup(
                    kind=kind,
                    producer=f"{prefix}{producer}.weight",
                    consumer=f"{prefix}{consumer}.weight",
                    producer_bias=f"{prefix}{producer}.bias" if layer.bias is not None else None,
                    channels=channels,
                    sections=sections,
                    unit=block.head_dim if kind == "head" else 1,
                    # Chase's floor: int(C * (1 - S_c) * minimum_ratio).
                    floor=int(channels * (1.0 - final_sparsity) * floor_ratio),
                    # (any of the layer's parameters: a csr layer has `values`, not `weight`)
                    keep=torch.ones(channels, dtype=torch.bool, device=next(layer.parameters()).device),
                    dims=4 if isinstance(layer, torch.nn.Conv2d) else 2,
                    norm=norm_names,
                )
            )
        if not self.groups:
            raise ValueError("the model has no timm Attention, Mlp or ResNet blocks to remove channels from")

    def weight_names(self) -> set[str]:
        return {g.producer for g in self.groups} | {g.consumer for g in self.groups}

    def target(self, step: int) -> float:
        return cubic_sparsity(step, self.final_sparsity, self.t_end_step)

    def sparsity(self, kind: str) -> float:
        groups = [g for g in self.groups if g.kind == kind]
        total = sum(g.channels for g in groups)
        return 1.0 - sum(int(g.keep.sum()) for g in groups) / total if total else 0.0

    def remove(self, step: int, weights: Mapping[str, torch.Tensor], generator: torch.Generator) -> int:
        """Remove channels until each kind reaches `target(step)` (floors permitting); returns how
        many were removed."""
        removed = 0
        for kind in KINDS:
            groups = [g for g in self.groups if g.kind == kind]
            if not groups:
                continue
            total = sum(g.channels for g in groups)
            live = sum(int(g.keep.sum()) for g in groups)
            n_remove = live - round_half_up((1.0 - self.target(step)) * total)
            if n_remove <= 0:
                continue
            scores = [g.umm(weights[g.producer]) for g in groups]
            removals = select_with_floors(scores, [g.keep for g in groups], [g.floor for g in groups], n_remove, generator)
            for group, removal in zip(groups, removals):
                group.keep &= ~removal
                removed += int(removal.sum())
        return removed

    def live_masks(self) -> dict[str, torch.Tensor]:
        """Bool masks of the positions inside live channels, for every producer and consumer weight."""
        masks: dict[str, torch.Tensor] = {}
        for g in self.groups:
            spatial = (1,) * (g.dims - 2)  # a convolution's kernel dimensions
            masks[g.producer] = g.row_keep().view(-1, 1, *spatial)
            masks[g.consumer] = g.column_keep().view(1, -1, *spatial)
        return masks

    @torch.no_grad()
    def zero_dead_biases(self, params: Mapping[str, torch.nn.Parameter], optimizer: torch.optim.Optimizer) -> None:
        """Zero the producing bias and the norm's per-channel parameters (and their optimizer state)
        of every removed channel, as Chase zeroes the bias; their gradient is exactly 0 from then
        on, since every consuming weight is masked."""
        for g in self.groups:
            for name, dead in ((g.producer_bias, ~g.row_keep()), *((n, ~g.keep) for n in g.norm)):
                if name is None:
                    continue
                param = params[name]
                param.masked_fill_(dead, 0.0)
                zero_state(optimizer, param, dead)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {g.producer: g.keep.to("cpu", copy=True) for g in self.groups}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        for g in self.groups:
            g.keep.copy_(state[g.producer].to(g.keep.device))
