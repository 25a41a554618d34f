"""The interface every DST method implements, and the training step they all share.

A method owns a model and its optimizer. `train_segment` runs ordinary training steps (forward,
loss, backward, optimizer step) and the topology updates that fall due. Subclasses change behaviour
through hooks, each run under its profiler phase label, so a third-party method gets the same
labels without writing profiler code. The full contract (hook order, attributes, what the harness
samples and when) is the `Method` class docstring.

Distributed (when `torch.distributed` is initialised, e.g. under torchrun): the base class wraps
`model` in DistributedDataParallel at the first segment and `forward_loss` runs through that
wrapper (`forward_module`), so gradients arrive averaged over ranks; `model` and `optimizer` stay
the plain, live objects. Before each topology update every rank takes rank 0's generator state,
so random draws agree; after it, a wrapper whose parameters are no longer the model's (a resize
replaced them) is rebuilt, and the rebuild counts as part of the update. A method whose forward
leaves some parameters unused names them in `ddp_ignored_parameters`. In a plain process none of
this runs: the per-step path is the same.

Harness-level options every method receives alike: `precision` (autocast, with a loss scaler for
fp16) and `fuse_norms` (norm1+qkv and norm2+fc1 of every timm block run as one op that keeps only
the norm's input for backward; see `dstbench.models.fused_norms`).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, ClassVar

import torch
import torch.nn.functional as F

from dstbench.util import distributed

from dstbench.dst import phases
from dstbench.dst.ddp_sync import DDPSync
from dstbench.dst.method_params import param_names, parse_params
from dstbench.dst.segment_stats import SegmentStats
from dstbench.dst.update_timing import UpdateTimer
from dstbench.util.device import synchronize
from dstbench.models.fused_norms import fuse_block_norms
from dstbench.dst.optimizer import build_optimizer
from dstbench.dst.update_schedule import UpdateSchedule
from dstbench.models.timm_models import default_prunable, family, is_vision_transformer, prunable_weights

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


class Method:
    """Base class of every method: the contract between a DST method and the harness.

    A method is a class registered with `@register_method(name, kind=...)` (`kind`: `dense`,
    `masked` or `compact`). The harness builds the model, then the method with
    `Method(model, density=..., total_steps=..., optimizer=..., precision=..., fuse_norms=...,
    seed=..., **params)`, and calls `train_segment(batches, steps)` repeatedly: warm-up segments, then
    the timed ones. Everything a method changes, it changes through the hooks below.

    **One training step** (`train_step`; `step` is 1-based: the first step of training is step 1,
    and `self.step` holds the number of steps already taken, so it is `step - 1` inside the hooks):

    | order | call | phase label | on an update step with `update_replaces_step` |
    |---|---|---|---|
    | 1 | `before_forward(step)` | forward | runs |
    | 2 | forward and loss (`forward_loss`) | forward | runs |
    | 3 | backward | backward | runs |
    | 4 | `after_backward(step)` | backward | runs |
    | 5 | `update_due(step)` (after backward: the gradients of this step exist) | backward | runs |
    | 6 | `before_optimizer_step(step)` | masking | **skipped** |
    | 7 | optimizer step (with the fp16 loss scaler when `precision: fp16`) | optimizer_step | **skipped** (fp16: gradients unscaled, scaler updated) |
    | 8 | `after_optimizer_step(step)` | masking | **skipped** |
    | 9 | learning-rate scheduler step, when `lr_scheduler` is set | optimizer_step | runs |
    | 10 | `update_topology(step)`, only when `update_due` returned True, under `torch.no_grad()`, timed | topology_update | runs |
    | 11 | `optimizer.zero_grad(set_to_none=True)`; `self.step = step` | - | runs |

    So an update step sees this step's gradients (dense, for masked methods: they mask gradients in
    `before_optimizer_step`, not in backward) and, with `update_replaces_step = True` (rigl-torch and
    google-research/rigl do this), no optimizer step: grown weights stay exactly zero. Without it the
    optimizer steps first and the update follows.

    **What the harness samples, and when.** After the last timed segment of a case, once:
    `density()` (the line's `density_achieved`), `method_buffers()` (their bytes join the
    training-state bytes), `result_extras()` (the line's `method_extras`), the model's parameters and
    the optimizer state (training-state bytes). Per segment: the `SegmentStats` that `train_segment`
    returns (topology updates and their time, from `update_phase` sub-phases). Checkpoints (accuracy
    runs, `--resume`) go through `state_dict` / `load_state_dict`, which call `extra_state_dict` /
    `load_extra_state_dict` for what a method keeps beyond weights and optimizer state.

    **Attributes** set by `__init__`, for subclasses to read:
    `params` (the parsed `Params` dataclass), `target_density` (the case's density, in (0, 1]),
    `total_steps` (the length of training the schedules assume), `model_prunable` (the regex of the
    weights DST acts on unless a method's own `prunable` says otherwise), `optimizer_spec` (the suite's
    optimizer mapping), `precision` (`fp32`, `bf16`, `fp16`), `fuse_norms`, `seed`, `generator` (a
    CPU `torch.Generator` seeded with `seed`: use it for every random draw, so runs repeat and ranks
    agree), `loss_fn`, `lr_scheduler` (None unless the harness sets one), `step` (steps taken),
    `topology_updates` and `topology_ms` (totals so far), `update_steps` (the step of each update so
    far), `device`, `scaler` (fp16 only),
    `distributed`; properties `model`, `optimizer` (the live objects: a compact method that resizes
    replaces them) and `forward_module`. A subclass that builds a new optimizer assigns
    `self._optimizer`. Masked methods add `mask_set` (`dstbench.dst.masked.MaskedMethod`), BARTER
    its `allotment`.

    **Parameters** are a nested `Params` dataclass; a suite's `params:` mapping is parsed into it
    (unknown names and wrong types are refused before anything runs). The help `dstbench list
    NAME` prints for a parameter is `field(metadata={"help": "..."})` when given, else the comment
    after the field on its line (`delta_t: int = 100  # steps between topology updates`).
    """

    name: ClassVar[str] = "base"
    kind: ClassVar[str] = "dense"
    description: ClassVar[str] = ""
    # rigl-torch and google-research/rigl skip the optimizer step on a mask-update step; methods that
    # follow them set this, so the update sees the dense gradient and grown weights stay at zero.
    update_replaces_step: ClassVar[bool] = False
    # When set (in `__init__`), `update_due` follows it.
    schedule: UpdateSchedule | None = None
    # A method that resizes transformer blocks (attention heads, MLP channels) trains timm
    # VisionTransformers only; suite validation refuses it on any other model.
    vision_transformer_only: ClassVar[bool] = False

    @classmethod
    def model_problem(cls, model: torch.nn.Module, params: Mapping[str, Any], model_prunable: str | None) -> str | None:
        """Why this method cannot train `model` (the suite's, built on the meta device) with
        `params` (the suite's for it), or None. Suite validation refuses the suite with it (exit 2),
        so no case starts that cannot run. `model_prunable`: the suite's `model.prunable`."""
        if cls.vision_transformer_only and not is_vision_transformer(model):
            return f"{cls.name} resizes the attention heads and MLP channels of timm VisionTransformer blocks, which a {family(model)} does not have"
        return None

    @classmethod
    def builds_own_model(cls, params: Mapping[str, Any]) -> bool:
        """Whether it trains a model it builds from `model_name` and `model_kwargs` (small_dense's
        `layout: scaled`): validation refuses it a `model.checkpoint`, which fits the given one."""
        return False

    @dataclasses.dataclass
    class Params:
        pass

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        density: float,
        total_steps: int,
        optimizer: dict[str, Any],
        precision: str = "fp32",
        fuse_norms: bool = False,
        seed: int = 0,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
        model_prunable: str | None = None,
        model_name: str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        **params: Any,
    ) -> None:
        if not 0.0 < density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {density}")
        if total_steps <= 0:
            raise ValueError(f"total_steps must be positive, got {total_steps}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
        self.params = self.parse_params(params)
        self.target_density = float(density)
        self.total_steps = int(total_steps)
        self.optimizer_spec = dict(optimizer)
        self.precision = precision
        self.fuse_norms = bool(fuse_norms)
        self.seed = int(seed)
        self.loss_fn = loss_fn or F.cross_entropy
        # The suite's `model.prunable`, else the model's default (a method's own `prunable` goes first).
        self.model_prunable = model_prunable or default_prunable(model)
        # The timm name and kwargs `model` was built from (the harness passes them; `builds_own_model`).
        self.model_name, self.model_kwargs = model_name, dict(model_kwargs or {})
        self.lr_scheduler: Any = None  # stepped once per training step when set
        self.step = 0  # optimizer steps taken (topology-update steps included)
        self.topology_updates = 0
        self.topology_ms = 0.0
        self.topology_detail_ms: dict[str, float] = {}
        self.update_steps: list[int] = []  # the step of each update so far: what a time to target counts
        self.generator = torch.Generator().manual_seed(self.seed)  # CPU: same draws on every device
        self._model = model
        if self.fuse_norms:
            # Same Parameters, same names: only the blocks' forward changes.
            fuse_block_norms(model)
        self.device = next(model.parameters()).device
        self._optimizer = build_optimizer(self.optimizer_spec, model)
        amp_dtype = PRECISIONS[precision]
        self._autocast = (
            (lambda: torch.autocast(self.device.type, dtype=amp_dtype)) if amp_dtype else nullcontext
        )
        self.scaler = torch.amp.GradScaler(self.device.type) if precision == "fp16" else None
        self._update_timer = UpdateTimer(self.device)
        self.distributed = distributed.is_distributed()
        self._ddp = DDPSync()

    # -- parameters ---------------------------------------------------------------------------------
    @classmethod
    def param_names(cls) -> list[str]:
        """The names a suite's `params:` may use for this method."""
        return param_names(cls.Params)

    @classmethod
    def parse_params(cls, params: dict[str, Any]) -> Any:
        """The method's `Params` from a suite's `params` (`dstbench.dst.method_params`): a suite
        with an unknown name or a value of the wrong type is refused before anything runs."""
        return parse_params(cls.name, cls.Params, params)

    # -- the live objects ---------------------------------------------------------------------------
    @property
    def model(self) -> torch.nn.Module:
        """The live model (not the DDP wrapper). A compact method's Parameters change at updates."""
        return self._model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The live optimizer over `model`'s current Parameters."""
        return self._optimizer

    @property
    def forward_module(self) -> torch.nn.Module:
        """What the training forward calls: the DDP wrapper of `model` when distributed, else `model`."""
        return self._model if self._ddp.wrapper is None else self._ddp.wrapper

    def prunable(self) -> dict[str, torch.nn.Parameter]:
        """The weights DST acts on (`model_prunable`: a ViT's qkv, proj, fc1, fc2 of every block;
        another model's convolutions and linears but stem and classifier), by parameter name."""
        return prunable_weights(self.model, self.model_prunable)

    def density(self) -> float:
        """Fraction of prunable weights active now (the line's `density_achieved`). Here: counted
        from the tensors' nonzeros, right for a dense model; masked methods count their masks,
        compact ones the weights physically present against the full-size model."""
        weights = self.prunable().values()
        total = sum(w.numel() for w in weights)
        return sum(int(torch.count_nonzero(w)) for w in weights) / total if total else 1.0

    def method_buffers(self) -> dict[str, torch.Tensor]:
        """Tensors the method keeps beside parameters and optimizer state (masks, dense-gradient
        buffers, importance accumulators), counted in the training-state bytes."""
        return {}

    def result_extras(self) -> dict[str, Any]:
        """Method-specific fields for the result line (e.g. BARTER's topology history)."""
        return {}

    def ddp_ignored_parameters(self) -> set[str]:
        """Names of parameters the training forward does not use now, which DDP must therefore not
        wait for. Default: the empty ones (nothing to synchronise); BARTER adds its empty branches."""
        return {name for name, p in self.model.named_parameters() if p.numel() == 0}

    # -- hooks --------------------------------------------------------------------------------------
    def before_forward(self, step: int) -> None:
        """Before the forward of `step` (1-based). E.g. csr asks for the dense weight gradient on the
        step an update falls due."""

    def after_backward(self, step: int) -> None:
        """After the backward of `step`, before `update_due`: the gradients are there (scaled by the
        loss scaler under fp16). E.g. BARTER accumulates its importance statistics here."""

    def before_optimizer_step(self, step: int) -> None:
        """Before the optimizer step (phase `masking`), e.g. masking gradients. Skipped on an update
        step of a method with `update_replaces_step`."""

    def after_optimizer_step(self, step: int) -> None:
        """After the optimizer step (phase `masking`), e.g. masking weights and optimizer state.
        Skipped on an update step of a method with `update_replaces_step`."""

    def update_due(self, step: int) -> bool:
        """Whether a topology update runs at `step`; asked after backward, and also for steps ahead
        (the profiler picks steps with and without an update), so it must be a pure function of
        `step`: never count calls or change state in it. Default: by `self.schedule` (an
        `UpdateSchedule`) when the method sets one, else never."""
        return self.schedule is not None and self.schedule.is_update_step(step)

    def updates_made(self) -> int:
        """The topology updates made so far. Default: those the harness ran (`update_topology`); a
        method whose library updates its topology elsewhere (inside its optimizer wrapper) reports
        its library's count here."""
        return self.topology_updates

    def update_shortfall(self) -> tuple[int, int] | None:
        """(the updates its declared `schedule` asks for in the steps taken so far, the updates made)
        when fewer than half were made: a DST method that (nearly) never updated is a static mask.
        None without a schedule or when on track."""
        if self.schedule is None:
            return None
        asked = sum(1 for s in self.schedule.update_steps() if s <= self.step)
        made = self.updates_made()
        return (asked, made) if asked and 2 * made < asked else None

    def update_topology(self, step: int) -> None:
        """The topology update at `step`, last in the step (after the optimizer step unless
        `update_replaces_step`), under `torch.no_grad()`, timed as a whole (synchronised before and
        after) and charged to `topology_ms`. Label sub-phases with `update_phase`."""

    @contextmanager
    def update_phase(self, name: str) -> Iterator[None]:
        """Label and time a sub-phase of a topology update (`phases.SCORING`, `phases.RESIZE`...).

        No synchronisation per sub-phase: on CUDA each is bracketed by two timing events, on the CPU
        (synchronous) by the host clock, and the times are read once the update has ended and been
        synchronised as a whole. So a method may open a sub-phase per layer and still pay one sync
        per update, not two per layer."""
        with phases.phase(name), self._update_timer.sub_phase(name.rsplit("/", 1)[-1]):
            yield

    # -- training -----------------------------------------------------------------------------------
    def train_segment(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], steps: int) -> SegmentStats:
        """Run `steps` training steps from `batches`, with the topology updates that fall due."""
        self.model.train()
        if self.distributed:
            # The first segment wraps; a checkpoint load may have resized.
            self._ddp.sync(self._model, self.device, self.ddp_ignored_parameters())
        iterator = batches if isinstance(batches, Iterator) else iter(batches)
        updates_before, ms_before = self.topology_updates, self.topology_ms
        detail_before = dict(self.topology_detail_ms)
        loss_sum = torch.zeros((), device=self.device)
        images = 0
        for _ in range(steps):
            with phases.phase(phases.DATA):
                inputs, targets = next(iterator)
                inputs = inputs.to(self.device, non_blocking=True)
                targets = targets.to(self.device, non_blocking=True)
            loss_sum += self.train_step(inputs, targets)
            images += inputs.shape[0]
        # The one host-device synchronisation of a segment.
        loss = (loss_sum / steps).item() if steps else math.nan
        return SegmentStats(
            steps=steps,
            images=images,
            loss=loss,
            topology_updates=self.topology_updates - updates_before,
            topology_ms=self.topology_ms - ms_before,
            topology_detail_ms={
                k: v - detail_before.get(k, 0.0) for k, v in self.topology_detail_ms.items()
            },
        )

    def forward_loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with self._autocast():
            return self.loss_fn(self.forward_module(inputs), targets)

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One optimizer step; returns the detached loss (no host sync)."""
        step = self.step + 1
        with phases.phase(phases.FORWARD):
            self.before_forward(step)
            loss = self.forward_loss(inputs, targets)
        with phases.phase(phases.BACKWARD):
            (self.scaler.scale(loss) if self.scaler else loss).backward()
            self.after_backward(step)
        due = self.update_due(step)
        if due and self.update_replaces_step:
            if self.scaler:
                # The update reads the gradients instead of the step: unscale them as the step would
                # have, and let the scaler lower its scale if they overflowed, as after a skipped step.
                self.scaler.unscale_(self.optimizer)
                self.scaler.update()
        else:
            with phases.phase(phases.MASKING):
                self.before_optimizer_step(step)
            with phases.phase(phases.OPTIMIZER_STEP):
                if self.scaler:
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    self.optimizer.step()
            with phases.phase(phases.MASKING):
                self.after_optimizer_step(step)
        if self.lr_scheduler is not None:
            # Once per training step, a step the update replaced included: the LR schedule counts
            # training steps, so it must not fall behind by one at every such update.
            with phases.phase(phases.OPTIMIZER_STEP):
                self.lr_scheduler.step()
        if due:
            self._run_update(step)
        self.optimizer.zero_grad(set_to_none=True)
        self.step = step
        return loss.detach().float()

    def _run_update(self, step: int) -> None:
        # Updates are rare; synchronising around them is what lets their time be reported.
        synchronize(self.device)
        self._update_timer.begin()
        start = time.perf_counter()
        with phases.phase(phases.TOPOLOGY_UPDATE), torch.no_grad():
            if self.distributed:
                # Rank 0's state: the update's random draws (ties, random grows, clone noise) agree.
                distributed.broadcast_generator_(self.generator)
            self.update_topology(step)
            if self.distributed and self._ddp.stale(self._model, self.ddp_ignored_parameters()):
                with self.update_phase(phases.DDP_REBUILD):
                    self._ddp.sync(self._model, self.device, self.ddp_ignored_parameters())
        synchronize(self.device)
        self.topology_ms += (time.perf_counter() - start) * 1e3
        self.topology_updates += 1
        self.update_steps.append(step)
        for key, ms in self._update_timer.end().items():
            self.topology_detail_ms[key] = self.topology_detail_ms.get(key, 0.0) + ms

    # -- checkpoints ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training: weights, optimizer state, schedule position."""
        return {
            "method": self.name,
            "step": self.step,
            "topology_updates": self.topology_updates,
            "topology_ms": self.topology_ms,
            "topology_detail_ms": dict(self.topology_detail_ms),
            "update_steps": list(self.update_steps),
            "generator": self.generator.get_state(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler else None,
            "extra": self.extra_state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict()`'s output (same method; shapes restored first)."""
        if state.get("method") != self.name:
            raise ValueError(f"checkpoint is of method {state.get('method')!r}, not {self.name!r}")
        # Shapes first (a compact method resizes itself), then the weights and optimizer state.
        self.load_extra_state_dict(state.get("extra") or {})
        self.model.load_state_dict(state["model"])
        # torch may keep the given state tensors as they are; a copy keeps two live methods apart.
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        if self.scaler and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        if self.lr_scheduler is not None and state.get("lr_scheduler"):
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        self.step = int(state["step"])
        self.topology_updates = int(state["topology_updates"])
        self.topology_ms = float(state["topology_ms"])
        self.topology_detail_ms = dict(state["topology_detail_ms"])
        self.update_steps = [int(s) for s in state.get("update_steps", [])]  # absent in older checkpoints
        self.generator.set_state(state["generator"])

    def extra_state_dict(self) -> dict[str, Any]:
        """Method state beyond weights and optimizer (masks, topology, accumulators)."""
        return {}

    def load_extra_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state_dict` returned; called before the weights are loaded, so a
        compact method can take its saved shapes first."""
