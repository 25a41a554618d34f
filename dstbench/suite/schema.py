"""A suite's schema: `SuiteConfig` and its sections, validated by pydantic (files are read by
`dstbench.suite.loading`).

Everything is checked before any case runs: unknown keys, unknown methods or method parameters
(types and ranges, in each method's `Params`), models that timm cannot build as a ViT, densities
outside (0, 1], non-positive counts, labels whose cases would share a file name, expectations that
name nothing the suite runs. The module is longer than the 450-line guideline because it is one
schema tree with its cross-checks beside the fields they check.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt
from pydantic import ValidationInfo, field_validator, model_validator

import dstbench.methods as catalog
from dstbench.execution.launchers.config import LauncherConfig
from dstbench.execution.launchers.subprocess.config import SubprocessConfig
from dstbench.suite.cases import case_id
from dstbench.util.files import slug

DATASETS = ("synthetic", "digits", "mnist5k", "cifar10", "cifar100", "imagefolder")
METRICS = (
    "speedup",  # median of per-round reference time / method time, same density (derive.speedup_stats)
    "memory_reduction",  # 1 - peak / peak_ref (allocator peak, else state + activation bytes)
    "state_ratio",  # training-state bytes / reference's
    "activation_ratio",  # activation bytes / reference's
    "density_achieved",  # |achieved - target| <= tolerance
    "topology_share",  # topology-update time / segment time
    "top1",  # accuracy, absolute
    "top1_drop",  # top1 of `vs` (default dense) minus the method's
)


def _check_files(info: ValidationInfo) -> bool:
    """Whether validation may read the filesystem (see `parse_suite`)."""
    return bool((info.context or {}).get("check_files", True))


class Strict(BaseModel):
    # No inf or nan anywhere a suite takes a number (seconds, rates, bounds): refused, never a crash.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelConfig(BaseModel):
    """`name` is a timm ViT; every other key goes to `timm.create_model`."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    name: str = "vit_tiny_patch16_224"
    checkpoint: str | None = None

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @field_validator("checkpoint")
    @classmethod
    def _checkpoint_exists(cls, checkpoint: str | None, info: ValidationInfo) -> str | None:
        if checkpoint is not None and _check_files(info) and not Path(checkpoint).expanduser().is_file():
            raise ValueError(f"{checkpoint}: no such file")
        return checkpoint

    @model_validator(mode="after")
    def _buildable(self) -> "ModelConfig":
        from dstbench.models.vit import create_vit

        try:
            create_vit(self.name, device="meta", **self.kwargs)
        except Exception as exc:  # timm raises TypeError/ValueError/RuntimeError for bad kwargs
            raise ValueError(f"cannot build model: {exc}") from None
        return self


class AugmentConfig(Strict):
    random_crop: bool = True
    flip: bool = True
    randaugment: str | None = None  # a timm RandAugment spec such as "rand-m9-mstd0.5"
    mixup: float = Field(0.0, ge=0)
    cutmix: float = Field(0.0, ge=0)
    label_smoothing: float = Field(0.0, ge=0, lt=1)


class DataConfig(Strict):
    """A dataset (see `dstbench.data`). `root` is read relative to the working directory."""

    name: Literal[DATASETS] = "synthetic"  # type: ignore[valid-type]
    download: bool = False  # cifar10/cifar100 only: fetch into `root` when it is not there
    root: str | None = Field(None, validate_default=True)
    num_workers: int = Field(2, ge=0)
    augment: AugmentConfig = AugmentConfig()

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
    name: Literal["sgd", "adamw"] = "adamw"
    lr: PositiveFloat = 1e-3
    weight_decay: float = Field(0.05, ge=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)


class TimingConfig(Strict):
    warmup_steps: PositiveInt = 5  # the first warmup step also counts FLOPs and activation bytes
    segment_steps: PositiveInt = 20
    segments: PositiveInt = 5
    # Training length the methods' schedules assume (t_end is a fraction of it). Default: every
    # step the case runs, warmup included.
    total_steps: PositiveInt | None = None
    # The cases compared with each other (every method at one density, plus dense) time their
    # segments in rounds, one segment each in turn, each case in its own live process, and
    # speedups come from per-round paired ratios (dstbench.execution.rounds). False: one case after
    # another. How segments are ordered, not what a case measures: left out of `setup_hash`.
    interleave: bool = True
    # Process replicates: the rounds are spread over this many sets of fresh processes (a group's
    # cases restarted together), so a process's own speed offset enters the interval
    # (dstbench.results.intervals); at most one set per round. Each set trains up to its first round
    # untimed, so round r covers the same training steps in every set.
    processes: PositiveInt = 2
    # Untimed segments each case runs, in round order, once its set's cases are all started: the
    # first round after a warm-up and a wait for the others ran slow (README, "How a case is measured").
    settle_segments: int = Field(1, ge=0)
    # The order of a group's cases in each round: rotated by one per round, or shuffled (seeded by
    # the suite's seed), so carry-over from the previous case is not confounded with a method.
    round_order: Literal["rotate", "shuffle", "fixed"] = "rotate"

    @property
    def schedule_steps(self) -> int:
        """The `total_steps` a speed case's method is built with."""
        return self.total_steps or self.warmup_steps + (self.settle_segments + self.segments) * self.segment_steps


# Labels and the suite's name become file and folder names (run folders, checkpoints, traces):
# well inside a file system's 255-byte limit once a stamp or a case id is added.
NAME_LIMIT = 100


class MethodSpec(Strict):
    name: str = Field(min_length=1, max_length=NAME_LIMIT)
    label: str | None = Field(None, min_length=1, max_length=NAME_LIMIT)  # to run one method twice with different params
    params: dict[str, Any] = {}
    # Run this method at these of the suite's densities only (default: all of them); e.g. a 2:4
    # execution, which exists at 0.5 only. Checked in `SuiteConfig._method_densities_in_suite`.
    densities: list[float] | None = Field(None, min_length=1)

    @property
    def key(self) -> str:
        return self.label or self.name


class Expectation(Strict):
    """One gate of `expect:` (see `dstbench.results.expectations`). What it names is checked against the
    suite in `SuiteConfig._expectations_fit_suite`, before any case runs."""

    metric: Literal[METRICS]  # type: ignore[valid-type]
    method: str = "*"  # a label or a glob over labels
    vs: str | None = None  # default: the suite's reference (dense for top1_drop)
    density: float | None = None  # default: every density
    min: float | None = None
    max: float | None = None
    tolerance: float | None = Field(None, ge=0)  # density_achieved only
    # speedup only: which figure `min` and `max` bound: the estimate, or an end of its 95% CI
    # (`ci_low` with `min`: the whole interval clears the bound; README, "Expectations").
    bound: Literal["value", "ci_low", "ci_high"] = "value"

    @property
    def is_glob(self) -> bool:
        return any(ch in self.method for ch in "*?[")


class AccuracyConfig(Strict):
    epochs: PositiveInt = 10
    warmup_epochs: float = Field(1.0, ge=0)
    min_lr: float = Field(1e-5, ge=0)
    eval_every: PositiveInt = 1
    eval_batch_size: PositiveInt = 256
    checkpoint_every: int = Field(0, ge=0)  # epochs; 0: no checkpoints
    # Keep a case's last checkpoint (its trained state) after it finishes; by default it is deleted
    # once the case has its result, since a ViT-Small checkpoint with AdamW state is ~260 MB.
    keep_checkpoint: bool = False


class ProfileConfig(Strict):
    enabled: bool = True
    steps: PositiveInt = 3  # profiled steps; the topology update falls on the last one
    memory_snapshot: bool = True  # CUDA only: allocator history for PyTorch's memory viewer
    # How far past the timed segments the profile may train to reach the next scheduled update;
    # beyond it (or past the schedule's end) the update is forced on the last profiled step.
    max_advance_steps: int = Field(500, ge=0)
    top_ops: PositiveInt = 15  # operators kept in the result line, by self time


PARALLEL_CPU_INTERLEAVED = (
    "launcher.parallel: interleaved speed groups would run side by side on one CPU, sharing its memory bandwidth "
    "and caches, so their rounds would not compare cases under the same conditions; use parallel: 1, or "
    "timing.interleave: false (times taken side by side, each line warned), or mode: accuracy"
)


class SuiteConfig(Strict):
    name: str = Field(min_length=1, max_length=NAME_LIMIT)
    description: str = ""
    device: Literal["auto", "cuda", "cpu", "mps"] = "auto"
    seed: int = Field(0, ge=0, le=2**63 - 1)  # what torch.manual_seed and numpy accept
    plugins: list[str] = []  # modules imported first, so their methods register
    # Factories, not instances: building the default model (torch, timm) waits for a suite that
    # needs it, so importing this module stays light (reports read expectations through it).
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    batch_size: PositiveInt = 64
    optimizer: OptimizerConfig = OptimizerConfig()
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    # norm1+qkv and norm2+fc1 of every ViT block as one op that keeps only the norm's input for
    # backward (dstbench.models.fused_norms); a harness option, applied to every method alike.
    fuse_norms: bool = False
    mode: Literal["speed", "accuracy", "both"] = "speed"
    # Intra-op threads of every case process (torch.set_num_threads); default: the cores in the
    # process's affinity mask (`taskset` narrows it). Recorded in each result's `env`.
    threads: PositiveInt | None = None
    timing: TimingConfig = TimingConfig()
    accuracy: AccuracyConfig = AccuracyConfig()
    methods: list[MethodSpec] = Field(min_length=1)  # a bare name is allowed
    densities: list[float] = Field(min_length=1)
    reference: str = "dense"  # default: dense when the suite runs it, else the first method
    launcher: LauncherConfig = SubprocessConfig()  # one model per launcher, by `name`
    profile: ProfileConfig = ProfileConfig(enabled=False)  # `true` is allowed
    expect: list[Expectation] = []

    @model_validator(mode="before")
    @classmethod
    def _import_plugins_and_default_reference(cls, data: Any) -> Any:
        if isinstance(data, dict):
            plugins = data.get("plugins") or []
            if isinstance(plugins, list) and all(isinstance(p, str) for p in plugins):
                catalog.import_plugins(plugins)  # anything else: the field's own type error
            methods = data.get("methods")
            if "reference" not in data and isinstance(methods, list) and methods:
                keys = [m if isinstance(m, str) else (m.get("label") or m.get("name")) for m in methods if isinstance(m, (str, dict))]
                if keys and "dense" not in keys:
                    data = {**data, "reference": keys[0]}
        return data

    @field_validator("methods", mode="before")
    @classmethod
    def _bare_names(cls, methods: Any) -> Any:
        if isinstance(methods, list):
            return [{"name": m} if isinstance(m, str) else m for m in methods]
        return methods

    @field_validator("profile", mode="before")
    @classmethod
    def _profile_flag(cls, profile: Any) -> Any:
        return {"enabled": profile} if isinstance(profile, bool) else profile

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, specs: list[MethodSpec]) -> list[MethodSpec]:
        known = catalog.list_methods()
        for spec in specs:
            if spec.name not in known:
                raise ValueError(f"unknown method {spec.name!r} (registered: {', '.join(known)})")
            info = catalog.method_info(spec.name)
            try:
                info.cls.parse_params(dict(spec.params))
            except (TypeError, ValueError) as exc:
                where = "" if str(exc).startswith("method ") else f"method {spec.key!r}: "
                raise ValueError(f"{where}{exc}") from None
        keys = [s.key for s in specs]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise ValueError(f"methods listed twice: {duplicates}; give each a distinct `label`")
        return specs

    @field_validator("densities")
    @classmethod
    def _densities_in_range(cls, densities: list[float]) -> list[float]:
        for d in densities:
            if not 0.0 < d <= 1.0:
                raise ValueError(f"density {d} is outside (0, 1]")
        if len(set(densities)) != len(densities):
            raise ValueError("densities listed twice")
        return densities

    @model_validator(mode="after")
    def _data_fits_model(self, info: ValidationInfo) -> "SuiteConfig":
        """Cross-checks of `data` against `mode`, `model` and `batch_size`; each message starts
        with the key to change."""
        from dstbench.data.catalog import CATALOG, dataset_classes, missing_packages

        data = self.data
        if data.name == "synthetic":
            if self.mode != "speed":
                raise ValueError(f"data.name: synthetic data has no test split; mode {self.mode!r} needs a real dataset")
            return self
        # An optional package (`pip install 'dstbench[datasets]'`) is checked where the data will be
        # read, not where a finished run's suite is reread.
        problem = missing_packages(data.name) if _check_files(info) else None
        if problem:
            raise ValueError(problem)
        dataset = CATALOG[data.name]
        kwargs = self.model.kwargs
        classes = dataset_classes(data.name, data.root, read_folder=_check_files(info))
        model_classes = kwargs.get("num_classes", 1000)  # timm's ViT default
        if classes is not None and model_classes != classes:
            raise ValueError(f"model.num_classes: is {model_classes}, but {data.name} has {classes} classes")
        channels = kwargs.get("in_chans", 3)
        if channels not in (1, 3) or (channels == 1 and dataset.channels != 1):
            allowed = "1 (as stored) or 3 (repeated)" if dataset.channels == 1 else "3"
            raise ValueError(f"model.in_chans: is {channels}; {data.name} images feed in_chans {allowed}")
        if (data.augment.mixup > 0 or data.augment.cutmix > 0) and self.batch_size % 2:
            raise ValueError(f"batch_size: mixup and cutmix pair images within a batch; {self.batch_size} is odd")
        return self

    def method_densities(self, spec: MethodSpec) -> list[float]:
        """The densities `spec` runs at: its own `densities` or else the suite's (dense: 1.0 only)."""
        if catalog.method_info(spec.name).kind == "dense":
            return [1.0]
        return list(spec.densities) if spec.densities is not None else list(self.densities)

    @model_validator(mode="after")
    def _method_densities_in_suite(self) -> "SuiteConfig":
        for index, spec in enumerate(self.methods):
            if spec.densities is None:
                continue
            where = f"methods.{index}.densities"
            if catalog.method_info(spec.name).kind == "dense":
                raise ValueError(f"{where}: {spec.name} is dense and runs at 1.0 only; remove the key")
            if len(set(spec.densities)) != len(spec.densities):
                raise ValueError(f"{where}: densities listed twice")
            strays = [d for d in spec.densities if not any(math.isclose(d, s) for s in self.densities)]
            if strays:
                listed = ", ".join(f"{d:g}" for d in self.densities)
                raise ValueError(f"{where}: {', '.join(f'{d:g}' for d in strays)} not among the suite's densities ({listed})")
        return self

    @model_validator(mode="after")
    def _executions_fit_suite(self) -> "SuiteConfig":
        """A masked method's `execution` must be able to run here (semi_structured: CUDA, density
        0.5, fp16/bf16; csr: not under torchrun), so a run never starts cases that cannot run."""
        from dstbench.dst.masked.backends import execution_problem

        for index, spec in enumerate(self.methods):
            if "execution" not in spec.params:
                continue
            problem = execution_problem(
                spec.params, device=self.device, densities=self.method_densities(spec),
                precision=self.precision, launcher=self.launcher.case_launcher,
            )
            if problem:
                raise ValueError(f"methods.{index}.params.execution: {problem}")
        return self

    @model_validator(mode="after")
    def _parallel_fits_device(self) -> "SuiteConfig":
        """`launcher.parallel` runs cases side by side, each on its own GPU or its own share of the
        cores. On one CPU they still share its memory bandwidth and caches, so interleaved groups,
        whose rounds exist to compare cases under the same conditions, may not run side by side
        there; `device: auto` is checked once the device is known (`dstbench.execution.launchers.subprocess.parallel`)."""
        if not isinstance(self.launcher, SubprocessConfig) or self.launcher.parallel == 1:
            return self
        if self.device == "mps":
            raise ValueError("launcher.parallel: mps is one device; cases cannot run side by side on their own devices")
        if self.device == "cpu" and self.mode == "speed" and self.timing.interleave:
            raise ValueError(PARALLEL_CPU_INTERLEAVED)
        return self

    @model_validator(mode="after")
    def _case_files_distinct(self) -> "SuiteConfig":
        """Case ids name files (profiler traces, rank folders) through `slug`: two labels that
        slug alike (`r/1`, `r-1`; `R`, `r` on a case-insensitive disk) would overwrite each other."""
        seen: dict[str, str] = {}
        for spec in self.methods:
            dense = catalog.method_info(spec.name).kind == "dense"
            for density in [1.0] if dense else self.densities:
                case = case_id(spec.key, density)
                name = slug(case, "case").casefold()
                if name in seen and seen[name] != spec.key:
                    raise ValueError(
                        f"methods: labels {seen[name]!r} and {spec.key!r} give their cases the same file name "
                        f"({slug(case, 'case')!r}); rename one"
                    )
                seen[name] = spec.key
        return self

    @model_validator(mode="after")
    def _reference_is_run(self) -> "SuiteConfig":
        keys = {m.key for m in self.methods}
        if self.reference not in keys:
            raise ValueError(f"reference {self.reference!r} is not among the methods ({', '.join(sorted(keys))})")
        return self

    @model_validator(mode="after")
    def _expectations_fit_suite(self) -> "SuiteConfig":
        """What each expectation names must exist in the suite, so a typo fails before the run
        instead of as a failed gate after it. Messages start with the key to change."""
        keys = [m.key for m in self.methods]
        has_dense = any(catalog.method_info(m.name).kind == "dense" for m in self.methods)
        allowed_densities = sorted(set(self.densities) | ({1.0} if has_dense else set()))
        for index, exp in enumerate(self.expect):
            where = f"expect.{index}"
            if exp.bound != "value" and exp.metric != "speedup":
                raise ValueError(f"{where}.bound: only speedup has a confidence interval, not {exp.metric}")
            if exp.metric != "density_achieved":
                if exp.tolerance is not None:
                    raise ValueError(f"{where}.tolerance: only for metric density_achieved, not {exp.metric}")
                if exp.min is None and exp.max is None:
                    # Without bounds the expectation could never fail.
                    raise ValueError(f"{where}: metric {exp.metric} needs `min` and/or `max`")
                if exp.min is not None and exp.max is not None and exp.min > exp.max:
                    # ... and with these it could never pass.
                    raise ValueError(f"{where}: min {exp.min:g} is above max {exp.max:g}")
            if not exp.is_glob and exp.method not in keys:
                raise ValueError(f"{where}.method: {exp.method!r} is not a method of the suite ({', '.join(keys)})")
            if exp.vs is not None and exp.vs not in keys:
                raise ValueError(f"{where}.vs: {exp.vs!r} is not a method of the suite ({', '.join(keys)})")
            if exp.metric == "top1_drop" and exp.vs is None and "dense" not in keys:
                raise ValueError(f"{where}.vs: top1_drop compares with dense by default, which the suite does not run; name `vs`")
            if exp.density is not None:
                if not 0.0 < exp.density <= 1.0:
                    raise ValueError(f"{where}.density: {exp.density:g} is outside (0, 1]")
                if not any(math.isclose(exp.density, d) for d in allowed_densities):
                    listed = ", ".join(f"{d:g}" for d in allowed_densities)
                    raise ValueError(f"{where}.density: the suite runs no case at {exp.density:g} (densities: {listed})")
                spec = next((m for m in self.methods if m.key == exp.method), None)
                restricted = spec is not None and spec.densities is not None
                if restricted and not any(math.isclose(exp.density, d) for d in self.method_densities(spec)):
                    listed = ", ".join(f"{d:g}" for d in self.method_densities(spec))
                    raise ValueError(f"{where}.density: {exp.method} runs at {listed} only, not {exp.density:g}")
        return self

    def setup_settings(self) -> dict[str, Any]:
        """What a case's measurement depends on besides its method and density (`setup_hash`'s
        input; run.json keeps it, so a changed suite can be told key by key)."""
        measured = self.model_dump(
            mode="json", include={"device", "seed", "model", "data", "batch_size", "optimizer", "precision", "fuse_norms", "mode", "timing", "accuracy"}
        )
        # How samples are drawn (interleaving, process sets, round order, settle rounds) is not a
        # setting of the measurement (such runs compare); a thread count is, but only an explicit one enters, so suites that leave it at
        # its default keep the hash they had.
        for key in ("interleave", "processes", "round_order", "settle_segments"):  # how samples are drawn
            measured["timing"].pop(key, None)
        if self.threads is not None:
            measured["threads"] = self.threads
        return measured

    def setup_hash(self) -> str:
        """Hash of what a case's measurement depends on besides its method and density.

        Two runs whose cases share this hash (and method, params, density) can be compared.
        """
        measured = self.setup_settings()
        return hashlib.sha256(json.dumps(measured, sort_keys=True).encode()).hexdigest()[:16]
