"""GMP (Zhu & Gupta 2017): gradual magnitude pruning from a dense start, the RigL paper's "Pruning"."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

import torch

from dstbench.dst.method_base import SegmentStats
from dstbench.dst.registry import register_method
from dstbench.dst.masked.gradual import GradualSchedule, layer_target
from dstbench.dst.masked.masked_method import MaskedMethod, MaskLayoutParams
from dstbench.dst.masked.scorers import Magnitude, NoGrow


@register_method("gmp", kind="masked")
class GMP(MaskedMethod):
    """GMP: dense start, magnitude pruning on Zhu & Gupta's cubic schedule to the target; nothing regrows.

    Every weight starts active. At steps `t_start + i * delta_t` up to `t_end` (0.25 and 0.75 of
    `total_steps`, every 100 steps; `t_end` itself always prunes, so the target is reached there),
    after that step's optimizer step, each layer drops its smallest-|w| active weights down to its
    count on the cubic `s_t = s_f + (s_i - s_f) * (1 - (t - t_start) / (t_end - t_start)) ** 3`
    (`initial_sparsity` s_i 0; s_f the layer's final sparsity). Pruned weights and their optimizer
    state are zero from then on and nothing regrows, so from `t_end` the model holds exactly the
    target, `round(density * total)` weights.

    Layer distribution: `uniform` by default, every layer pruned to the target density on its own
    (per-layer magnitude, not one global threshold): the RigL paper's pruning baseline, run with
    tf.contrib's model_pruning, which prunes each layer towards its own target; `distribution: erk`
    gives each layer its ERK density at the end instead. Each layer follows the cubic from dense to
    its own final count.

    `result_extras` records the density over the run: after each pruning step
    (`density_by_update`) and per `train_segment` call (`density_by_segment`: its steps, the mean
    density its steps ran at and the density at its end; warm-up segments included). The cost is
    dense-sized until `t_start` and shrinks only as far as the execution lets it: masked tensors
    stay full size; csr's values shrink with each pruning step.

    Deviations: the schedule's defaults (0.25, 0.75, 100) are dstbench's, near the RigL code's
    pruning runs (rigl_tf2's prune.gin: steps 3000 to 7000 of 11719, every 100); `t_end` prunes even
    when it is not on the `delta_t` grid (tf.contrib would stop short of the target).
    """

    @dataclasses.dataclass
    class Params(MaskLayoutParams):
        distribution: str = "uniform"  # layer densities at the end: "uniform" (RigL paper's pruning) or "erk"
        delta_t: int = 100  # steps between pruning steps
        t_start: float = 0.25  # first pruning step: a fraction of total steps (<= 1) or a step
        t_end: float = 0.75  # last pruning step (target reached): a fraction of total steps (<= 1) or a step
        initial_sparsity: float = 0.0  # s_i: sparsity the step at t_start prunes to

        def __post_init__(self) -> None:
            super().__post_init__()
            if int(self.delta_t) != self.delta_t or self.delta_t <= 0:
                raise ValueError(f"delta_t must be a positive integer, got {self.delta_t!r}")
            if self.t_start < 0 or self.t_end < 0:
                raise ValueError(f"t_start and t_end must be >= 0, got {self.t_start} and {self.t_end}")
            if not 0.0 <= self.initial_sparsity < 1.0:
                raise ValueError(f"initial_sparsity must be in [0, 1), got {self.initial_sparsity}")
            if self.execution == "semi_structured":
                raise ValueError("gmp starts dense and prunes gradually, which 2:4 sparsity (0.5 throughout) cannot; use execution masked or csr")

    prune = Magnitude()
    grow = NoGrow()

    def __init__(self, model: torch.nn.Module, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        if self.schedule.end_step > self.total_steps:
            raise ValueError(
                f"gmp: t_end is step {self.schedule.end_step}, past the run's {self.total_steps} steps: "
                "the target density would never be reached"
            )
        # (step, density after pruning at it); step 0: the dense start.
        self.density_by_update: list[tuple[int, float]] = [(0, self._mask_density())]
        self.density_by_segment: list[dict[str, Any]] = []

    def build_schedule(self) -> GradualSchedule:  # type: ignore[override]
        """Zhu & Gupta's pruning steps and cubic from `delta_t`, `t_start`, `t_end`, `initial_sparsity`."""
        return GradualSchedule(
            delta_t=int(self.params.delta_t),
            t_start=float(self.params.t_start),
            t_end=float(self.params.t_end),
            total_steps=self.total_steps,
            initial_sparsity=float(self.params.initial_sparsity),
        )

    def initial_mask(self, name: str, weight: torch.Tensor) -> torch.Tensor:
        """Dense start: every weight active."""
        return torch.ones(weight.shape, dtype=torch.bool)

    def layer_targets(self, step: int) -> dict[str, int]:
        """Active weights each layer holds after pruning at `step` (its allotment from `t_end`)."""
        return {
            name: layer_target(self.schedule, step, self.mask_set.numel(name), self.allotment[name])
            for name in self.mask_set.names
        }

    def plan_update(self, step: int) -> dict[str, tuple[int, int]]:
        """Drop down to each layer's count on the cubic; grow nothing."""
        targets = self.layer_targets(step)
        return {name: (max(0, n_active - targets[name]), 0) for name, n_active in self.mask_set.counts.items()}

    def update_topology(self, step: int) -> None:
        """Prune as `plan_update` says (the default update with nothing grown), then record the density."""
        super().update_topology(step)
        self.density_by_update.append((step, self._mask_density()))

    def train_segment(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], steps: int) -> SegmentStats:
        """`Method.train_segment`, recording the density its steps ran at (`density_by_segment`)."""
        first = self.step + 1
        stats = super().train_segment(batches, steps)
        if steps:
            self.density_by_segment.append({
                "steps": [first, self.step],
                "density_mean": self._mean_density(first, self.step),
                "density_end": self.density_by_update[-1][1],
            })
        return stats

    def _mask_density(self) -> float:
        return self.mask_set.total_active() / self.mask_set.numel()

    def _mean_density(self, first: int, last: int) -> float:
        """Mean over steps `first..last` of the density each ran at. An update at step u ends step u,
        so the density recorded at u is in effect from step u + 1 to the next update's step."""
        total = 0.0
        entries = self.density_by_update
        for index, (after, density) in enumerate(entries):
            lo = max(first, after + 1)
            hi = last if index + 1 == len(entries) else min(last, entries[index + 1][0])
            if hi >= lo:
                total += (hi - lo + 1) * density
        return total / (last - first + 1)

    def result_extras(self) -> dict[str, Any]:
        """The masked extras, the schedule's steps and the density over the run."""
        return {
            **super().result_extras(),
            "t_start_step": self.schedule.start_step,
            "t_end_step": self.schedule.end_step,
            "initial_sparsity": float(self.params.initial_sparsity),
            "density_by_update": [[step, density] for step, density in self.density_by_update],
            "density_by_segment": list(self.density_by_segment),
        }

    def extra_state_dict(self) -> dict[str, Any]:
        """The masks, and the density records so a resumed run keeps them."""
        return {
            **super().extra_state_dict(),
            "density_by_update": [list(entry) for entry in self.density_by_update],
            "density_by_segment": list(self.density_by_segment),
        }

    def load_extra_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the masks and the density records."""
        super().load_extra_state_dict(state)
        if "density_by_update" in state:
            self.density_by_update = [(int(step), float(density)) for step, density in state["density_by_update"]]
            self.density_by_segment = [dict(entry) for entry in state.get("density_by_segment", [])]
