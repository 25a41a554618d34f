"""Chase (Yin et al., 2023): global unstructured DST with a soft budget, plus gradual channel removal."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from dstbench.util import distributed

from dstbench.dst import phases
from dstbench.dst.registry import register_method
from dstbench.dst.update_schedule import UpdateSchedule
from dstbench.dst.masked.channels import ChannelPruner, channel_pairs
from dstbench.dst.masked.distributions import target_active
from dstbench.dst.masked.masked_method import MaskedMethod, MaskedParams
from dstbench.dst.masked.scorers import GradientGrow, Magnitude, select_top
from dstbench.models.timm_models import family


@register_method("chase", kind="masked")
class Chase(MaskedMethod):
    """Chase: global magnitude prune and global gradient grow under a soft budget, while FFN units
    and attention heads are removed gradually by their unit mean magnitude.

    Recipe (luuyin/chase, its CIFAR scripts): random sparse init at ERK layer densities. Every
    `delta_t` (100) steps until `t_end` (0.75), after that step's optimizer step:
      1. channels: each kind (FFN hidden units, heads) is pruned towards channel sparsity
         `S(t) = S_c * (1 - (1 - t / T) ** 3)` (`channel_sparsity` S_c = 0.5; T the last scheduled
         update, so S_c is reached by an update that runs), removing the
         lowest-UMM channels under one global threshold, never below `channel_floor * (1 - S_c) * C`
         channels per block (`channel_floor` beta = 0.2); a removed channel's producing rows
         (fc1 row; the head's q, k, v rows) and consuming columns (fc2 column; proj columns) are
         masked and its producing bias zeroed;
      2. global magnitude prune back to the budget `round(density * total)`;
      3. global grow by |dense gradient| among inactive positions of live channels up to the soft
         budget `density + extra`, `extra` decaying by cosine from `death_rate` (0.05); the last
         scheduled update grows no extra, so training ends at the hard budget.
    Between updates the model holds the soft budget, so `density_achieved` exceeds the target by
    up to `death_rate` until the last update (set `death_rate: 0` for a hard budget throughout).

    Deviations: channel removal runs at the unstructured updates (Chase uses its own interval) and
    the cubic schedule ends at the last update before t_end; the soft extra is forced to 0 at that
    update (the cosine would only reach 0 at t_end, after it); heads and FFN units are two pools, each with its own global
    threshold (Chase's CNNs have one kind of channel); S_c is capped at `1 - (density + death_rate)`
    so the live channels can still hold the soft budget (never binding at Chase's densities <= 0.1);
    a weight pruned and regrown in one update keeps its value (the shared rule; Chase zeroes it).

    On a CNN (timm ResNet blocks, ConvNeXt's 1x1-convolution MLPs) a channel is a block's inner
    channel: an output channel of conv1 (and of a bottleneck's conv2) with its batch norm, whose
    weight and bias are zeroed with it, consumed by the next convolution's input channel; all of a
    model's inner channels form one pool ("channel"). Channels that feed a residual sum are never
    removed (each block on the stream would have to drop them together), so the channel sparsity
    is of the inner channels only.
    """

    @classmethod
    def model_problem(cls, model: torch.nn.Module, params: Mapping[str, Any], model_prunable: str | None) -> str | None:
        """`MaskedMethod.model_problem`, and: the model has channels to remove (`channel_pairs`)."""
        problem = super().model_problem(model, params, model_prunable)
        if problem is None and not channel_pairs(model):
            return f"chase removes the channels of timm Attention, Mlp and ResNet blocks, and the {family(model)} has none"
        return problem

    @dataclasses.dataclass
    class Params(MaskedParams):
        death_rate: float = 0.05  # soft-budget extra density at the first update (cosine decay to 0)
        channel_sparsity: float = 0.5  # S_c: final fraction of FFN units and of heads removed
        channel_floor: float = 0.2  # beta: a block keeps at least beta * (1 - S_c) * C channels

        def __post_init__(self) -> None:
            super().__post_init__()
            if not 0.0 <= self.death_rate <= 1.0:
                raise ValueError(f"death_rate must be in [0, 1], got {self.death_rate}")
            if not 0.0 <= self.channel_sparsity < 1.0:
                raise ValueError(f"channel_sparsity must be in [0, 1), got {self.channel_sparsity}")
            if not 0.0 <= self.channel_floor <= 1.0:
                raise ValueError(f"channel_floor must be in [0, 1], got {self.channel_floor}")
            if self.execution == "semi_structured":
                # A dead fc1 row or fc2 column would have to hold 2 of every 4 weights.
                raise ValueError("chase removes whole channels, which 2:4 sparsity cannot hold; use execution masked or csr")

    prune = Magnitude()
    grow = GradientGrow()

    def __init__(self, model: torch.nn.Module, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.soft_schedule = dataclasses.replace(self.schedule, drop_fraction=float(self.params.death_rate))
        soft_peak = min(1.0, self.target_density + float(self.params.death_rate))
        self.channel_sparsity = min(float(self.params.channel_sparsity), 1.0 - soft_peak)
        self.channels = ChannelPruner(
            self.model, self.channel_sparsity, float(self.params.channel_floor), self.schedule.last_update_step
        )
        outside = sorted(self.channels.weight_names() - set(self.mask_set.names))
        if outside:
            raise ValueError(f"chase: channel weights {outside} are not prunable under pattern {self.params.prunable or self.model_prunable!r}")

    def build_schedule(self) -> UpdateSchedule:
        # No per-layer drop fraction: what an update exchanges is set by the soft budget, whose
        # extra follows `soft_schedule` (this schedule with `death_rate` as its peak).
        return UpdateSchedule(
            delta_t=int(self.params.delta_t), t_end=float(self.params.t_end), drop_fraction=0.0, total_steps=self.total_steps
        )

    def update_topology(self, step: int) -> None:
        if not self.gradients_finite():
            self.updates_skipped += 1
            return
        weights = self.mask_set.weights
        first = next(iter(weights.values()))
        total = self.mask_set.numel()
        segments, offset = {}, 0
        for name, weight in weights.items():
            segments[name] = slice(offset, offset + weight.numel())
            offset += weight.numel()
        with self.update_phase(phases.SCORING):
            self.channels.remove(step, weights, self.generator)
            if self.distributed:
                # Rank 0's channel choice (the masks themselves are agreed in `set_mask`): the
                # biases zeroed below must be the same on every rank.
                for group in self.channels.groups:
                    distributed.broadcast_(group.keep)
            live = self.channels.live_masks()
            # Flat buffers over all layers, built once: the active positions inside live channels,
            # the positions inside live channels, and one score buffer that holds the (negated)
            # drop scores and then the grow scores. An update thus holds about two fp32 copies of
            # the prunable weights, not one per score kind plus their concatenations.
            active = torch.empty(total, dtype=torch.bool, device=first.device)
            allowed = torch.ones(total, dtype=torch.bool, device=first.device)
            scores = torch.empty(total, dtype=first.dtype, device=first.device)
            for name, weight in weights.items():
                seg = segments[name]
                active[seg].view(weight.shape).copy_(self.mask_set.active(name))
                if name in live:
                    allowed[seg].view(weight.shape).copy_(live[name].expand_as(weight))
                # One layer's score at a time, copied into the buffer.
                scores[seg].view(weight.shape).copy_(self.prune(weight.detach(), weight.grad))
            active &= allowed
            scores.neg_()  # lowest |w| first
        with self.update_phase(phases.PRUNE_GROW):
            kept = int(active.sum())
            # Prune back to the budget (it may already be below it after channel removal).
            n_drop = max(0, kept - target_active(total, self.target_density))
            active[select_top(scores, active, n_drop, self.generator, overwrite=True)] = False
            kept -= n_drop
        with self.update_phase(phases.SCORING):
            for name, weight in weights.items():
                grow = self.grow(weight.detach(), weight.grad, self.generator)
                scores[segments[name]].view(weight.shape).copy_(grow)
        with self.update_phase(phases.PRUNE_GROW):
            # Grow up to the soft budget, only inside live channels.
            allowed &= ~active
            n_grow = min(int(allowed.sum()), max(0, self.soft_budget(step) - kept))
            active[select_top(scores, allowed, n_grow, self.generator, overwrite=True)] = True
            del scores, allowed
            for name, weight in weights.items():
                self.mask_set.set_mask(name, active[segments[name]].view(weight.shape))
            self.channels.zero_dead_biases(dict(self.model.named_parameters()), self.optimizer)

    def result_extras(self) -> dict[str, Any]:
        return {
            **super().result_extras(),
            "channel_sparsity_final": self.channel_sparsity,
            "channel_sparsity_target": self.channels.target(self.step),
            "channel_sparsity": {kind: self.channels.sparsity(kind) for kind in dict.fromkeys(g.kind for g in self.channels.groups)},
        }

    def method_buffers(self) -> dict[str, torch.Tensor]:
        keeps = {f"channels:{g.producer}": g.keep for g in self.channels.groups}
        return {**super().method_buffers(), **keeps}

    def extra_state_dict(self) -> dict[str, Any]:
        return {**super().extra_state_dict(), "channels": self.channels.state_dict()}

    def load_extra_state_dict(self, state: dict[str, Any]) -> None:
        super().load_extra_state_dict(state)
        if "channels" in state:
            self.channels.load_state_dict(state["channels"])
