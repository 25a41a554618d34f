"""MEST (Yuan et al., 2021): prune by |w| + lambda |g|, grow at random; optional EM&S soft budget."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from dstbench.dst.registry import register_method
from dstbench.dst.masked.distributions import distribute
from dstbench.dst.masked.masked_method import DropGrowParams, MaskedMethod
from dstbench.dst.masked.scorers import MagnitudeGradient, RandomGrow


@register_method("mest", kind="masked")
class MEST(MaskedMethod):
    """MEST: drop by |w| + lambda |g| among active weights, grow at random (no dense gradient).

    Recipe (boone891214/MEST): random sparse init at ERK layer densities; every `delta_t` (100)
    steps until `t_end` (0.75), per layer the lowest-scoring `n = int(n_active * fraction(t))`
    weights are dropped and `n` zero-initialised ones grown at random ("elastic mutation"). The
    update follows that step's optimizer step, as in the reference code. `grad_lambda` defaults to 0
    (magnitude only).

    EM&S (`ems: true`): the soft memory bound. As MEST's code does (prune each layer to a lower
    bound, grow it to an upper bound), each update prunes every layer to its allotment less the
    mutation `n = int(allotment * fraction(t))` (`drop_fraction` keeps its meaning), then grows
    `n` plus the layer's share of the extra: `ems_extra` (0.05, as in MEST's EM&S scripts) of
    extra density, cosine-decayed, spread over the layers in proportion to their allotments (a
    layer ERK made dense has no room: its share goes to the others). The next update prunes it
    again; the last scheduled update grows no extra, so training ends at the target density.
    Between updates the model holds more than the target, so `density_achieved` exceeds it.

    Deviations: the mutation ratio and the EM&S extra decay by RigL's cosine over the shared
    `delta_t` schedule instead of in steps at fixed epochs (MEST updates every 5 epochs).
    """

    @dataclasses.dataclass
    class Params(DropGrowParams):
        grad_lambda: float = 0.0  # weight of |g| in the prune score
        ems: bool = False  # EM&S soft memory bound
        ems_extra: float = 0.05  # extra density EM&S grows at the first update (cosine decay to 0)

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.grad_lambda < 0:
                raise ValueError(f"grad_lambda must be >= 0, got {self.grad_lambda}")
            if not 0.0 <= self.ems_extra <= 1.0:
                raise ValueError(f"ems_extra must be in [0, 1], got {self.ems_extra}")
            if self.ems and self.execution == "semi_structured":
                raise ValueError("ems holds more than the target density, which 2:4 sparsity (0.5 exactly) cannot; use execution masked or csr")

    grow = RandomGrow()

    def __init__(self, model: torch.nn.Module, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.prune = MagnitudeGradient(float(self.params.grad_lambda))
        if self.params.ems:
            self.soft_schedule = dataclasses.replace(self.schedule, drop_fraction=float(self.params.ems_extra))

    def plan_update(self, step: int) -> dict[str, tuple[int, int]]:
        if not self.params.ems:
            return super().plan_update(step)
        fraction = self.schedule.fraction(step)
        room = {name: self.mask_set.numel(name) - budget for name, budget in self.allotment.items()}
        extras = distribute(self.soft_budget(step) - sum(self.allotment.values()), self.allotment, room)
        plan = {}
        for name, n_active in self.mask_set.counts.items():
            budget = self.allotment[name]
            mutation = int(budget * fraction) if room[name] else 0  # a dense layer stays dense
            plan[name] = (n_active - budget + mutation, mutation + extras[name])
        return plan
