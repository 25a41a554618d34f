"""RigL (Evci et al., 2020): magnitude prune, grow by the dense gradient."""

from __future__ import annotations

from dstbench.dst.registry import register_method
from dstbench.dst.masked.masked_method import MaskedMethod
from dstbench.dst.masked.scorers import GradientGrow, Magnitude


@register_method("rigl", kind="masked")
class RigL(MaskedMethod):
    """RigL: drop the smallest |w|, grow the inactive positions with the largest dense |dL/dw|.

    Recipe (google-research/rigl, rigl-torch defaults): random sparse init at ERK layer densities;
    every `delta_t` (100) steps until `t_end` (0.75), per layer `n = int(n_active * 0.3 * (1 +
    cos(pi t / t_end)) / 2)` weights are replaced; grown weights start at 0 with zero optimizer
    state. An update step takes no optimizer step (both reference codebases skip it), so the update
    reads the dense gradient straight from `weight.grad` before anything masks it: no dense-gradient
    buffer is kept (rigl-torch keeps one near each update).
    """

    update_replaces_step = True
    prune = Magnitude()
    grow = GradientGrow()
