"""SRigL (Lasby et al., ICLR 2024): RigL with a constant fan-in per neuron and neuron ablation.

Rules read from the authors' code, calgaryml/condensed-sparsity (`RigLConstFanScheduler`, the code
of the paper's experiments) and calgaryml's later library sparsimony (`SRigL`); where the two
differ, dstbench follows condensed-sparsity:

- ablation is decided afresh at every update, so an ablated neuron comes back when enough of its
  positions are salient by gradient (sparsimony never regrows an empty row);
- a weight is salient when it is among the `n_keep` largest |w| kept by the prune or among the
  `n_drop` largest |dense gradient| of the layer (sparsimony takes the top `n_keep` of both);
- the threshold is `max(1, int(gamma_sal * k0))`, `k0 = budget // rows` the fan-in without ablation
  (condensed-sparsity's default `use_sparse_const_fan_in_for_ablation`), lowered when needed so that
  `budget // row width + 1` neurons stay live.

Deviations from that code: every prunable layer may ablate (it exempts its last sparse layer, the
classifier, whose rows are classes; dstbench's classifier head is dense); the layer-wide magnitude
cut keeps weights of live neurons only (it could keep an ablated neuron's), and a neuron left with
more than `k` kept weights keeps its `k` largest (it keeps an arbitrary `k`); no sparse
re-initialisation of the weights (its `use_sparse_initialization`) and no gradient accumulation
before an update (its `grad_accumulation_n`): every masked method here starts from the same dense
initialisation and reads one batch's gradient; ties are broken by a seeded random order.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch

from dstbench.dst import phases
from dstbench.dst.registry import register_method
from dstbench.dst.masked.constant_fan_in import fan_in, live_neurons, random_fan_in_mask, top_per_row
from dstbench.dst.masked.masked_method import DropGrowParams, MaskedMethod
from dstbench.dst.masked.scorers import GradientGrow, Magnitude, select_top


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
      2. neuron ablation: a row with fewer than `max(1, int(gamma_sal * k0))` salient weights is
         ablated (threshold lowered so that at least `B // row width + 1` rows stay live); the live
         rows get the fan-in `k = B // live` (an ablated row's budget goes to the others: k grows);
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

    Parameters: RigL's (`delta_t` 100, `drop_fraction` 0.3, `t_end` 0.75, `distribution` erk) and
    `gamma_sal` 0.3 (the default of the authors' code; their ViT configuration uses 0.95 with
    `distribution: uniform`; 0 ablates nothing). Rules and deviations: the module docstring.
    """

    @dataclasses.dataclass
    class Params(DropGrowParams):
        gamma_sal: float = 0.3  # a neuron with fewer than gamma_sal * k0 salient weights is ablated (0: never)

        # A constant fan-in per neuron: stored condensed, or masked, or as CSR; 2:4 sparsity cannot hold one.
        executions: ClassVar[tuple[str, ...]] = ("masked", "csr", "condensed")

        def __post_init__(self) -> None:
            super().__post_init__()
            if not 0.0 <= self.gamma_sal <= 1.0:
                raise ValueError(f"gamma_sal must be in [0, 1], got {self.gamma_sal}")

    update_replaces_step = True
    prune = Magnitude()
    grow = GradientGrow()

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
        if not self.gradients_finite():
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
                gradient = self.grow(weight, weight.grad, self.generator).reshape(rows, columns)
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
            "fan_in": {name: layer["fan_in"] for name, layer in layers.items()},
            "live_neurons": {name: layer["live"] for name, layer in layers.items()},
            "ablated_neurons": sum(layer["rows"] - layer["live"] for layer in layers.values()),
            "neurons": sum(layer["rows"] for layer in layers.values()),
        }
