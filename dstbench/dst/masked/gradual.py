"""Gradual magnitude pruning's schedule (Zhu & Gupta 2017, "To prune, or not to prune").

Dense-to-sparse training prunes at steps `t_start, t_start + delta_t, ...` up to `t_end`, each time
to sparsity `s_t = s_f + (s_i - s_f) * (1 - (t - t_start) / (t_end - t_start)) ** 3`: fast at
first, while the network is redundant, slower as the target `s_f` nears. `GradualSchedule` holds
the steps and the cubic; `layer_target` turns it into a layer's active count. Steps are 1-based, as
every dstbench schedule's.
"""

from __future__ import annotations

from dataclasses import dataclass

from dstbench.dst.update_schedule import round_half_up


def schedule_step(value: float, total_steps: int) -> int:
    """A schedule position as a step: a fraction of `total_steps` when <= 1 (rounded half up), else
    an absolute step (the convention of `UpdateSchedule.t_end`)."""
    return round_half_up(value * total_steps) if value <= 1 else int(value)


@dataclass(frozen=True)
class GradualSchedule:
    """Pruning steps every `delta_t` from `t_start` to `t_end` (both inclusive; `t_end` is always a
    pruning step, so the target is reached even when `t_end - t_start` is not a multiple of
    `delta_t`), and the cubic `remaining(step)` between them.

    `t_start` and `t_end` are fractions of `total_steps` when <= 1, else steps. With
    `initial_sparsity` 0 the step `t_start` prunes nothing (its target is the dense layer), so it is
    no update step: the first pruning step is `t_start + delta_t` (or `t_end`, if sooner).
    """

    delta_t: int
    t_start: float
    t_end: float
    total_steps: int
    initial_sparsity: float = 0.0

    def __post_init__(self) -> None:
        if self.delta_t <= 0:
            raise ValueError(f"delta_t must be positive, got {self.delta_t}")
        if self.t_start < 0 or self.t_end < 0:
            raise ValueError(f"t_start and t_end must be >= 0, got {self.t_start} and {self.t_end}")
        if not 0.0 <= self.initial_sparsity < 1.0:
            raise ValueError(f"initial_sparsity must be in [0, 1), got {self.initial_sparsity}")
        if self.end_step < 1:
            raise ValueError(f"t_end ({self.t_end}) falls before step 1: nothing would ever be pruned")
        if self.start_step > self.end_step:
            raise ValueError(f"t_start (step {self.start_step}) is after t_end (step {self.end_step})")

    @property
    def start_step(self) -> int:
        return schedule_step(self.t_start, self.total_steps)

    @property
    def end_step(self) -> int:
        return schedule_step(self.t_end, self.total_steps)

    def remaining(self, step: int) -> float:
        """`(1 - p) ** 3`, p the progress from `t_start` (0) to `t_end` (1), clamped: the part of
        the way from the initial to the final sparsity still to go after pruning at `step`."""
        if step >= self.end_step:
            return 0.0
        if step <= self.start_step:
            return 1.0
        progress = (step - self.start_step) / (self.end_step - self.start_step)
        return (1.0 - progress) ** 3

    def is_update_step(self, step: int) -> bool:
        if step < 1 or not self.start_step <= step <= self.end_step:
            return False
        if step == self.start_step and self.initial_sparsity == 0 and step != self.end_step:
            return False
        return step == self.end_step or (step - self.start_step) % self.delta_t == 0

    def update_steps(self) -> list[int]:
        """Every pruning step within `total_steps`."""
        first = max(1, self.start_step)
        return [t for t in range(first, min(self.end_step, self.total_steps) + 1) if self.is_update_step(t)]

    @property
    def last_update_step(self) -> int:
        """The last pruning step within `total_steps` (0: none)."""
        steps = self.update_steps()
        return steps[-1] if steps else 0


def layer_target(schedule: GradualSchedule, step: int, numel: int, final: int) -> int:
    """Active weights a layer of `numel` weights holds after pruning at `step`, `final` at the end:
    the layer's own sparsity follows the cubic from `initial_sparsity` (never below `final`'s
    density) to `final`, as each layer does in tf.contrib's model_pruning with a per-layer target."""
    start = max(final, round_half_up((1.0 - schedule.initial_sparsity) * numel))
    if step < schedule.start_step:
        return numel
    return final + round_half_up((start - final) * schedule.remaining(step))
