"""Masked (full-tensor) DST: the public parts a masked method is built from.

    from dstbench.dst.masked import MaskedMethod, DropGrowParams, Magnitude, GradientGrow

A masked method is a `MaskedMethod` subclass registered with `@register_method(name,
kind="masked")`; it picks its parts (see `masked_method`'s docstring for which hook does what):

    MaskedMethod, MaskLayoutParams,   the engine (hooks: `build_schedule`, `initial_mask`,
    MaskedParams, DropGrowParams      `plan_update`, `update_topology`) and its parameter bases
    Magnitude, MagnitudeGradient      prune scorers (lowest score dropped)
    RandomGrow, GradientGrow, NoGrow  grow scorers (highest score grown; NoGrow: none)
    select_top, drop_and_grow         the seeded top-k every update is built from
    layer_allotment, erk_densities,   layer distributions (`erk`, `uniform`) and exact integer
    uniform_densities, allot,         counts per layer
    distribute, target_active
    UpdateSchedule                    RigL's update steps and cosine-decayed fraction
    GradualSchedule, layer_target     Zhu & Gupta's cubic pruning schedule (GMP)
    fan_in, random_fan_in_mask,       constant fan-in masks and neuron ablation (SRigL)
    top_per_row, live_neurons
    MaskSet, random_mask              the masks themselves: bool, applied in place
    EXECUTIONS                        how the masked linears compute: masked, csr, semi_structured

The names load on first use (`import dstbench.dst.masked` imports no engine module), so a module
that needs one part does not pay for the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "MaskedMethod": "masked_method",
    "MaskLayoutParams": "masked_method",
    "MaskedParams": "masked_method",
    "DropGrowParams": "masked_method",
    "Magnitude": "scorers",
    "MagnitudeGradient": "scorers",
    "RandomGrow": "scorers",
    "GradientGrow": "scorers",
    "NoGrow": "scorers",
    "PruneScorer": "scorers",
    "GrowScorer": "scorers",
    "select_top": "scorers",
    "drop_and_grow": "scorers",
    "DISTRIBUTIONS": "distributions",
    "layer_allotment": "distributions",
    "erk_densities": "distributions",
    "uniform_densities": "distributions",
    "allot": "distributions",
    "distribute": "distributions",
    "target_active": "distributions",
    "GradualSchedule": "gradual",
    "layer_target": "gradual",
    "fan_in": "constant_fan_in",
    "random_fan_in_mask": "constant_fan_in",
    "top_per_row": "constant_fan_in",
    "live_neurons": "constant_fan_in",
    "MaskSet": "masks",
    "random_mask": "masks",
    "EXECUTIONS": "backends",
}
# Shared with BARTER, so it lives a layer up; re-exported here as a part of the recipe.
_ELSEWHERE = {"UpdateSchedule": "dstbench.dst.update_schedule"}

__all__ = sorted([*_EXPORTS, *_ELSEWHERE])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    if name in _ELSEWHERE:
        return getattr(importlib.import_module(_ELSEWHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
