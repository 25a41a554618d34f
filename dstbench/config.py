"""Suite files: YAML -> a validated `SuiteConfig`, or a `SuiteError` naming the file, key and what is allowed.

Everything is checked before any case runs: unknown keys, unknown methods or method parameters,
models that timm cannot build as a ViT, densities outside (0, 1], non-positive counts.
"""

from __future__ import annotations

import hashlib
import json
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError
from pydantic import ValidationInfo, field_validator, model_validator

from dstbench import registry

DATASETS = ("synthetic", "digits", "mnist5k", "cifar10", "cifar100", "imagefolder")
METRICS = (
    "speedup",  # reference median time / method median time, same density
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
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(BaseModel):
    """`name` is a timm ViT; every other key goes to `timm.create_model`."""

    model_config = ConfigDict(extra="allow", frozen=True)
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
        from dstbench.vit import create_vit

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
    # speedups come from per-round paired ratios (dstbench.scheduler). False: one case after
    # another. How segments are ordered, not what a case measures: left out of `setup_hash`.
    interleave: bool = True

    @property
    def schedule_steps(self) -> int:
        """The `total_steps` a speed case's method is built with."""
        return self.total_steps or self.warmup_steps + self.segments * self.segment_steps


class MethodSpec(Strict):
    name: str
    label: str | None = None  # to run one method twice with different params
    params: dict[str, Any] = {}

    @property
    def key(self) -> str:
        return self.label or self.name


class Expectation(Strict):
    """One gate of `expect:` (see `dstbench.gates.expect`). What it names is checked against the
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


class LauncherConfig(Strict):
    name: Literal["subprocess", "inprocess", "torchrun"] = "subprocess"
    timeout_s: PositiveFloat = 3600.0
    nproc_per_node: PositiveInt = 1
    nnodes: PositiveInt = 1
    node_rank: int = Field(0, ge=0)
    master_addr: str = "127.0.0.1"
    master_port: int = Field(29500, ge=1, le=65535)


class ProfileConfig(Strict):
    enabled: bool = True
    steps: PositiveInt = 3  # profiled steps; the topology update falls on the last one
    memory_snapshot: bool = True  # CUDA only: allocator history for PyTorch's memory viewer
    # How far past the timed segments the profile may train to reach the next scheduled update;
    # beyond it (or past the schedule's end) the update is forced on the last profiled step.
    max_advance_steps: int = Field(500, ge=0)
    top_ops: PositiveInt = 15  # operators kept in the result line, by self time


class SuiteConfig(Strict):
    name: str
    description: str = ""
    device: Literal["auto", "cuda", "cpu", "mps"] = "auto"
    seed: int = 0
    plugins: list[str] = []  # modules imported first, so their methods register
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    batch_size: PositiveInt = 64
    optimizer: OptimizerConfig = OptimizerConfig()
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    # norm1+qkv and norm2+fc1 of every ViT block as one op that keeps only the norm's input for
    # backward (dstbench.fused); a harness option, applied to every method alike.
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
    launcher: LauncherConfig = LauncherConfig()
    profile: ProfileConfig = ProfileConfig(enabled=False)  # `true` is allowed
    expect: list[Expectation] = []

    @model_validator(mode="before")
    @classmethod
    def _import_plugins_and_default_reference(cls, data: Any) -> Any:
        if isinstance(data, dict):
            registry.import_plugins(list(data.get("plugins") or []))
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
        known = registry.list_methods()
        for spec in specs:
            if spec.name not in known:
                raise ValueError(f"unknown method {spec.name!r} (registered: {', '.join(known)})")
            info = registry.method_info(spec.name)
            try:
                info.cls.parse_params(dict(spec.params))
            except (TypeError, ValueError) as exc:
                raise ValueError(str(exc)) from None
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
        from dstbench.data.catalog import CATALOG, dataset_classes

        data = self.data
        if data.name == "synthetic":
            if self.mode != "speed":
                raise ValueError(f"data.name: synthetic data has no test split; mode {self.mode!r} needs a real dataset")
            return self
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
        has_dense = any(registry.method_info(m.name).kind == "dense" for m in self.methods)
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
        return self

    def setup_hash(self) -> str:
        """Hash of what a case's measurement depends on besides its method and density.

        Two runs whose cases share this hash (and method, params, density) can be compared.
        """
        measured = self.model_dump(
            mode="json", include={"device", "seed", "model", "data", "batch_size", "optimizer", "precision", "fuse_norms", "mode", "timing", "accuracy"}
        )
        # Segment order is not a setting of the measurement (interleaved and sequential runs
        # compare); a thread count is, but only an explicit one enters, so suites that leave it at
        # its default keep the hash they had.
        measured["timing"].pop("interleave", None)
        if self.threads is not None:
            measured["threads"] = self.threads
        return hashlib.sha256(json.dumps(measured, sort_keys=True).encode()).hexdigest()[:16]


class SuiteError(Exception):
    """A suite that cannot run. `problems` are (key, message) pairs."""

    def __init__(self, path: str, problems: list[tuple[str, str]]) -> None:
        self.path = path
        self.problems = problems
        lines = [f"{path}: {key}: {message}" if key else f"{path}: {message}" for key, message in problems]
        super().__init__("\n".join(lines))


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class inside an annotation such as `Optional[X]`, `list[X]` or `bool | X`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (Union, types.UnionType, list, tuple, dict):
        for arg in typing.get_args(annotation):
            found = _unwrap_model(arg)
            if found is not None:
                return found
    return None


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    current: type[BaseModel] | None = SuiteConfig
    for part in loc:
        if current is None:
            return []
        if isinstance(part, str):  # list indices keep the element's model
            field = current.model_fields.get(part)
            current = _unwrap_model(field.annotation) if field else None
    return list(current.model_fields) if current is not None else []


def _format(error: dict[str, Any]) -> tuple[str, str]:
    loc = tuple(error["loc"])
    key = ".".join(str(p) for p in loc)
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        return key, f"unknown key (allowed: {', '.join(allowed)})"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "literal_error" and "expected" in error.get("ctx", {}):
        message = f"got {error.get('input')!r}; allowed: {error['ctx']['expected']}"
    return key, message


def parse_suite(data: Any, path: str = "<suite>", *, check_files: bool = True) -> SuiteConfig:
    """Validate a suite. `check_files=False` skips what reads the filesystem (dataset folders,
    `model.checkpoint`): a run folder's record of its suite stays readable where the data is not."""
    if not isinstance(data, dict):
        raise SuiteError(path, [("", "a suite must be a YAML mapping")])
    try:
        return SuiteConfig.model_validate(data, context={"check_files": check_files})
    except ValidationError as exc:
        problems = list(dict.fromkeys(_format(e) for e in exc.errors()))
        raise SuiteError(path, problems) from None
    except ImportError as exc:
        raise SuiteError(path, [("plugins", f"cannot import: {exc}")]) from None


def load_suite(path: str | Path, overrides: dict[str, Any] | None = None, *, check_files: bool | None = None) -> SuiteConfig:
    """Read and validate a suite file; `overrides` replace top-level keys (e.g. `--device`).

    `check_files` defaults to True except for the `suite.yaml` a run folder keeps (a `run.json`
    beside it): checking or reporting a finished run must not need its dataset at hand.
    """
    from dstbench.rundir import is_stored_suite

    path = Path(path)
    if check_files is None:
        check_files = not is_stored_suite(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SuiteError(str(path), [("", f"cannot read: {exc.strerror}")]) from None
    except yaml.YAMLError as exc:
        raise SuiteError(str(path), [("", f"not valid YAML: {exc}")]) from None
    if overrides and isinstance(data, dict):
        data = {**data, **overrides}
    return parse_suite(data, str(path), check_files=check_files)
