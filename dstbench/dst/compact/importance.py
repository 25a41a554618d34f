"""First-order Taylor importance of every active head and FFN channel, from the ordinary backward.

The score of a unit at one step is ``|sum over batch, tokens (and a head's dims) of a * dL/da|``,
where ``a`` is the unit's output (a channel's activation entering fc2; a head's context vector
entering proj): the first-order estimate of the change in loss if the unit were removed.

It is computed without touching an activation: the unit's outgoing weight ``W[:, u]`` (fc2 or proj
columns) has gradient ``G[o, u] = sum_{b,t} g_o * a_u`` and ``dL/da_u = sum_o W[o, u] g_o``, so
``sum_{b,t} a_u dL/da_u = sum_o W[o, u] G[o, u]``. A post-accumulate-grad hook on each outgoing
weight adds ``|sum_o W * G|`` per unit to a device accumulator while backward runs: no extra pass,
no dense gradient, no saved tensor, no host synchronisation; the work (and one transient product)
is the size of the compact weight, not of the activations. Scores accumulate between topology
updates and are reset after each.

Distributed (`from_synced_grads`): the hooks would see each rank's own gradient, before DDP
averages it, and the score of the global batch is not the sum of the ranks' absolute scores. So
under DDP no hook is registered: `end_step` computes the same product from the averaged gradients
once backward has returned. The scores are then the global batch's, equal on every rank, and
equal to those of one process that trains on all ranks' images; the work is the same, it only no
longer overlaps the backward pass.

Under fp16 loss scaling the gradients are scaled and may overflow: the step's scores then go
through a staging buffer, are divided by the scale and dropped as a whole when one is not finite
(the scaler skips that step too), all on the device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dstbench.dst.compact.compact_vit import compact_blocks


class TaylorImportance:
    """Per-unit score accumulators for a compact ViT, fed by hooks on fc2 and proj weights.

    `heads` and `channels` are flat: block after block, each block's units in tensor order. Their
    sizes are the budgets, which no update changes. Call `attach()` again after a resize (the hooks
    belong to the replaced Parameters).
    """

    def __init__(self, model: nn.Module, scaler: Any = None, from_synced_grads: bool = False) -> None:
        self.model = model
        self.from_synced_grads = bool(from_synced_grads)
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        blocks = compact_blocks(model)
        device = blocks[0].attn.qkv.weight.device if blocks else torch.device("cpu")
        total_heads = sum(b.attn.num_heads for b in blocks)
        total_channels = sum(b.mlp.hidden for b in blocks)
        self.heads = torch.zeros(total_heads, device=device)
        self.channels = torch.zeros(total_channels, device=device)
        # With a loss scaler each step is staged first (see module docstring).
        self._staged = (torch.zeros_like(self.heads), torch.zeros_like(self.channels)) if self.scaler else None
        self._handles: list[Any] = []
        # from_synced_grads: (outgoing weight, its accumulator slice, units), read by `end_step`.
        self._targets: list[tuple[nn.Parameter, torch.Tensor, int]] = []
        self.attach()

    def attach(self) -> None:
        """(Re-)register the hooks on the current outgoing weights, each writing to its block's slice."""
        self.detach()
        heads_out, channels_out = self._staged or (self.heads, self.channels)
        head_offset = channel_offset = 0
        for block in compact_blocks(self.model):
            h, c = block.attn.num_heads, block.mlp.hidden
            if h:
                self._watch(block.attn.proj.weight, heads_out[head_offset : head_offset + h], h)
            if c:
                self._watch(block.mlp.fc2.weight, channels_out[channel_offset : channel_offset + c], c)
            head_offset += h
            channel_offset += c
        if head_offset != len(self.heads) or channel_offset != len(self.channels):
            raise RuntimeError("the model's unit counts no longer match the importance budgets")

    def _watch(self, weight: nn.Parameter, target: torch.Tensor, units: int) -> None:
        if self.from_synced_grads:
            self._targets.append((weight, target, units))
        else:
            self._handles.append(weight.register_post_accumulate_grad_hook(self._hook(target, units)))

    def _hook(self, target: torch.Tensor, units: int):
        staged = self._staged is not None

        def hook(weight: torch.Tensor) -> None:
            _score_into(target, weight, units, staged)

        return hook

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._targets = []

    def end_step(self) -> None:
        """After backward: score from the averaged gradients (`from_synced_grads`), and fold a
        staged (loss-scaled) step into the accumulators."""
        for weight, target, units in self._targets:
            if weight.grad is not None:
                _score_into(target, weight, units, self._staged is not None)
        if self._staged is None:
            return
        inv_scale = self.scaler._get_scale_async().double().reciprocal().float()
        heads, channels = (staged * inv_scale for staged in self._staged)
        # One verdict for the whole step, as the scaler's own: kept only if every score is finite.
        finite = torch.isfinite(heads).all() & torch.isfinite(channels).all()
        self.heads.add_(torch.where(finite, heads, torch.zeros_like(heads)))
        self.channels.add_(torch.where(finite, channels, torch.zeros_like(channels)))

    def reset(self) -> None:
        self.heads.zero_()
        self.channels.zero_()

    def buffers(self) -> dict[str, torch.Tensor]:
        out = {"head_importance": self.heads, "channel_importance": self.channels}
        if self._staged is not None:
            out.update(head_importance_step=self._staged[0], channel_importance_step=self._staged[1])
        return out


def _score_into(target: torch.Tensor, weight: torch.Tensor, units: int, staged: bool) -> None:
    """Add this step's score of each unit of `weight`'s layer to `target` (or stage it)."""
    with torch.no_grad():
        w = weight.detach()
        # (out, units * unit_size) -> per unit: sum over outputs and the unit's own dims.
        score = (w * weight.grad).view(w.shape[0], units, -1).sum(dim=(0, 2)).abs_()
        if staged:
            target.copy_(score)
        else:
            target.add_(score)
