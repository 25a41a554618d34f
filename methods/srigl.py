"""SRigL (Lasby et al., ICLR 2024): RigL with a constant fan-in per neuron and neuron ablation.

Rules read from the authors' code, calgaryml/condensed-sparsity (`RigLConstFanScheduler`, the code
of the paper's experiments) and calgaryml's later library sparsimony (`SRigL`); where the two
differ, dstbench follows condensed-sparsity:

- ablation is decided afresh at every update, so an ablated neuron comes back when enough of its
  positions are salient by gradient (sparsimony never regrows an empty row);
- a weight is salient when it is among the `n_keep` largest |w| kept by the prune or among the
  `n_drop` largest |dense gradient| of the layer (sparsimony takes the top `n_keep` of both);
- the threshold is `max(1, int(gamma_sal * k0))`, `k0 = budget // rows` the fan-in without ablation
  (condensed-sparsity's default `use_sparse_const_fan_in_for_ablation`), or `gamma_sal` itself, an
  absolute count, from 1 up; lowered when needed so that `ceil(n / row width) + 1` neurons stay live
  (its `min_neurons`, `n` the layer's active weights);
- the update replaces that step's optimizer step (`if pruner(): optimizer.step()` in its
  `train_rigl.py`), SGD's momentum alone is zeroed where a weight is dropped (`reset_momentum`),
  the dense gradient may be averaged over the last `grad_accumulation_n` steps, and a fractional
  end is truncated (`T_end = int(0.75 * steps)`): `step_on_update`, `reset_state`,
  `grad_accumulation` and `t_end_truncated` select these (docs/methods/srigl.md).

Deviations from that code, each with its reason on docs/methods/srigl.md: every prunable layer may
ablate (it exempts its last sparse layer, the classifier, whose rows are classes; dstbench's
classifier head is dense); the layer-wide magnitude cut keeps weights of live neurons only (it could
keep an ablated neuron's), and a neuron left with more than `k` kept weights keeps its `k` largest
(it keeps an arbitrary `k`); no sparse re-initialisation of the weights (its
`use_sparse_initialization`); all optimizer state is zeroed at dropped and grown positions by
default (`reset_state: all`; `momentum` is the reference's); ties are broken by a seeded random
order.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from dstbench.dst import phases
from dstbench.dst.optimizer import STATE_KEYS
from dstbench.dst.registry import register_method
from dstbench.dst.masked.constant_fan_in import fan_in, live_neurons, random_fan_in_mask, top_per_row
from dstbench.dst.masked.masked_method import DropGrowParams, MaskedMethod
from dstbench.dst.masked.scorers import GradientGrow, Magnitude, select_top
from dstbench.dst.update_schedule import UpdateSchedule

# What `reset_state` zeroes where a mask turns off or on: every element-wise state, or SGD's
# momentum alone, as condensed-sparsity's `reset_momentum` does (Adam's moments left as they are).
RESET_STATES = {"all": STATE_KEYS, "momentum": ("momentum_buffer",)}


@register_method("srigl", kind="masked")
class SRigL(MaskedMethod):
    """SRigL: RigL with the same fan-in in every live neuron, and neurons whose weights lose their
    salience ablated whole.

    Each prunable layer of budget `B` (its ERK allotment) starts with `k0 = B // rows` random active
    weights in every output row. Every `delta_t` (100) steps until `t_end` (0.75), on RigL's cosine
    fraction, with the update replacing that step's optimizer step (RigL's dense gradient), per
    layer holding `n` weights:
      1. `n_drop = int(n * fraction)`; the `n_keep = n - n_drop` largest |w| are salient, and so are
         the `n_drop` positions of largest |dense gradient| in the layer;
      2. neuron ablation: a row with fewer than `max(1, int(gamma_sal * k0))` salient weights (or
         `gamma_sal` of them, from 1 up) is ablated (threshold lowered so that at least
         `ceil(n / row width) + 1` rows stay live); the live rows get the fan-in `k = B // live`
         (an ablated row's budget goes to the others: k grows);
      3. prune: the `n_keep` largest |w| among live rows' active weights are kept, at most `k` per
         row (a row's largest);
      4. grow: each live row regains exactly `k` by the largest |dense gradient| among its other
         positions (a weight pruned and regrown keeps its value; grown ones start at 0 with zero
         optimizer state).
    Every live row then holds exactly `k` and every ablated row none: a layer holds `k * live`
    weights, short of `B` by `B mod live`, so `density_achieved` is below the target by under one
    weight per live neuron: at most 0.002 absolute density on ViT-Small (41,472 rows over 21.2M
    prunable weights; up to 2% relative at d=0.1), 0.006 on the smoke model (width 128, 4 blocks:
    4,608 rows over 786,432; up to 6% relative at d=0.1). `result_extras` gives each layer's fan-in
    and live neurons. Executions: masked, csr, and `condensed`, the authors' representation: each
    linear's active weights as `[live, k]` values and input indices, computed by a gather and a
    batched dense product (`dstbench.dst.masked.condensed`), resized when neurons are ablated.

    On a convolution (out, in, kh, kw) a neuron is an output channel: its fan-in counts its filter's
    `in x kh x kw` inputs, and ablation removes the channel's whole filter.

    Parameters: RigL's (`delta_t` 100, `drop_fraction` 0.3, `t_end` 0.75, `distribution` erk),
    `gamma_sal` 0.3 (the default of the authors' code; their ViT configuration uses 0.95 with
    `distribution: uniform`; 0 ablates nothing; from 1 up an absolute count), and the reference's
    behaviours: `step_on_update` (False: the update replaces the step's optimizer step),
    `grad_accumulation` (1: the update grows by the mean dense gradient of the last n steps),
    `reset_state` (`all`, or the reference's `momentum`) and `t_end_truncated` (True: a fractional
    `t_end` truncated to a step). Rules and deviations: the module docstring.
    """

    @dataclasses.dataclass
    class Params(DropGrowParams):
        gamma_sal: float = 0.3  # below 1: a neuron with fewer than gamma_sal * k0 salient weights is ablated; from 1 up: fewer than gamma_sal (0: never)
        step_on_update: bool = False  # True: the optimizer steps on an update step too, before the update (the reference skips that step)
        grad_accumulation: int = 1  # the update grows by the mean dense gradient of the last n steps (the reference's grad_accumulation_n)
        reset_state: str = "all"  # zeroed where a mask turns off or on: all optimizer state, or momentum (SGD's alone, the reference's)
        t_end_truncated: bool = True  # a fractional t_end becomes int(t_end * total_steps), as the reference's T_end (False: rounded)

        # A constant fan-in per neuron: stored condensed, or masked, or as CSR; 2:4 sparsity cannot hold one.
        executions: ClassVar[tuple[str, ...]] = ("masked", "csr", "condensed")

        def __post_init__(self) -> None:
            super().__post_init__()
            if not self.gamma_sal >= 0.0:
                raise ValueError(f"gamma_sal must be >= 0 (a fraction of k0 below 1, a count from 1 up), got {self.gamma_sal}")
            if int(self.grad_accumulation) != self.grad_accumulation or not 1 <= self.grad_accumulation < self.delta_t:
                raise ValueError(
                    f"grad_accumulation must be an integer from 1 to delta_t - 1 ({int(self.delta_t) - 1}), got {self.grad_accumulation!r}"
                )
            if self.reset_state not in RESET_STATES:
                raise ValueError(f"reset_state must be one of {list(RESET_STATES)}, got {self.reset_state!r}")
            if self.reset_state == "momentum" and self.execution != "masked":
                raise ValueError(
                    f"reset_state momentum keeps Adam's moments where a weight is masked, which execution {self.execution} "
                    "does not store (it holds state for active weights alone); use execution masked"
                )

    update_replaces_step = True
    prune = Magnitude()
    grow = GradientGrow()

    def __init__(self, model: torch.nn.Module, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.update_replaces_step = not self.params.step_on_update
        self.mask_set.reset_keys = RESET_STATES[self.params.reset_state]
        # The dense gradients summed over an accumulation window (`grad_accumulation` > 1), by layer.
        self.accumulated: dict[str, torch.Tensor] = {}

    def build_schedule(self) -> UpdateSchedule:
        return UpdateSchedule(
            delta_t=int(self.params.delta_t), t_end=float(self.params.t_end), drop_fraction=float(self.params.drop_fraction),
            total_steps=self.total_steps, truncate_t_end=bool(self.params.t_end_truncated),
        )

    # -- the reference's gradient accumulation --------------------------------------------------------
    def accumulating(self, step: int) -> bool:
        """Whether `step`'s dense gradient joins the next update's: one of the `grad_accumulation`
        steps ending with an update step (as the reference's hooks accumulate before its update)."""
        n = int(self.params.grad_accumulation)
        return n > 1 and any(self.update_due(step + ahead) for ahead in range(n))

    def before_forward(self, step: int) -> None:
        # csr and condensed form the dense gradient only on steps flagged here.
        self.execution.before_forward(self.mask_set, self.takes_dense_grad(step) or self.accumulating(step))

    def after_backward(self, step: int) -> None:
        """Adds this step's dense gradient, over the window's length, to the accumulated ones (unscaled
        under fp16, each step by its own scale)."""
        if not self.accumulating(step):
            return
        share = float(self.params.grad_accumulation) * (float(self.scaler.get_scale()) if self.scaler else 1.0)
        with torch.no_grad():
            for name, weight in self.mask_set.weights.items():
                if weight.grad is None:
                    continue
                part = weight.grad.detach().to(torch.float32) / share
                if name in self.accumulated:
                    self.accumulated[name].add_(part)
                else:
                    self.accumulated[name] = part.clone()

    def extra_state_dict(self) -> dict[str, Any]:
        """The masked method's, and the partial sum of an accumulation window a checkpoint falls in."""
        state = super().extra_state_dict()
        if self.accumulated:
            state["accumulated"] = {name: grad.cpu() for name, grad in self.accumulated.items()}
        return state

    def load_extra_state_dict(self, state: dict[str, Any]) -> None:
        super().load_extra_state_dict(state)
        saved = state.get("accumulated") or {}
        self.accumulated = {name: grad.to(self.device) for name, grad in saved.items()}

    def after_optimizer_step(self, step: int) -> None:
        super().after_optimizer_step(step)
        if self.params.reset_state == "momentum":
            # Adam's moments at masked positions move their weights off zero: mask the weights after
            # every step, as the reference's wrapped `optimizer.step` does (`apply_mask_to_weights`).
            self.mask_set.mask_weights()

    def initial_mask(self, name: str, weight: torch.Tensor) -> torch.Tensor:
        """`k0 = allotment // rows` random active weights in every output row (all of a layer ERK
        made dense); a convolution's row is an output channel's filter, `in x kh x kw` inputs."""
        if weight.dim() < 2:
            raise ValueError(f"srigl: {name} has no (out, in, ...) layout to hold a fan-in in")
        rows, columns = weight.shape[0], weight[0].numel()
        mask = random_fan_in_mask((rows, columns), fan_in(self.allotment[name], rows, columns), self.generator)
        return mask.view(weight.shape)

    def update_topology(self, step: int) -> None:
        """Prune, ablate and grow every sparse layer back to a constant fan-in (class docstring)."""
        accumulated, self.accumulated = self.accumulated, {}
        if not self.gradients_finite() or not all(bool(torch.isfinite(g).all()) for g in accumulated.values()):
            self.updates_skipped += 1
            return
        fraction = self.schedule.fraction(step)
        counts = self.mask_set.counts
        for name, weight in self.mask_set.weights.items():
            budget = self.allotment[name]
            if budget == weight.numel():
                continue  # a layer ERK made dense stays dense
            rows, columns = weight.shape[0], weight[0].numel()  # a convolution: one row per output channel
            n_active = counts[name]
            n_drop = int(n_active * fraction)
            n_keep = n_active - n_drop
            with self.update_phase(phases.SCORING):
                magnitude = self.prune(weight, weight.grad).reshape(rows, columns)
                dense_grad = accumulated.get(name, weight.grad)  # the window's mean, or this step's
                gradient = self.grow(weight, dense_grad, self.generator).reshape(rows, columns)
            with self.update_phase(phases.PRUNE_GROW):
                active = self.mask_set.active(name).reshape(rows, columns)
                live = live_neurons(
                    active, magnitude, gradient, n_keep, n_drop, budget, float(self.params.gamma_sal), self.generator
                )
                k = fan_in(budget, int(live.sum()), columns)
                candidates = active & live[:, None]
                kept = torch.zeros(rows * columns, dtype=torch.bool, device=active.device)
                kept[select_top(magnitude, candidates, min(n_keep, int(candidates.sum())), self.generator)] = True
                kept = kept.view(rows, columns)
                kept = top_per_row(magnitude, kept, torch.full((rows,), k), self.generator)
                grown = top_per_row(gradient, live[:, None] & ~kept, k - kept.sum(dim=1), self.generator)
                self.mask_set.set_mask(name, (kept | grown).view(weight.shape))

    def fan_in_by_layer(self) -> dict[str, dict[str, int]]:
        """Per prunable layer: `fan_in` (weights per live row), `live` rows and `rows` (one host
        sync per layer; for reports and tests, not the step)."""
        out = {}
        for name, mask in self.mask_set.bool_masks().items():
            per_row = mask.flatten(1).sum(dim=1)
            live = per_row > 0
            out[name] = {
                "fan_in": int(per_row[live].max()) if bool(live.any()) else 0,
                "live": int(live.sum()),
                "rows": int(mask.shape[0]),
            }
        return out

    def result_extras(self) -> dict[str, Any]:
        """The masked extras plus `gamma_sal`, each layer's fan-in and live neurons, and the total
        of ablated neurons."""
        layers = self.fan_in_by_layer()
        return {
            **super().result_extras(),
            "gamma_sal": float(self.params.gamma_sal),
            "reference_behaviour": {
                "step_on_update": bool(self.params.step_on_update), "grad_accumulation": int(self.params.grad_accumulation),
                "reset_state": str(self.params.reset_state), "t_end_truncated": bool(self.params.t_end_truncated),
            },
            "fan_in": {name: layer["fan_in"] for name, layer in layers.items()},
            "live_neurons": {name: layer["live"] for name, layer in layers.items()},
            "ablated_neurons": sum(layer["rows"] - layer["live"] for layer in layers.values()),
            "neurons": sum(layer["rows"] for layer in layers.values()),
        }
