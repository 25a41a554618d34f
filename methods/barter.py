"""BARTER: compact dynamic sparse training whose tensors physically shrink.

The ViT is made compact at construction (`dstbench.compact.vit`): at density d the blocks hold
H = round(d * total heads) heads and C = round(d * total FFN channels) channels (halves up, as every
count in dstbench), spread evenly, as physically sized tensors; with the suite's `fuse_norms` the
blocks run norm1+qkv and norm2+fc1 fused, as every method's blocks then do. Training runs on that
compact model. Every `delta_t` steps until `t_end`, with the replaced fraction on RigL's cosine
schedule, heads and channels are exchanged, each kind under its own fixed budget: the
round(fraction * budget) units with the lowest
accumulated Taylor importance (`dstbench.compact.importance`) are pruned and as many clones of the
highest-scoring ones are made (Net2WiderNet, function-preserving); the tensors are resized and the
optimizer state remapped (`dstbench.compact.surgery`), so no dense tensor ever exists.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from dstbench import distributed, phases
from dstbench.compact.importance import TaylorImportance
from dstbench.compact.surgery import Swap, blank_units, remap_optimizer, resize_units
from dstbench.compact.topology import assign_slots, plan_exchange
from dstbench.compact.vit import compact_blocks, compact_vit, full_prunable_numel, topology
from dstbench.method import Method
from dstbench.optim import build_optimizer
from dstbench.registry import register_method
from dstbench.schedule import UpdateSchedule, round_half_up


@register_method("barter", kind="compact")
class Barter(Method):
    """Compact DST: prunes and clones whole heads and FFN channels; tensors and optimizer state resized.

    The optimizer step of an update step is taken (`update_replaces_step = False`): the scores come
    from accumulators, not from that step's gradient, so skipping it would only waste a step; the
    surgery then starts from the stepped weights and their state.
    """

    update_replaces_step = False

    @dataclasses.dataclass
    class Params:
        delta_t: int = 100  # steps between topology updates
        t_end: float = 0.75  # end of updates (exclusive): a fraction of total_steps (<= 1) or a step
        drop_fraction: float = 0.3  # units exchanged at the first update (cosine decay to 0)
        clone_noise: float = 0.1  # relative, zero-sum noise on the split of a clone's outgoing weights

        def __post_init__(self) -> None:
            # Checked here, so a suite is refused before anything runs (types: `Method.parse_params`).
            if int(self.delta_t) != self.delta_t or self.delta_t <= 0:
                raise ValueError(f"delta_t must be a positive integer, got {self.delta_t!r}")
            if self.t_end < 0:
                raise ValueError(f"t_end must be >= 0, got {self.t_end}")
            if not 0.0 <= self.drop_fraction <= 1.0:
                raise ValueError(f"drop_fraction must be in [0, 1], got {self.drop_fraction}")
            if self.clone_noise < 0:
                raise ValueError(f"clone_noise must be >= 0, got {self.clone_noise}")

    def __init__(self, model: nn.Module, *, density: float, **kwargs: Any) -> None:
        # The base validates everything and builds an optimizer over the dense model (no state yet);
        # the model is then made compact and the optimizer built over the compact Parameters.
        super().__init__(model, density=density, **kwargs)
        compact_vit(self._model, density, fuse_norms=self.fuse_norms)
        self._optimizer = build_optimizer(self.optimizer_spec, self._model)
        self.schedule = UpdateSchedule(
            self.params.delta_t, self.params.t_end, self.params.drop_fraction, self.total_steps
        )
        self._full_numel = full_prunable_numel(self._model)
        # Under DDP the scores are taken from the averaged gradients (see TaylorImportance).
        self.importance = TaylorImportance(self._model, self.scaler, from_synced_grads=self.distributed)
        self.history: list[dict[str, Any]] = [self._snapshot(0)]
        self.updates_skipped = 0  # updates left out because a score was not finite

    # -- what the harness reads -------------------------------------------------------------------
    def topology(self) -> list[dict[str, int]]:
        """Per block, the heads and FFN channels it holds."""
        return topology(self.model)

    def budgets(self) -> dict[str, int]:
        return {"heads": len(self.importance.heads), "hidden": len(self.importance.channels)}

    def density(self) -> float:
        """Fraction of the full-size model's qkv/proj/fc1/fc2 weights physically present."""
        return sum(w.numel() for w in self.prunable().values()) / self._full_numel

    def method_buffers(self) -> dict[str, torch.Tensor]:
        return self.importance.buffers()

    def result_extras(self) -> dict[str, Any]:
        blocks = compact_blocks(self.model)
        return {
            "budgets": self.budgets(),
            "updates_skipped": self.updates_skipped,
            "dense_width": {"heads": [b.attn.max_units for b in blocks], "hidden": [b.mlp.max_units for b in blocks]},
            "topology_history": [dict(entry) for entry in self.history],
        }

    def ddp_ignored_parameters(self) -> set[str]:
        """Parameters of empty branches: a block without heads (or FFN channels) skips its norm and
        matmuls and adds only the output bias, so DDP must not wait for their gradients."""
        ignored = super().ddp_ignored_parameters()
        for index, block in enumerate(compact_blocks(self.model)):
            unused = (["norm1", "attn"] if block.attn.num_heads == 0 else []) + (["norm2", "mlp"] if block.mlp.hidden == 0 else [])
            for part in unused:
                for name, _ in getattr(block, part).named_parameters():
                    ignored.add(f"blocks.{index}.{part}.{name}")
            # The output bias of an empty branch is still added to every token.
            ignored.discard(f"blocks.{index}.attn.proj.bias")
            ignored.discard(f"blocks.{index}.mlp.fc2.bias")
        return ignored

    def _snapshot(self, step: int, **extra: Any) -> dict[str, Any]:
        topo = self.topology()
        return {"step": step, "heads": [t["heads"] for t in topo], "hidden": [t["hidden"] for t in topo], **extra}

    # -- hooks ------------------------------------------------------------------------------------
    def after_backward(self, step: int) -> None:
        self.importance.end_step()  # nothing to do unless the loss is scaled (fp16)

    def update_topology(self, step: int) -> None:
        fraction = self.schedule.fraction(step)
        blocks = compact_blocks(self.model)
        with self.update_phase(phases.SCORING):
            if self.distributed:
                # The scores come from the averaged gradients, so they are the global batch's and
                # the same on every rank already; taking rank 0's makes every rank plan the same
                # exchange by construction (the generator was agreed before the update too).
                distributed.broadcast_(self.importance.heads)
                distributed.broadcast_(self.importance.channels)
            # The update's one host-device sync. A copy even on the CPU (where `.cpu()` would return
            # the accumulator itself), since the accumulators are reset right after.
            head_scores = self.importance.heads.to("cpu", copy=True)
            channel_scores = self.importance.channels.to("cpu", copy=True)
            self.importance.reset()
        if not (torch.isfinite(head_scores).all() and torch.isfinite(channel_scores).all()):
            # A diverged step left a NaN or inf score, which would rank first: keep the topology,
            # as the masked methods skip an update on a non-finite gradient.
            self.updates_skipped += 1
            self.history.append(self._snapshot(step, skipped=True))
            return
        with self.update_phase(phases.PRUNE_GROW):
            budgets = self.budgets()
            k_heads = round_half_up(fraction * budgets["heads"])
            k_hidden = round_half_up(fraction * budgets["hidden"])
            head_plan = plan_exchange(
                head_scores, [b.attn.num_heads for b in blocks], [b.attn.max_units for b in blocks], k_heads, self.generator
            )
            hidden_plan = plan_exchange(
                channel_scores, [b.mlp.hidden for b in blocks], [b.mlp.max_units for b in blocks], k_hidden, self.generator
            )
        with self.update_phase(phases.RESIZE):
            swaps: list[Swap] = []
            for block, heads, hidden in zip(blocks, head_plan, hidden_plan):
                for module, sources in ((block.attn, heads), (block.mlp, hidden)):
                    if sources == list(range(len(module.slots))):
                        continue  # untouched block: its Parameters (and hooks) stay
                    module.slots = assign_slots(module.slots, sources, module.max_units)
                    swaps += resize_units(
                        module.unit_axes(), sources, noise=self.params.clone_noise, generator=self.generator
                    )
            self.importance.attach()
        with self.update_phase(phases.STATE_REMAP):
            remap_optimizer(self.optimizer, swaps)
        moved_heads = sum(len(p) - len(set(p)) for p in head_plan)
        moved_hidden = sum(len(p) - len(set(p)) for p in hidden_plan)
        self.history.append(
            self._snapshot(step, fraction=fraction, cloned_heads=moved_heads, cloned_hidden=moved_hidden)
        )

    # -- checkpoints --------------------------------------------------------------------------------
    def extra_state_dict(self) -> dict[str, Any]:
        return {
            "blocks": [
                {"head_slots": list(b.attn.slots), "hidden_slots": list(b.mlp.slots)} for b in compact_blocks(self.model)
            ],
            "importance": {"heads": self.importance.heads.clone(), "channels": self.importance.channels.clone()},
            "history": [dict(entry) for entry in self.history],
        }

    def load_extra_state_dict(self, state: dict[str, Any]) -> None:
        """Resize every block to the saved shapes (values and optimizer state are loaded next)."""
        if not state:
            return
        blocks = compact_blocks(self.model)
        saved = state["blocks"]
        if len(saved) != len(blocks):
            raise ValueError(f"checkpoint has {len(saved)} blocks, the model {len(blocks)}")
        heads = sum(len(s["head_slots"]) for s in saved)
        hidden = sum(len(s["hidden_slots"]) for s in saved)
        if {"heads": heads, "hidden": hidden} != self.budgets():
            raise ValueError(f"checkpoint budgets ({heads} heads, {hidden} channels) differ from {self.budgets()}")
        swaps: list[Swap] = []
        for block, entry in zip(blocks, saved):
            for module, slots in ((block.attn, entry["head_slots"]), (block.mlp, entry["hidden_slots"])):
                if len(slots) != len(module.slots):
                    swaps += blank_units(module.unit_axes(), len(slots))
                module.slots = list(slots)
        remap_optimizer(self.optimizer, swaps)
        self.importance.attach()
        self.importance.heads.copy_(state["importance"]["heads"])
        self.importance.channels.copy_(state["importance"]["channels"])
        self.history = [dict(entry) for entry in state["history"]]
