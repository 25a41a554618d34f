"""BARTER: compact dynamic sparse training whose tensors physically shrink.

The ViT is made compact at construction (`dstbench.dst.compact.compact_vit`): at density d the blocks hold
H = round(d * total heads) heads (halves up, as every count in dstbench) and C FFN channels, C the
count that brings the prunable weights closest to d times their full count (`budgets`: the channels
absorb the heads' rounding, so BARTER holds the masked methods' weight count, not up to half a head
per model more), spread evenly, as physically sized tensors; with the suite's `fuse_norms` the
blocks run norm1+qkv and norm2+fc1 fused, as every method's blocks then do. Training runs on that
compact model. Every `delta_t` steps until `t_end`, with the replaced fraction on RigL's cosine
schedule, heads and channels are exchanged, each kind under its own fixed budget: fraction x budget
plus the remainder carried from the updates before, rounded down (`carried_count`: over the run the
exchanges add up to within one unit of what the schedule asked, where rounding each update alone
would move one of 2 heads at every update), units with the lowest
accumulated Taylor importance (`dstbench.dst.compact.importance`) are pruned and as many units are grown;
the tensors are resized and the optimizer state remapped (`dstbench.dst.compact.surgery`), so no dense
tensor ever exists.

Units made at an update (`fresh_units`). A clone's outgoing weights are split 1/k between its k
copies (Net2WiderNet, function-preserving), so each copy's Taylor score starts at 1/k of its
source's: it says what removing one copy costs while the others stay, not whether the capacity
was worth having, and the next update tends to prune a copy first (measured: see
`reports/barter_ablation/`). `split` uses the scores as they are; `rescale` multiplies the score of
every copy made at the previous update by its k (its source's scale: the split undone when
comparing); `exempt` keeps every unit made at the previous update (each copy, the first included,
and each new unit) out of the next prune, so it gets one interval of training before it is judged.
A new unit has no source, so `rescale` scores it as it is. The default is `split`, chosen by
measurement (`reports/barter_ablation/README.md`): `rescale` does make the scores comparable (units
made at the previous update are then pruned about as often as their share of the population,
instead of about twice as often), but neither it nor `exempt` raised top-1 there (both were 0.3 to
0.9 points below `split`, within seed noise). A copy pruned at the next update leaves an exchange
that changed little.

Where capacity grows (`grow`). `clone`: the highest-scoring survivors are cloned into their own
blocks, so capacity moves only where a unit already is, and a block that loses its last head never
gets one back. `clone_or_new`: a block below its dense width (an empty one included) may also
receive a *new* unit, and the grown units are chosen by RigL's grow criterion lifted to whole
units, the norm of the gradient of the outgoing weights the grown unit would have, read from the
update step's own gradients (already there: nothing is added to the other steps, no dense gradient,
no extra pass). A clone of u starts with u's activation, so its outgoing gradient is u's own
(the norm of u's fc2 or proj columns' gradient). A would-be unit has no gradient until it exists,
so dstbench makes new units whose activation is known before they exist: the same on every token.
A new head has zero value rows and a random unit-norm value bias e, so its context is e whatever it
attends to; a new FFN channel has the fc1 bias b with act(b) = 1 (GELU: 1.14). Its outgoing
gradient is then the branch's output-bias gradient times that activation, so its score is the norm
of the output-bias gradient, exactly for a head and to first order in its fc1 row (drawn at timm's
init scale, std 0.02, so that new channels differ) for a channel. q and k rows are drawn at timm's
scale too, and every new unit starts with zero outgoing weights (the function is unchanged, as a
RigL-grown weight starts at 0) and zero optimizer state. Each candidate, a survivor or a block's
new unit, grows at most one unit per round (a round is one pass down the ranking), so the budgets
stay exact as with clones. New units need the producing and consuming biases (timm's defaults).
The default is `clone`: in the same ablation `clone_or_new` made new units (12 of the 31 grown heads
at density 0.5, a twentieth to a fifth of the grown channels) without buying top-1, so the simpler
rule stays and `clone_or_new` is there to select.

Each update records, per unit kind, `pruned`, `pruned_clones` (of those, units made at the previous
update), `population`, `clone_population` (units made at the previous update before this one),
`moved` (units that changed block), `cloned`, `new` and `asked` (fraction x budget, before the
carried remainder) in `topology_history[i]["exchange"]`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from dstbench.util import distributed

from dstbench.dst import phases
from dstbench.dst.compact.importance import TaylorImportance
from dstbench.dst.compact.surgery import Swap, blank_units, remap_optimizer, resize_units
from dstbench.dst.compact.unit_exchange import assign_slots, exchange_counts, made_by, plan_exchange
from dstbench.dst.compact.compact_vit import (
    barter_layout, compact_blocks, compact_vit, empty_branch_parameters, full_prunable_numel, topology, unit_activation_bias,
)
from dstbench.dst.method_base import Method
from dstbench.dst.optimizer import build_optimizer
from dstbench.dst.registry import register_method
from dstbench.dst.update_schedule import UpdateSchedule, carried_count


FRESH_UNITS = ("split", "rescale", "exempt")
GROW = ("clone", "clone_or_new")
KINDS = ("heads", "hidden")


@register_method("barter", kind="compact")
class Barter(Method):
    """Compact DST: prunes and clones whole heads and FFN channels; tensors and optimizer state resized.

    The optimizer step of an update step is taken (`update_replaces_step = False`): the scores come
    from accumulators, not from that step's gradient, so skipping it would only waste a step; the
    surgery then starts from the stepped weights and their state.
    """

    update_replaces_step = False
    vision_transformer_only = True  # its units are the heads and MLP channels of ViT blocks

    @dataclasses.dataclass
    class Params:
        delta_t: int = 100  # steps between topology updates
        t_end: float = 0.75  # end of updates (exclusive): a fraction of total_steps (<= 1) or a step
        drop_fraction: float = 0.3  # units exchanged at the first update (cosine decay to 0)
        clone_noise: float = 0.1  # relative, zero-sum noise on the split of a clone's outgoing weights
        fresh_units: str = "split"  # units made at the last update: split | rescale | exempt
        grow: str = "clone"  # clone | clone_or_new

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
            if self.fresh_units not in FRESH_UNITS:
                raise ValueError(f"fresh_units must be one of {', '.join(FRESH_UNITS)}, got {self.fresh_units!r}")
            if self.grow not in GROW:
                raise ValueError(f"grow must be one of {', '.join(GROW)}, got {self.grow!r}")

    @classmethod
    def initial_layout(cls, model: nn.Module, density: float, params: dict[str, Any]) -> tuple[list[int], list[int]]:
        """The heads and FFN channels per block it starts from on a dense timm ViT (`--dry-run`)."""
        return barter_layout(model, density)

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
        if self.params.grow == "clone_or_new":
            for block in compact_blocks(self._model):
                unit_activation_bias(block.mlp.act)  # an activation that never reaches 1: fail now, not at the first update
        # Under DDP the scores are taken from the averaged gradients (see TaylorImportance).
        self.importance = TaylorImportance(self._model, self.scaler, from_synced_grads=self.distributed)
        self.history: list[dict[str, Any]] = [self._snapshot(0)]
        self.updates_skipped = 0  # updates left out because a score was not finite
        # Per unit (flat, as the importance buffers), how it was made at the last exchange: the
        # number of copies its source was split into, 1 for a new unit, 0 if not made then. Host.
        budgets = self.budgets()
        self.made = {kind: torch.zeros(n, dtype=torch.long) for kind, n in budgets.items()}
        # Per unit kind, the part of a unit asked by the updates so far and not yet exchanged.
        self.carried = {kind: 0.0 for kind in KINDS}

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
        return super().ddp_ignored_parameters() | empty_branch_parameters(self.model)

    def _snapshot(self, step: int, **extra: Any) -> dict[str, Any]:
        topo = self.topology()
        return {"step": step, "heads": [t["heads"] for t in topo], "hidden": [t["hidden"] for t in topo], **extra}

    # -- hooks ------------------------------------------------------------------------------------
    def after_backward(self, step: int) -> None:
        self.importance.end_step()  # nothing to do unless the loss is scaled (fp16)

    def update_topology(self, step: int) -> None:
        fraction = self.schedule.fraction(step)
        blocks = compact_blocks(self.model)
        modules = {"heads": [b.attn for b in blocks], "hidden": [b.mlp for b in blocks]}
        with self.update_phase(phases.SCORING):
            flat = [self.importance.heads, self.importance.channels]
            if self.params.grow == "clone_or_new":
                flat += [_grow_scores(modules["heads"]), _grow_scores(modules["hidden"])]
            flat = torch.cat(flat)
            if self.distributed:
                # The scores come from the averaged gradients, so they are the global batch's and
                # the same on every rank already; taking rank 0's makes every rank plan the same
                # exchange by construction (the generator was agreed before the update too).
                distributed.broadcast_(flat)
            # The update's one host-device sync. A copy even on the CPU (where `.cpu()` would return
            # the accumulator itself), since the accumulators are reset right after.
            flat = flat.to("cpu", copy=True)
            self.importance.reset()
        if not torch.isfinite(flat).all():
            # A diverged step left a NaN or inf score, which would rank first: keep the topology,
            # as the masked methods skip an update on a non-finite gradient.
            self.updates_skipped += 1
            self.history.append(self._snapshot(step, skipped=True))
            return
        sizes = {"heads": len(self.importance.heads), "hidden": len(self.importance.channels)}
        scores = dict(zip(KINDS, flat[: sum(sizes.values())].split([sizes["heads"], sizes["hidden"]])))
        growth = flat[sum(sizes.values()) :]
        growth = growth.split([sizes["heads"] + len(blocks), sizes["hidden"] + len(blocks)]) if len(growth) else ()
        plans, stats = {}, {}
        with self.update_phase(phases.PRUNE_GROW):
            for index, kind in enumerate(KINDS):
                grow = growth[index].split([sizes[kind], len(blocks)]) if growth else None
                k, self.carried[kind] = carried_count(fraction * sizes[kind], self.carried[kind])
                plans[kind], stats[kind] = self._plan(kind, modules[kind], scores[kind], k, grow)
                stats[kind]["asked"] = fraction * sizes[kind]
        with self.update_phase(phases.RESIZE):
            swaps: list[Swap] = []
            for kind in KINDS:
                for module, sources in zip(modules[kind], plans[kind]):
                    if sources == list(range(len(module.slots))):
                        continue  # untouched block: its Parameters (and hooks) stay
                    module.slots = assign_slots(module.slots, sources, module.max_units)
                    n_new = sum(1 for s in sources if s < 0)
                    swaps += resize_units(
                        module.unit_axes(), sources, noise=self.params.clone_noise, generator=self.generator,
                        new_values=module.new_unit_values(n_new, self.generator) if n_new else None,
                    )
            self.importance.attach()
        with self.update_phase(phases.STATE_REMAP):
            remap_optimizer(self.optimizer, swaps)
        self.history.append(
            self._snapshot(
                step, fraction=fraction, cloned_heads=stats["heads"]["cloned"], cloned_hidden=stats["hidden"]["cloned"],
                exchange=stats,
            )
        )

    def _plan(
        self, kind: str, modules: list[Any], scores: torch.Tensor, k: int, grow: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[list[list[int]], dict[str, int]]:
        """One unit kind's exchange under the `fresh_units` rule (and, with `grow`, the per-unit and
        per-block grow scores): the plan, what it does, and the units it makes, kept for the next."""
        counts = [len(m.slots) for m in modules]
        caps = [m.max_units for m in modules]
        made = self.made[kind]
        options: dict[str, Any] = {}
        if self.params.fresh_units == "rescale":
            scores = scores * made.clamp(min=1).to(scores.dtype)  # a copy at its source's scale
        elif self.params.fresh_units == "exempt":
            options["protected"] = made > 0
        if grow is not None:
            room = torch.tensor([c < cap and _makes_new_units(m) for c, cap, m in zip(counts, caps, modules)])
            options["grow_scores"], options["new_scores"] = grow[0], torch.where(room, grow[1], torch.nan)
        plan = plan_exchange(scores, counts, caps, k, self.generator, **options)
        kept = torch.zeros(len(made), dtype=torch.bool)
        offset = 0
        for sources, count in zip(plan, counts):
            kept[[offset + s for s in sources if s >= 0]] = True
            offset += count
        stats = exchange_counts(plan, counts)
        stats.update(population=len(made), clone_population=int((made > 0).sum()), pruned_clones=int(((made > 0) & ~kept).sum()))
        self.made[kind] = torch.tensor(made_by(plan), dtype=torch.long)
        return plan, stats

    # -- checkpoints --------------------------------------------------------------------------------
    def extra_state_dict(self) -> dict[str, Any]:
        return {
            "blocks": [
                {"head_slots": list(b.attn.slots), "hidden_slots": list(b.mlp.slots)} for b in compact_blocks(self.model)
            ],
            "importance": {"heads": self.importance.heads.clone(), "channels": self.importance.channels.clone()},
            "made": {kind: made.clone() for kind, made in self.made.items()},
            "carried": dict(self.carried),
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
        # Checkpoints from before `made` was kept: no unit counts as made at the last update.
        for kind, made in state.get("made", {}).items():
            self.made[kind] = made.clone().to("cpu", torch.long)
        # Checkpoints from before the remainder was carried: nothing carried.
        self.carried = {kind: float(state.get("carried", {}).get(kind, 0.0)) for kind in KINDS}
        self.history = [dict(entry) for entry in state["history"]]


def _grow_scores(modules: list[Any]) -> torch.Tensor:
    """RigL's grow criterion for whole units, from the update step's gradients (already there, so
    nothing is added to the other steps): flat, every unit's outgoing-gradient norm (a clone of it
    starts with exactly that gradient), then per block the norm of the output-bias gradient (a new
    unit's outgoing gradient, see the module docstring); 0 where that bias has no gradient (blocks
    that cannot make a unit are set to NaN in `_plan`)."""
    units, new = [], []
    for module in modules:
        out = module.unit_axes()[-1]
        weight = out.param
        if weight.grad is None or not module.slots:
            units.append(weight.new_zeros(len(module.slots)))
        else:
            units.append(weight.grad.view(weight.shape[0], len(module.slots), -1).square().sum(dim=(0, 2)).sqrt())
        bias = out.module.bias
        new.append(bias.grad.norm().view(1) if bias is not None and bias.grad is not None else weight.new_zeros(1))
    return torch.cat(units + new).float()


def _makes_new_units(module: Any) -> bool:
    """A new unit needs a producing bias (its constant activation) and a consuming bias (its score)."""
    return module.unit_axes()[-1].module.bias is not None and module.unit_axes()[0].module.bias is not None
