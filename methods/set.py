"""SET (Mocanu et al., 2018): magnitude prune, uniform random grow."""

from __future__ import annotations

from dstbench.dst.registry import register_method
from dstbench.dst.masked.masked_method import MaskedMethod
from dstbench.dst.masked.scorers import Magnitude, RandomGrow


@register_method("set", kind="masked")
class SET(MaskedMethod):
    """SET: drop the smallest |w|, grow as many positions drawn uniformly among inactive ones.

    Recipe: random sparse init at ERK layer densities; every `delta_t` (100) steps until `t_end`
    (0.75), per layer `n = int(n_active * 0.3 * (1 + cos(pi t / t_end)) / 2)` weights are replaced.
    The update follows that step's optimizer step (google-research/rigl's SET).

    Deviations from the original SET: magnitude over both signs (the usual PyTorch port, not the
    separate smallest-positive / largest-negative cut), and RigL's schedule and ERK distribution
    instead of an update every epoch at a constant fraction, so the masked methods share one
    schedule.
    """

    prune = Magnitude()
    grow = RandomGrow()
