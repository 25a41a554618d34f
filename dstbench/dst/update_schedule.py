"""When topology updates happen and how much they change: RigL's cosine-decayed schedule.

Shared by the masked methods and BARTER. Steps are 1-based: step t is the t-th optimizer step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def round_half_up(value: float) -> int:
    """`value` rounded to the nearest integer, halves up. Budgets and active-weight targets derived
    from a density go through this one rule, so masked and compact methods hold alike-rounded
    budgets (Python's `round` rounds halves to even: round(2.5) == 2). Exchange sizes follow each
    method's reference: the masked methods truncate (`int(n * fraction)`, as rigl-torch), BARTER
    carries the remainder (`carried_count`)."""
    return int(math.floor(value + 0.5))


def carried_count(asked: float, carried: float) -> tuple[int, float]:
    """(units to exchange now, remainder to carry): `asked` (fraction x units) plus the remainder
    carried from the updates before, rounded down. Over a run the units exchanged stay within one
    of the sum asked, so a budget of 2 heads at fraction 0.3 exchanges a head about every other
    update instead of half its heads at every one (rounding each update alone), or never
    (truncating each alone)."""
    total = asked + carried
    count = int(math.floor(total + 1e-9))  # 0.3 + 0.7 is one unit, not 0.9999999
    return count, max(0.0, total - count)


@dataclass(frozen=True)
class UpdateSchedule:
    """An update every `delta_t` steps while `t < t_end_step`; replaced fraction decays by cosine.

    `t_end` is a fraction of `total_steps` when <= 1, otherwise an absolute step. The end is
    exclusive, as in rigl-torch: at `t_end_step` the cosine fraction is 0, so an update there would
    change nothing and still cost a synchronisation (and, for RigL, an optimizer step). A fraction
    becomes a step rounded half up, or with `truncate_t_end` truncated, as calgaryml's
    condensed-sparsity computes its `T_end = int(0.75 * steps)`.
    """

    delta_t: int
    t_end: float
    drop_fraction: float
    total_steps: int
    truncate_t_end: bool = False

    def __post_init__(self) -> None:
        if self.delta_t <= 0:
            raise ValueError(f"delta_t must be positive, got {self.delta_t}")
        if not 0.0 <= self.drop_fraction <= 1.0:
            raise ValueError(f"drop_fraction must be in [0, 1], got {self.drop_fraction}")
        if self.t_end < 0:
            raise ValueError(f"t_end must be >= 0, got {self.t_end}")

    @property
    def t_end_step(self) -> int:
        if self.t_end > 1:
            return int(self.t_end)
        # Rounded unless asked to truncate: int(0.29 * 100) is 28.
        return int(self.t_end * self.total_steps) if self.truncate_t_end else round_half_up(self.t_end * self.total_steps)

    @property
    def last_update_step(self) -> int:
        """The last step at which an update falls due within `total_steps` (0: none does)."""
        last = min(self.t_end_step - 1, self.total_steps)
        return max(0, last - last % self.delta_t)

    def is_update_step(self, step: int) -> bool:
        return step > 0 and step % self.delta_t == 0 and step < self.t_end_step

    def fraction(self, step: int) -> float:
        """The fraction of active units replaced at `step`: drop_fraction * (1 + cos(pi t / t_end)) / 2."""
        t_end = max(self.t_end_step, 1)
        return self.drop_fraction * (1.0 + math.cos(math.pi * min(step, t_end) / t_end)) / 2.0

    def update_steps(self) -> list[int]:
        """Every step at which an update falls due within `total_steps`."""
        return list(range(self.delta_t, self.last_update_step + 1, self.delta_t))
