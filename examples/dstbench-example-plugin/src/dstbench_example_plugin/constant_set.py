"""`set_constant`: SET with the constant replacement fraction of its paper, on dstbench's masked engine.

SET (Mocanu et al., 2018) replaces the same fraction of each layer's active weights at every
update. dstbench's built-in `set` uses RigL's cosine decay of that fraction instead, so that the
masked methods share one schedule; this method restores the constant fraction, which makes the
updates' cost and effect the same from the first to the last one.

Everything else is the masked engine's (`MaskedMethod`): a random initial mask at ERK (or uniform)
layer densities, magnitude prune, uniform random grow, updates every `delta_t` steps before
`t_end`, the layers ERK made dense left alone, and the `execution` choice of how the masked
linears compute.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dstbench.dst.masked import Magnitude, MaskedMethod, MaskedParams, RandomGrow
from dstbench.dst.registry import register_method


@dataclasses.dataclass
class ConstantFractionParams(MaskedParams):
    """`set_constant`'s parameters: the masked methods' (`distribution`, `prunable`, `execution`,
    `delta_t`, `t_end`) and the constant fraction."""

    drop_fraction: float = dataclasses.field(
        default=0.3,
        metadata={"help": "fraction of each layer's active weights replaced at every update (constant; SET's zeta)"},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.drop_fraction <= 1.0:
            raise ValueError(f"drop_fraction must be in [0, 1], got {self.drop_fraction}")


@register_method("set_constant", kind="masked")
class ConstantSET(MaskedMethod):
    """SET with a constant replacement fraction: at every update each layer drops its
    `int(n_active * drop_fraction)` smallest-|w| active weights and grows as many at random.

    Parameters: `drop_fraction` (0.3, constant), `delta_t` (100 steps between updates), `t_end`
    (0.75: the last update falls before this fraction of training, or this step when > 1),
    `distribution` ("erk" or "uniform"), `prunable` (regex of the masked weights), `execution`
    ("masked", "csr" or "semi_structured"). Its result line's `method_extras` adds `updates_done`
    and `weights_replaced`, which this package's report section shows.
    """

    Params = ConstantFractionParams
    prune = Magnitude()
    grow = RandomGrow()

    def __init__(self, model: Any, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.updates_done = 0
        self.weights_replaced = 0

    def plan_update(self, step: int) -> dict[str, tuple[int, int]]:
        """The same fraction of every sparse layer's active weights at every update."""
        fraction = float(self.params.drop_fraction)
        plan = {}
        for name, n_active in self.mask_set.counts.items():
            dense_layer = self.allotment[name] == self.mask_set.numel(name)
            n = 0 if dense_layer else int(n_active * fraction)
            plan[name] = (n, n)
        self.updates_done += 1
        self.weights_replaced += sum(n_drop for n_drop, _ in plan.values())
        return plan

    def result_extras(self) -> dict[str, Any]:
        return {**super().result_extras(), "updates_done": self.updates_done, "weights_replaced": self.weights_replaced}

    def extra_state_dict(self) -> dict[str, Any]:
        # The counters continue across a resumed (checkpointed) accuracy case.
        return {**super().extra_state_dict(), "updates_done": self.updates_done, "weights_replaced": self.weights_replaced}

    def load_extra_state_dict(self, state: dict[str, Any]) -> None:
        super().load_extra_state_dict(state)
        self.updates_done = int(state.get("updates_done", 0))
        self.weights_replaced = int(state.get("weights_replaced", 0))
