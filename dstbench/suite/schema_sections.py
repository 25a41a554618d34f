"""The sections of a suite's schema (`model`, `data`, `optimizer`, `timing`, `methods`, `expect`,
`accuracy`, `profile`, `compile`), each a pydantic model with its own checks; `SuiteConfig` in
`dstbench.suite.schema` joins them and checks them against each other."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt
from pydantic import ValidationInfo, field_validator, model_validator

from dstbench.data.catalog import CATALOG

DATASETS = tuple(CATALOG)  # a dataset is its catalog entry and its loader (dstbench.inputs.loaders)
METRICS = (
    "speedup",  # median of per-round reference time / method time, same density (derive.speedup_stats)
    "memory_reduction",  # 1 - peak / peak_ref (allocator peak, else state + activation bytes)
    "state_ratio",  # training-state bytes / reference's
    "activation_ratio",  # activation bytes / reference's
    "density_achieved",  # |achieved - target| <= tolerance
    "topology_share",  # topology-update time / segment time
    "top1",  # accuracy, absolute
    "top1_drop",  # top1 of `vs` (default dense) minus the method's
    "target_reached",  # the fraction of a case's seeds whose top-1 reached accuracy.target_top1
    "time_to_target",  # seconds to that target at the measured step time (mode: both), mean over seeds
    "time_to_target_speedup",  # vs's time to target / the method's, paired by seed
)
# Beside these, `expect:` takes any numeric field a registered tracker declares
# (`dstbench.results.expectations.gate_metrics`): the suite layer sits below the trackers, so the
# name is checked where they are known (`unknown_metrics`, before a run starts).
METRIC_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# The metrics with a 95% interval, whose `bound` may name one of its ends.
INTERVAL_METRICS = ("speedup", "time_to_target", "time_to_target_speedup")


def _check_files(info: ValidationInfo) -> bool:
    """Whether validation may read the filesystem (see `parse_suite`)."""
    return bool((info.context or {}).get("check_files", True))


class Strict(BaseModel):
    # No inf or nan anywhere a suite takes a number (seconds, rates, bounds): refused, never a crash.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelConfig(BaseModel):
    """`name` is any timm model; every key but dstbench's own (`checkpoint`, `input_size`,
    `prunable`) goes to `timm.create_model`."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    name: str = Field("vit_tiny_patch16_224", description=(
        "a timm model (`timm.create_model`): a VisionTransformer, or a CNN or other model for the masked methods; no "
        "pretrained weights are downloaded"))
    checkpoint: str | None = Field(None, description=(
        "weights loaded into the freshly built model before the method wraps it (fine-tuning): a state dict, a timm or "
        "DeiT checkpoint, a .safetensors file or a dstbench case checkpoint; must exist when the suite is validated"))
    input_size: tuple[PositiveInt, PositiveInt, PositiveInt] | None = Field(None, description=(
        "[C, H, W] of one input: synthetic batches, and the size dataset images are resized to; default: a ViT's own "
        "size, else timm's pretrained config `input_size`"))
    prunable: str | None = Field(None, description=(
        "regex (full match) of the parameter names DST prunes; default: a ViT's block linears (qkv, proj, fc1, fc2), "
        "else every Conv2d and Linear weight but the stem (first convolution) and the classifier. A masked method's "
        "own `prunable` parameter goes first"))

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint_exists(cls, checkpoint: str | None, info: ValidationInfo) -> str | None:
        if checkpoint is not None and _check_files(info) and not Path(checkpoint).expanduser().is_file():
            raise ValueError(f"{checkpoint}: no such file")
        return checkpoint

    @field_validator("prunable")
    @classmethod
    def _pattern_compiles(cls, pattern: str | None) -> str | None:
        try:
            re.compile(pattern or "")
        except re.error as exc:
            raise ValueError(f"not a valid regular expression ({exc}): {pattern!r}") from None
        return pattern

    @model_validator(mode="after")
    def _buildable(self) -> "ModelConfig":
        from dstbench.models.timm_models import create_model, input_shape, is_vision_transformer

        try:
            model = create_model(self.name, device="meta", **self.kwargs)
        except Exception as exc:  # timm raises TypeError/ValueError/RuntimeError for bad kwargs
            raise ValueError(f"cannot build {self.name!r}: {exc}") from None
        if self.input_size is not None and is_vision_transformer(model) and tuple(self.input_size) != input_shape(model):
            raise ValueError(
                f"input_size {list(self.input_size)}, but {self.name!r} (a VisionTransformer) takes "
                f"{list(input_shape(model))}; set img_size and in_chans instead, or leave input_size out")
        if self.input_size is None and not is_vision_transformer(model):
            try:
                input_shape(model)
            except ValueError as exc:
                raise ValueError(f"input_size: {exc}") from None
        return self


class AugmentConfig(Strict):
    """Training augmentation; evaluation only resizes, centre-crops (image folders) and normalises."""

    random_crop: bool = Field(True, description=(
        "small sets: zero padding of 1/8 of the side, then a random crop (CIFAR's 4 pixels at 32); image folders: a "
        "random-resized crop"))
    flip: bool = Field(True, description="random horizontal flip")
    randaugment: str | None = Field(None, description="a timm RandAugment spec such as `rand-m9-mstd0.5-inc1`; null: none")
    mixup: float = Field(0.0, ge=0, description="alpha of timm's `Mixup` (0: off); with mixup or cutmix the loss is a soft-target cross-entropy")
    cutmix: float = Field(0.0, ge=0, description="cutmix alpha of timm's `Mixup` (0: off)")
    label_smoothing: float = Field(0.0, ge=0, lt=1, description="label smoothing of the cross-entropy (with mixup or cutmix, applied by `Mixup`)")


class TeacherConfig(Strict):
    """`data.name: teacher`: labels from a fixed random function of normal inputs drawn fresh every
    epoch (`dstbench.data.teacher`)."""

    classes: int = Field(10, ge=2, description="classes the teacher labels into (the model's num_classes)")
    features: PositiveInt = Field(256, description="random sinusoids the teacher sums per patch")
    frequency: PositiveFloat = Field(1.0, description=(
        "their frequency: higher needs more capacity to imitate (docs/guides/accuracy.md, \"A workload that can rank\")"))
    patch: PositiveInt = Field(4, description="side of the square patches the teacher reads (the student's patch_size is natural)")
    seed: int = Field(0, ge=0, description="the teacher's weights and the test split (the same for every suite seed)")
    train_size: PositiveInt = Field(8192, description="training inputs drawn per epoch (new ones every epoch)")
    test_size: PositiveInt = Field(4096, description="test inputs (fixed)")


class DataConfig(Strict):
    """A dataset (see `dstbench.data`). `root` is read relative to the working directory."""

    name: Literal[DATASETS] = Field("synthetic", description=(  # type: ignore[valid-type]
        "synthetic: random device-resident tensors (speed only); digits, mnist5k: packaged (dstbench[datasets]); "
        "teacher: a teacher-student workload, new inputs every epoch labelled by a fixed random function (`teacher`); "
        "cifar10, cifar100: torchvision's layout under `root`; imagefolder: `root`/train/<class>/ and `root`/val/<class>/"))
    download: bool = Field(False, description="cifar10/cifar100 only: download into `root` through torchvision when it is not there")
    root: str | None = Field(None, validate_default=True, description=(
        "the dataset's folder, relative to the working directory; required for cifar10, cifar100 and imagefolder"))
    num_workers: int = Field(2, ge=0, description="DataLoader worker processes")
    augment: AugmentConfig = Field(AugmentConfig(), description="training augmentation (`data.augment`, below)")
    teacher: TeacherConfig | None = Field(None, description="name: teacher only: the teacher and split sizes (defaults filled in)")

    @model_validator(mode="before")
    @classmethod
    def _teacher_settings(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("name") != "teacher":
            if data.get("teacher") is not None:
                raise ValueError("teacher: only with `name: teacher`")
            return data
        # The teacher's inputs are tensors, not images: the image augmentations have nothing to act
        # on (mixup, cutmix and label smoothing act on batches and stay), and worker processes
        # would each hold a stale copy of a split that is drawn again every epoch.
        augment = dict(data.get("augment") or {})
        images = [k for k in ("random_crop", "flip", "randaugment") if augment.get(k)]
        if images:
            raise ValueError(f"augment: {', '.join(images)} act on images; teacher inputs are tensors: set them false/null")
        if data.get("num_workers"):
            raise ValueError("num_workers: teacher data are drawn in the training process; set 0")
        augment.update(random_crop=False, flip=False)
        return {**data, "augment": augment, "num_workers": 0, "teacher": data.get("teacher") or {}}

    @field_validator("root")
    @classmethod
    def _root_holds_dataset(cls, root: str | None, info: ValidationInfo) -> str | None:
        # Runs for the default too (validate_default), so a missing `root` is reported here.
        if "name" not in info.data:
            return root  # the name itself was invalid and is reported on its own
        from dstbench.data.catalog import check_root

        problem = check_root(info.data["name"], root, bool(info.data.get("download")), _check_files(info))
        if problem:
            raise ValueError(problem)
        return root


class OptimizerConfig(Strict):
    """The optimizer every method of the suite trains with."""

    name: Literal["sgd", "adamw"] = Field("adamw", description="adamw (decoupled weight decay) or sgd")
    lr: PositiveFloat = Field(1e-3, description="learning rate (the peak of accuracy mode's warmup and cosine)")
    weight_decay: float = Field(0.05, ge=0, description="weight decay: decoupled for adamw, coupled for sgd")
    momentum: float = Field(0.9, ge=0, lt=1, description="sgd only: momentum")
    nesterov: bool = Field(False, description="sgd only: Nesterov momentum")
    betas: tuple[float, float] = Field((0.9, 0.999), description="adamw only: the moment decay rates")


class TimingConfig(Strict):
    """How speed is sampled (`mode: speed` and `both`): warm-up, then timed segments of steps."""

    warmup_steps: PositiveInt = Field(5, description="untimed steps first; the first one also counts FLOPs and activation bytes")
    segment_steps: PositiveInt = Field(20, description="training steps per timed segment")
    segments: PositiveInt = Field(5, description="timed segments per case (the raw samples; rounds, when interleaved); >= 6 for a 95% interval")
    total_steps: PositiveInt | None = Field(None, description=(
        "the training length the methods' schedules assume (t_end is a fraction of it); default: every step the case "
        "runs, warm-up and settling included"))
    # dstbench.execution.rounds. How segments are ordered, not what a case measures: left out of `setup_hash`.
    interleave: bool = Field(True, description=(
        "time the cases compared with each other (every method at one density, plus dense) in rounds, one segment "
        "each in turn, so speedups are per-round paired ratios; false: one case after another. Not in the suite hash"))
    # A group's cases restarted together per set (dstbench.results.intervals); at most one set per round. Each
    # set trains up to its first round untimed, so round r covers the same training steps in every set.
    processes: PositiveInt = Field(2, description=(
        "process sets: the rounds are spread over this many sets of fresh processes, so a process's own speed offset "
        "enters the interval"))
    # A precaution against a slow first round after a warm-up and a wait (docs/concepts/interleaving.md).
    settle_segments: int = Field(1, ge=0, description="untimed segments each case runs in round order once its process set is started")
    # Balanced, so carry-over from the previous case is not confounded with a pair of methods.
    round_order: Literal["williams", "rotate", "shuffle", "fixed"] = Field("williams", description=(
        "the order of a group's cases in each round: a Williams design (every case follows every other equally "
        "often over a block of rounds), rotated by one per round, shuffled (seeded by `seed`) or fixed"))
    # dstbench.measure.hand_over: a case's OpenMP workers spin ~7 ms after its segment ends.
    hand_over: Literal["parked", "immediate"] = Field("parked", description=(
        "interleaved: after each segment a case waits, untimed, until its process's other threads are parked before "
        "the next case's segment starts; immediate: at once (its spinning OpenMP workers then share the next case's "
        "cores). Not in the suite hash"))
    # With `seeds:` the first seed's segments are enough for speed, which a seed barely moves; more
    # seeds' segments cost their time again. Not in the suite hash: adding it resumes a run folder.
    per_seed: bool = Field(False, description=(
        "with `seeds:`, time the speed segments of every seed; false: the first seed's only (the other seeds "
        "train for accuracy alone). Not in the suite hash"))

    @property
    def schedule_steps(self) -> int:
        """The `total_steps` a speed case's method is built with."""
        return self.total_steps or self.warmup_steps + (self.settle_segments + self.segments) * self.segment_steps


# Labels and the suite's name become file and folder names (run folders, checkpoints, traces):
# well inside a file system's 255-byte limit once a stamp or a case id is added.
NAME_LIMIT = 100


class MethodSpec(Strict):
    """One entry of `methods:`: a bare method name, or a mapping with these keys."""

    name: str = Field(min_length=1, max_length=NAME_LIMIT, description="a registered method (`dstbench list`)")
    label: str | None = Field(None, min_length=1, max_length=NAME_LIMIT, description=(
        "the cases' name in results and reports (default: `name`); to run one method twice with different params"))
    params: dict[str, Any] = Field({}, description="the method's parameters (`dstbench list METHOD`), checked by its `Params`")
    # Run this method at these of the suite's densities only (default: all of them); e.g. a 2:4
    # execution, which exists at 0.5 only. Checked in `SuiteConfig._method_densities_in_suite`.
    densities: list[float] | None = Field(None, min_length=1, description=(
        "run this method at these of the suite's densities only (default: all of them); not for dense"))

    @property
    def key(self) -> str:
        return self.label or self.name


class Expectation(Strict):
    """One gate of `expect:` (see `dstbench.results.expectations`). What it names is checked against the
    suite in `SuiteConfig._expectations_fit_suite`, before any case runs."""

    metric: str = Field(pattern=METRIC_NAME, description=(
        "what is gated: " + ", ".join(METRICS) + " (the CI gates guide defines each), or any numeric field a registered "
        "tracker declares (a plugin's too), gated line by line"))
    method: str = Field("*", description="a method label or a glob over labels (`\"*\"`, `\"r*\"`)")
    vs: str | None = Field(None, description=(
        "the method a relative metric compares with, at the same density (a dense one at 1.0); default: the suite's "
        "`reference` (dense for top1_drop)"))
    density: float | None = Field(None, description="only the cases at this density (default: every density)")
    min: float | None = Field(None, description="lower bound on the value; every metric but density_achieved needs min and/or max")
    max: float | None = Field(None, description="upper bound on the value")
    tolerance: float | None = Field(None, ge=0, description="density_achieved only: the largest allowed |achieved - target| (default 0.01)")
    # `ci_low` with `min`: the whole interval clears the bound (docs/guides/ci-gates.md, "Expectations").
    bound: Literal["value", "ci_low", "ci_high"] = Field("value", description=(
        "speedup and the time-to-target metrics only: which figure min and max bound: the estimate, or an end of its "
        "95% interval"))

    @property
    def is_glob(self) -> bool:
        return any(ch in self.method for ch in "*?[")


class TargetsBelowDense(Strict):
    """`accuracy.target_sweep: {below_dense: [...]}`: targets in points below dense's mean final top-1."""

    below_dense: list[PositiveFloat] = Field(min_length=1, description=(
        "percentage points below dense's mean final top-1 in the run, e.g. [0.5, 1, 2, 5] (needs dense in the run)"))


class AccuracyConfig(Strict):
    """Training for accuracy (`mode: accuracy` and `both`) on the suite's dataset."""

    epochs: PositiveInt = Field(10, description="epochs of training; the method's schedule spans epochs x steps per epoch")
    warmup_epochs: float = Field(1.0, ge=0, description="linear learning-rate warmup, then cosine to min_lr, stepped every step")
    min_lr: float = Field(1e-5, ge=0, description="the learning rate the cosine ends at")
    eval_every: PositiveInt = Field(1, description="Top-1/Top-5 on the test split every N epochs and after the last")
    eval_batch_size: PositiveInt = Field(256, description="images per evaluation batch")
    checkpoint_every: int = Field(0, ge=0, description="epochs between case checkpoints (`--resume` continues from them); 0: none")
    # By default deleted once the case has its result, since a ViT-Small checkpoint with AdamW state is ~260 MB.
    keep_checkpoint: bool = Field(False, description="keep a case's last checkpoint (its trained state) after it finishes")
    # Read from the curves, not used in training: never in the suite hash, free to change on --resume.
    target_top1: float | None = Field(None, gt=0, le=1, description=(
        "the test top-1 (a fraction) whose first crossing each case's curve is timed to (`steps_to_target`); default: "
        "99% of dense's mean final top-1 in the run, else of the reference's. Not in the suite hash"))
    # Read from the curves after training, as target_top1: never in the suite hash.
    target_sweep: list[float] | TargetsBelowDense | None = Field(None, description=(
        "more targets to time every case to, from the same curves (the report's table across targets): top-1 "
        "fractions like target_top1, e.g. [0.5, 0.55, 0.6], or {below_dense: [0.5, 1, 2, 5]} in points below dense's "
        "mean final top-1; default: {below_dense: [0.5, 1, 2, 5]} where the run has dense. Not in the suite hash"))

    @field_validator("target_sweep")
    @classmethod
    def _targets_are_fractions(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise ValueError("an empty list sweeps nothing; leave target_sweep out for the default")
            wrong = [v for v in value if not 0 < v <= 1]
            if wrong:
                raise ValueError(f"targets are top-1 fractions in (0, 1], like target_top1; got {', '.join(f'{v:g}' for v in wrong)}")
        return value


class ProfileConfig(Strict):
    """`profile: true`, or these settings: each case profiled after its timed segments."""

    enabled: bool = Field(True, description="profile every case (`profile: true` sets it; `dstbench profile` switches it on)")
    steps: PositiveInt = Field(3, description="profiled steps; the topology update falls on the last one")
    memory_snapshot: bool = Field(True, description="CUDA only: an allocator history for PyTorch's memory viewer")
    max_advance_steps: int = Field(500, ge=0, description=(
        "how far past the timed segments the profile may train to reach the next scheduled update; beyond it (or past "
        "the schedule's end) the update is forced on the last profiled step"))
    top_ops: PositiveInt = Field(15, description="operators kept in the result line, by self time")


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class CompileConfig(Strict):
    """`compile: true`, or these settings: every method's model (its forward, and through
    AOTAutograd its backward) trained under `torch.compile`, alike for every method
    (`dstbench.execution.torch_compile`). The first warm-up step runs eagerly (it counts FLOPs and
    activations), the second compiles; a recompilation in a timed segment (a compact method's
    resize) is counted and charged to the topology update before it."""

    enabled: bool = Field(True, description="train under torch.compile (`compile: true` sets it)")
    mode: Literal[COMPILE_MODES] | None = Field(None, description=(  # type: ignore[valid-type]
        "torch.compile's mode: default, reduce-overhead (CUDA graphs), max-autotune, max-autotune-no-cudagraphs; null: torch's default"))
    dynamic: bool | None = Field(None, description=(
        "torch.compile's dynamic: null marks a size dynamic once it changes, true compiles dynamic shapes from the "
        "start, false always specialises; parameters' shapes stay static, so a resize recompiles"))
    fullgraph: bool = Field(False, description="true: a graph break fails the case instead of compiling around it")
    backend: str = Field("inductor", min_length=1, description=(
        "a torch.compile backend (`torch._dynamo.list_backends()`): inductor generates code, aot_eager only traces"))

    @model_validator(mode="after")
    def _known_backend(self) -> "CompileConfig":
        if not self.enabled:
            return self
        import inspect

        import torch
        from torch._dynamo import list_backends

        # Each compiled model gets its own recompile budget, failing loudly when spent
        # (`dstbench.execution.torch_compile`); an older torch.compile cannot promise that.
        if "isolate_recompiles" not in inspect.signature(torch.compile).parameters:
            raise ValueError(
                f"torch {torch.__version__}'s torch.compile takes no per-model recompile limit (recompile_limit, "
                "isolate_recompiles), which compiled cases need so that they never fall back to eager; use a newer torch"
            )

        known = list_backends(exclude_tags=())
        if self.backend not in known:
            raise ValueError(f"backend {self.backend!r} is not a torch.compile backend here (known: {', '.join(known)})")
        if self.mode is not None and self.backend != "inductor":
            raise ValueError(f"mode {self.mode!r} is inductor's; backend {self.backend!r} takes none")
        return self

    def options(self) -> dict[str, Any]:
        """The keyword arguments of `torch.compile` (and of a result line's `compile`)."""
        options: dict[str, Any] = {"backend": self.backend, "fullgraph": self.fullgraph, "dynamic": self.dynamic}
        return {**options, "mode": self.mode} if self.mode is not None else options


def expectation_problem(suite: Any) -> str | None:
    """Why an expectation of `suite` (a `SuiteConfig`) names what the suite does not run, or could
    never fail or never pass; None when every one fits. Messages start with the key to change."""
    keys = [m.key for m in suite.methods]
    has_dense = any(suite.method_kind(m) == "dense" for m in suite.methods)
    allowed_densities = sorted(set(suite.densities) | ({1.0} if has_dense else set()))
    for index, exp in enumerate(suite.expect):
        where = f"expect.{index}"
        if exp.bound != "value" and exp.metric not in INTERVAL_METRICS:
            return f"{where}.bound: only {', '.join(INTERVAL_METRICS)} have a confidence interval, not {exp.metric}"
        if exp.metric != "density_achieved":
            if exp.tolerance is not None:
                return f"{where}.tolerance: only for metric density_achieved, not {exp.metric}"
            if exp.min is None and exp.max is None:
                # Without bounds the expectation could never fail.
                return f"{where}: metric {exp.metric} needs `min` and/or `max`"
            if exp.min is not None and exp.max is not None and exp.min > exp.max:
                # ... and with these it could never pass.
                return f"{where}: min {exp.min:g} is above max {exp.max:g}"
        if not exp.is_glob and exp.method not in keys:
            return f"{where}.method: {exp.method!r} is not a method of the suite ({', '.join(keys)})"
        if exp.vs is not None and exp.vs not in keys:
            return f"{where}.vs: {exp.vs!r} is not a method of the suite ({', '.join(keys)})"
        if exp.metric == "top1_drop" and exp.vs is None and "dense" not in keys:
            return f"{where}.vs: top1_drop compares with dense by default, which the suite does not run; name `vs`"
        if exp.density is not None:
            if not 0.0 < exp.density <= 1.0:
                return f"{where}.density: {exp.density:g} is outside (0, 1]"
            if not any(math.isclose(exp.density, d) for d in allowed_densities):
                listed = ", ".join(f"{d:g}" for d in allowed_densities)
                return f"{where}.density: the suite runs no case at {exp.density:g} (densities: {listed})"
            spec = next((m for m in suite.methods if m.key == exp.method), None)
            restricted = spec is not None and spec.densities is not None
            if restricted and not any(math.isclose(exp.density, d) for d in suite.method_densities(spec)):
                listed = ", ".join(f"{d:g}" for d in suite.method_densities(spec))
                return f"{where}.density: {exp.method} runs at {listed} only, not {exp.density:g}"
    return None
