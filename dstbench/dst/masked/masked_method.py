"""`MaskedMethod`: full-tensor DST composed of a schedule, a layer distribution and two scorers.

Every tensor keeps its full size; a `MaskSet` zeroes the inactive weights, their gradients and
their optimizer state. A subclass is its recipe: it names a prune scorer and a grow scorer and, when
its reference code does so, sets `update_replaces_step`. The default update is per layer (SET,
RigL, MEST): `n = int(n_active * fraction(t))` active weights are dropped and `n` grown, so each
layer keeps exactly its allotment.

Soft budgets (MEST's EM&S, Chase): a method that sets `soft_schedule` holds `soft_budget(step)`
active weights after the update at `step`, above the target by a cosine-decayed extra. The last
scheduled update grows no extra, so training ends at the hard budget instead of keeping the last
extra for the rest of the run.

Updates whose scorers read gradients are skipped, masks left as they are, when a gradient is not
finite (an fp16 overflow, a diverged step): one NaN would otherwise decide the topology. They are
counted in `updates_skipped`.

Execution (`params.execution`, `dstbench.dst.masked.backends`): `masked` (the default, as above),
`csr` (only the active weights, sparse kernels) or `semi_structured` (2:4 on CUDA). The backend
supplies the mask set the update works on, so the update code is the same for all three.

Writing a masked method (the recipe of `methods/rigl.py`, `methods/gmp.py`, `methods/srigl.py`):

    hook / attribute        default                               override for
    Params                  DropGrowParams (delta_t, t_end,       new parameters (subclass it)
                            drop_fraction, distribution, ...)
    prune, grow             Magnitude(), RandomGrow()             the scores an update ranks by
    update_replaces_step    False                                 an update that reads the dense
                                                                  gradient instead of a step (RigL)
    build_schedule()        RigL's cosine `UpdateSchedule`        another schedule (GMP's cubic)
    initial_mask(name, w)   None: `allotment[name]` random        a dense start (all ones, GMP) or a
                            positions                             structured one (SRigL's fan-in)
    plan_update(step)       per layer (n, n), n = int(active *    other counts (MEST's EM&S, GMP's
                            fraction)                             prune-only (n, 0))
    update_topology(step)   per layer drop_and_grow(plan)         another rule altogether (Chase)

`density()` counts the masks (active positions / prunable positions), whatever the weights' values:
a weight grown at 0 is active.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from dstbench.dst import phases
from dstbench.dst.method_base import Method
from dstbench.dst.update_schedule import UpdateSchedule
from dstbench.dst.masked.distributions import DISTRIBUTIONS, layer_allotment, target_active
from dstbench.dst.masked.backends import EXECUTIONS, create_execution
from dstbench.dst.masked.masks import random_mask
from dstbench.dst.masked.scorers import GrowScorer, Magnitude, PruneScorer, RandomGrow, drop_and_grow
from dstbench.models.timm_models import default_prunable, family, prunable_weights


# Why a method's masks may not suit an execution (said when its `Params.executions` leave it out).
EXECUTION_NEEDS = {
    "condensed": "stores the same fan-in in every live neuron, which only a method that keeps one (srigl) holds",
    "semi_structured": "needs transposable 2:4 masks",
}


@dataclasses.dataclass
class MaskLayoutParams:
    """Where the mask sits and how the masked linears compute: what every masked method has,
    `static` included."""

    distribution: str = "erk"  # layer densities: "erk" or "uniform"
    prunable: str | None = None  # regex (full match) of the masked parameters; default: model.prunable, else the model's
    execution: str = "masked"  # how the masked linears compute: masked, csr, semi_structured (or condensed: srigl)

    # The executions the method's masks can run on: condensed holds a constant fan-in per neuron,
    # which only a method that keeps one (srigl) adds to its own.
    executions: ClassVar[tuple[str, ...]] = ("masked", "csr", "semi_structured")

    def __post_init__(self) -> None:
        if self.execution not in EXECUTIONS:
            raise ValueError(f"execution must be one of {list(EXECUTIONS)}, got {self.execution!r}")
        if self.execution not in self.executions:
            why = EXECUTION_NEEDS.get(self.execution, "")
            raise ValueError(f"execution {self.execution} {why}; this method runs {', '.join(self.executions)}")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {list(DISTRIBUTIONS)}, got {self.distribution!r}")
        try:
            re.compile(self.prunable or "")
        except re.error as exc:
            raise ValueError(f"prunable is not a valid regular expression ({exc}): {self.prunable!r}") from None


@dataclasses.dataclass
class MaskedParams(MaskLayoutParams):
    """Parameters every updating masked method shares (defaults: RigL's)."""

    delta_t: int = 100  # steps between topology updates
    t_end: float = 0.75  # end of updates (exclusive): a fraction of total steps (<= 1) or a step

    def __post_init__(self) -> None:
        super().__post_init__()
        if int(self.delta_t) != self.delta_t or self.delta_t <= 0:
            raise ValueError(f"delta_t must be a positive integer, got {self.delta_t!r}")
        if self.t_end < 0:
            raise ValueError(f"t_end must be >= 0, got {self.t_end}")


@dataclasses.dataclass
class DropGrowParams(MaskedParams):
    """Parameters of a method that drops and grows the same number per layer (SET, RigL, MEST)."""

    drop_fraction: float = 0.3  # fraction of active weights replaced at the first update (cosine decay)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.drop_fraction <= 1.0:
            raise ValueError(f"drop_fraction must be in [0, 1], got {self.drop_fraction}")


class MaskedMethod(Method):
    """Full-tensor masked DST (base class; not registered): a mask per prunable weight, updated by a
    schedule, a layer distribution and two scorers (see the module docstring for the recipe).

    Attributes, besides `Method`'s:
    `mask_set` (the backend's `MaskSet`: bool masks, active `counts` per layer, `weights` by name,
    `set_mask`), `allotment` (the active weights each layer holds at the target density, from
    `params.distribution`; 2:4 makes it half of every layer), `execution` (the backend:
    `masked`, `csr` or `semi_structured`), `schedule` (when updates fall due and the fraction they
    exchange), `soft_schedule` (None, or the extra density a soft budget holds: MEST's EM&S, Chase),
    `prune` and `grow` (the scorers), `updates_skipped` (updates skipped on a non-finite gradient).
    """

    Params = DropGrowParams
    prune: PruneScorer = Magnitude()
    """Scores an update ranks the active weights by: the lowest are dropped."""
    grow: GrowScorer = RandomGrow()
    """Scores an update ranks the inactive positions by: the highest are grown (`NoGrow`: none)."""
    soft_schedule: UpdateSchedule | None = None
    """Set by a method with a soft budget: its `fraction(t)` is the extra density held above the target."""
    conv_weights: ClassVar[bool] = True
    """Whether the update handles convolution (4-D) weights; a method written for linear (2-D)
    weights alone sets it False and is refused where convolutions would be pruned."""

    @classmethod
    def model_problem(cls, model: torch.nn.Module, params: Mapping[str, Any], model_prunable: str | None) -> str | None:
        """`Method.model_problem`, and: the weights it would mask exist, and are linear (2-D) where
        the method or its execution (csr, semi_structured) handles nothing else."""
        pattern = params.get("prunable") or model_prunable or default_prunable(model)
        weights = prunable_weights(model, pattern)
        if not weights:
            return f"no parameter of the {family(model)} matches prunable {pattern!r}"
        convolutions = [name for name, weight in weights.items() if weight.dim() != 2]
        if not convolutions:
            return None
        listed = f"{convolutions[0]}" + (f" and {len(convolutions) - 1} more" if len(convolutions) > 1 else "")
        if not cls.conv_weights:
            return (f"{cls.name} does not prune convolution weights yet ({listed} of the {family(model)}); "
                    "name linear weights alone with prunable")
        execution = params.get("execution", "masked")
        if execution != "masked":
            return f"execution {execution} computes linear (2-D) weights only; {listed} of the {family(model)} are convolutions"
        return None

    def __init__(self, model: torch.nn.Module, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.schedule: UpdateSchedule = self.build_schedule()
        self.updates_skipped = 0
        weights = self.prunable()
        self.execution = create_execution(self.params.execution)
        self.mask_set = self.execution.mask_set_class(weights, self.optimizer)
        self.allotment = layer_allotment(
            {name: tuple(w.shape) for name, w in weights.items()}, self.target_density, self.params.distribution
        )
        for name, weight in weights.items():
            # One layer at a time, in order: the default draw (`random_mask`) and an `initial_mask`
            # that draws take `self.generator` in this order, so the seed fixes every layer's mask.
            mask = self.initial_mask(name, weight)
            if mask is None:
                mask = random_mask(weight.shape, self.allotment[name], self.generator)
            elif mask.shape != weight.shape or mask.dtype != torch.bool:
                raise ValueError(
                    f"{type(self).__name__}.initial_mask({name!r}) gave a {mask.dtype} mask of shape "
                    f"{tuple(mask.shape)}; expected torch.bool of shape {tuple(weight.shape)}"
                )
            self.mask_set.set_mask(name, mask)
        self.mask_set, self.allotment = self.execution.install(
            self.model, self.mask_set, self.allotment, density=self.target_density, precision=self.precision
        )

    def build_schedule(self) -> UpdateSchedule:
        """When topology updates fall due: called once in `__init__`, before the masks exist, and
        stored as `self.schedule` (which `update_due` follows). Default: RigL's cosine schedule from
        `delta_t`, `t_end` and `drop_fraction`. Anything with `is_update_step(step)`,
        `update_steps()`, `last_update_step` (and, for the default `plan_update`, `fraction(step)`)
        serves."""
        return UpdateSchedule(
            delta_t=int(self.params.delta_t),
            t_end=float(self.params.t_end),
            drop_fraction=float(self.params.drop_fraction),
            total_steps=self.total_steps,
        )

    def initial_mask(self, name: str, weight: torch.Tensor) -> torch.Tensor | None:
        """The bool mask (shape of `weight`) the prunable weight `name` starts training with, or
        None for the default: `allotment[name]` positions drawn uniformly at random from
        `self.generator` (SET, RigL, MEST, Chase, static).

        Called once per prunable weight, in order, at the end of `__init__`'s setup: `params`,
        `allotment`, `schedule` and `generator` are set; the execution is not installed yet, so
        `weight` is the full-size dense tensor (read it, do not change it: values at positions the
        mask turns off are zeroed, with their optimizer state, when the mask is applied). The mask
        may hold any number of active positions: a dense-to-sparse method (GMP) returns all ones,
        SRigL a constant fan-in per output row; the layer's active count is taken from the mask.
        Draw any randomness from `self.generator` so the seed fixes the mask."""
        return None

    # -- inspection ---------------------------------------------------------------------------------
    def prunable(self) -> dict[str, torch.nn.Parameter]:
        """The weights matching `params.prunable` (full match), else `model_prunable`, by parameter name."""
        return prunable_weights(self.model, self.params.prunable or self.model_prunable)

    def masks(self) -> dict[str, torch.Tensor]:
        """Bool masks by parameter name (copies: editing them changes nothing)."""
        return self.mask_set.bool_masks()

    def density(self) -> float:
        """Active fraction of the prunable weights, counted from the masks: active positions over
        all prunable positions (a grown weight is active while its value is still exactly 0; the
        base class's count of nonzero values would miss it). One host sync."""
        self.mask_set.recount()
        return self.mask_set.total_active() / self.mask_set.numel()

    def method_buffers(self) -> dict[str, torch.Tensor]:
        """The mask set's buffers: the bool masks (csr: its index buffers instead)."""
        return self.mask_set.buffers()

    def result_extras(self) -> dict[str, Any]:
        """Distribution, execution, FLOP basis, updates scheduled and skipped, active and prunable
        weights (and the soft budget's density when there is one); subclasses add theirs."""
        extras = {
            "distribution": self.params.distribution,
            "execution": self.execution.name,
            "flops_basis": self.execution.flops_basis,
            "updates_scheduled": len(self.schedule.update_steps()),
            "updates_skipped": self.updates_skipped,
            "active_weights": self.mask_set.total_active(),
            "prunable_weights": self.mask_set.numel(),
            # The backend's: `kernel_precision`; semi_structured adds each update's 2:4 exchange.
            **self.execution.result_extras(self.mask_set),
        }
        if self.soft_schedule is not None:
            extras["soft_budget_density"] = self.mask_set.total_active() / self.mask_set.numel()
        return extras

    # -- soft budget --------------------------------------------------------------------------------
    def soft_extra(self, step: int) -> float:
        """Extra density held above the target after the update at `step`: the soft schedule's
        cosine, 0 without a soft budget and at (or past) the last scheduled update."""
        if self.soft_schedule is None or step >= self.schedule.last_update_step:
            return 0.0
        return self.soft_schedule.fraction(step)

    def soft_budget(self, step: int) -> int:
        """Active prunable weights after the update at `step` (the hard budget plus the extra)."""
        return target_active(self.mask_set.numel(), min(1.0, self.target_density + self.soft_extra(step)))

    # -- hooks --------------------------------------------------------------------------------------
    def takes_dense_grad(self, step: int) -> bool:
        """Whether the optimizer step of `step` takes the unmasked gradient: an update that follows
        the step and grows by gradient must see the dense gradient, so it stays unmasked then."""
        return self.grow.needs_dense_grad and self.update_due(step)

    def before_forward(self, step: int) -> None:
        """Tells the execution whether this step's backward must keep the dense weight gradient
        (csr computes it only on a step whose update grows by it)."""
        self.execution.before_forward(self.mask_set, self.takes_dense_grad(step))

    def before_optimizer_step(self, step: int) -> None:
        """Masks the gradients in place, unless the step takes the dense gradient (`takes_dense_grad`)."""
        # The one masking op of an ordinary step: with a zero gradient, weight and state at a
        # masked position the optimizer computes exactly 0 there again (see dstbench.dst.masked.masks).
        if not self.takes_dense_grad(step):
            self.mask_set.mask_grads()

    def after_optimizer_step(self, step: int) -> None:
        """After a step that took the dense gradient, zeroes weights and state at masked positions."""
        # Only after a step that took the dense gradient have masked weights and state moved;
        # zeroing them then gives the active weights exactly the update a masked gradient gives.
        if self.takes_dense_grad(step):
            self.mask_set.enforce()

    def gradients_finite(self) -> bool:
        """Whether the prunable gradients the scorers read are all finite (one host sync; true when
        they read none). Under fp16 they have been unscaled by then (`Method.train_step`)."""
        if not (self.prune.reads_grad or self.grow.reads_grad):
            return True
        grads = [w.grad for w in self.mask_set.weights.values() if w.grad is not None]
        return not grads or bool(torch.stack([torch.isfinite(g).all() for g in grads]).all())

    def plan_update(self, step: int) -> dict[str, tuple[int, int]]:
        """`(n_drop, n_grow)` per layer for the update at `step`, read by the default
        `update_topology` (which caps them at what the layer holds). Default: `n = int(n_active *
        schedule.fraction(step))` dropped and as many grown, nothing in a layer ERK made dense."""
        fraction = self.schedule.fraction(step)
        plan = {}
        for name, n_active in self.mask_set.counts.items():
            if self.allotment[name] == self.mask_set.numel(name):
                plan[name] = (0, 0)  # a layer ERK made dense stays dense (rigl-torch skips it too)
            else:
                n = int(n_active * fraction)
                plan[name] = (n, n)
        return plan

    def update_topology(self, step: int) -> None:
        """The update at `step`: skipped (counted in `updates_skipped`) when a gradient the scorers
        read is not finite; otherwise, layer by layer, drop and grow as `plan_update` says, by the
        `prune` and `grow` scores, through `mask_set.set_mask` (grown weights start at 0 with zero
        optimizer state)."""
        if not self.gradients_finite():
            self.updates_skipped += 1
            return
        plan = self.plan_update(step)
        counts = self.mask_set.counts
        # Layer by layer, as rigl-torch does, so an update holds one layer's scores at a time.
        for name, weight in self.mask_set.weights.items():
            n_active = counts[name]
            n_drop, n_grow = plan[name]
            n_drop = min(n_drop, n_active)
            n_grow = min(n_grow, weight.numel() - n_active + n_drop)
            if n_drop == 0 and n_grow == 0:
                continue
            with self.update_phase(phases.SCORING):
                drop_scores = self.prune(weight, weight.grad)
                grow_scores = self.grow(weight, weight.grad, self.generator)
            with self.update_phase(phases.PRUNE_GROW):
                active = self.mask_set.active(name)
                new = drop_and_grow(active, drop_scores, grow_scores, n_drop, n_grow, self.generator)
                self.mask_set.set_mask(name, new)

    # -- checkpoints --------------------------------------------------------------------------------
    def extra_state_dict(self) -> dict[str, Any]:
        """The masks (csr: its structures), skipped updates and the execution's name."""
        return {"masks": self.mask_set.state_dict(), "updates_skipped": self.updates_skipped, "execution": self.execution.name}

    def load_extra_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the masks; refuses a checkpoint made with another execution."""
        saved = state.get("execution")  # None: a checkpoint from before executions were recorded
        if saved is not None and saved != self.execution.name:
            # Their saved structures differ (csr keeps values, 2:4 needs 2:4 masks): loading one into
            # another would fail obscurely or train a matrix other than the one computed with.
            raise ValueError(f"the checkpoint was made with execution {saved!r}; this case runs {self.execution.name!r}")
        if "masks" in state:
            self.mask_set.load_state_dict(state["masks"])
        self.updates_skipped = int(state.get("updates_skipped", 0))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """`Method.load_state_dict`, then weights and state zeroed at masked positions."""
        super().load_state_dict(state)
        # Masks load before the weights and optimizer state; zero those at masked positions once
        # they are in, since no ordinary step will (a checkpoint of this code is already zero there).
        self.mask_set.enforce()
