"""A suite's schema: `SuiteConfig` and its sections, validated by pydantic (files are read by
`dstbench.suite.loading`).

Everything is checked before any case runs: unknown keys, unknown methods or method parameters
(types and ranges, in each method's `Params`), models that timm cannot build as a ViT, densities
outside (0, 1], non-positive counts, labels whose cases would share a file name, expectations that
name nothing the suite runs. The sections themselves (`model`, `data`, `timing`, ...) are in
`dstbench.suite.schema_sections`; here is the suite and its cross-checks between sections.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Literal

from pydantic import Field, PositiveInt, StrictInt
from pydantic import PrivateAttr, ValidationError, ValidationInfo, field_validator, model_serializer, model_validator

import dstbench.methods as catalog
from dstbench.execution.launchers.config import LauncherConfig, default_config
from dstbench.suite.cases import case_id, point_tag
from dstbench.suite.sweep import MODES as SWEEP_MODES, point_data, sweep_problems, sweep_values, tag_problems
from dstbench.suite.schema_sections import (
    NAME_LIMIT, AccuracyConfig, CompileConfig, DataConfig, Expectation, MethodSpec, ModelConfig, OptimizerConfig,
    ProfileConfig, Strict, TargetsBelowDense, TimingConfig, _check_files, expectation_problem,
)
from dstbench.util.files import slug

def _recorded_kinds(context: Any) -> dict[str, str] | None:
    """A run folder's record of its suite (`parse_suite(..., recorded_kinds=...)`): each method
    label's kind as the run recorded it; None for a suite about to run."""
    kinds = (context or {}).get("recorded_kinds") if isinstance(context, dict) else None
    return dict(kinds) if kinds is not None else None




class SuiteConfig(Strict):
    """A suite file: methods x densities on one model and dataset, how they are timed or trained, and the gates."""

    name: str = Field(min_length=1, max_length=NAME_LIMIT, description="the suite's name; run folders are named after it")
    description: str = Field("", description="one line for people")
    device: Literal["auto", "cuda", "cpu", "mps"] = Field("auto", description="where the cases run; auto: cuda, else mps, else cpu")
    seed: int = Field(0, ge=0, le=2**63 - 1, description=(  # what torch.manual_seed and numpy accept
        "the same initial weights, masks and data for every case"))
    # Strict: `true` or "1" would run as seed 1 while the hash records the default seed 0.
    seeds: list[StrictInt] | None = Field(None, min_length=1, description=(
        "run every case once per seed, each seed's initial weights, masks and data order its own; the first is the "
        "suite's `seed` (in the suite hash), the list is not, so seeds may be added to a run folder. Not with `seed`"))
    plugins: list[str] = Field([], description=(
        "modules imported first, so their methods register (found on the path or beside the suite file)"))
    # Factories, not instances: building the default model (torch, timm) waits for a suite that
    # needs it, so importing this module stays light (reports read expectations through it).
    model: ModelConfig = Field(default_factory=ModelConfig, description="the ViT (`model`, below)")
    data: DataConfig = Field(default_factory=DataConfig, description="the dataset (`data`, below)")
    batch_size: PositiveInt = Field(64, description="images per training step (per rank under torchrun)")
    optimizer: OptimizerConfig = Field(OptimizerConfig(), description="the optimizer (`optimizer`, below)")
    precision: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="training precision: fp32, or autocast to bf16 or fp16 (fp16 with a loss scaler)")
    fuse_norms: bool = Field(False, description=(
        "norm1+qkv and norm2+fc1 of every ViT block as one op that keeps only the norm's input for backward "
        "(dstbench.models.fused_norms); applied to every method alike"))
    mode: Literal["speed", "accuracy", "both"] = Field("speed", description=(
        "speed: timed segments; accuracy: train and evaluate on a real dataset; both: the segments, then the training, in one line"))
    threads: PositiveInt | None = Field(None, description=(
        "intra-op threads of every case process (torch.set_num_threads); default: the cores in the process's affinity "
        "mask (`taskset` narrows it). In the suite hash only when set"))
    timing: TimingConfig = Field(TimingConfig(), description="how speed is sampled (`timing`, below)")
    accuracy: AccuracyConfig = Field(AccuracyConfig(), description="training for accuracy (`accuracy`, below)")
    methods: list[MethodSpec] = Field(min_length=1, description="the methods: bare names or mappings (`methods[]`, below)")
    densities: list[float] = Field(min_length=1, description=(
        "target densities in (0, 1]; a case is one (method, density), and dense runs once, at 1.0"))
    reference: str = Field("dense", description=(
        "the method label speedups and memory reductions are relative to, at the same density; default: dense when "
        "the suite runs it, else the first method"))
    launcher: LauncherConfig = Field(default_factory=default_config, description=(  # type: ignore[valid-type]
        "how cases are started: subprocess (the default), inprocess, torchrun or submitit, each with its own keys (below)"))
    profile: ProfileConfig = Field(ProfileConfig(enabled=False), description="profile every case: true, or settings (`profile`, below)")
    expect: list[Expectation] = Field([], description="gates checked at the end of the run and by `dstbench check` (`expect[]`, below)")
    compile: CompileConfig = Field(CompileConfig(enabled=False), description=(
        "train every method under torch.compile: false (default), true, or settings (`compile`, below)"))
    sweep: dict[str, list[Any]] = Field({}, description=(
        "run the suite at several points, all in one run folder: dotted suite keys (model.embed_dim, batch_size, "
        "precision, compile, ...) mapped to lists of values; each point is validated as a suite of its own"))
    sweep_mode: Literal[SWEEP_MODES] = Field("product", description=(  # type: ignore[valid-type]
        "product: every combination of the sweep's lists; zip: their i-th values together (lists of equal length)"))

    # The sweep's points, each validated as a suite of its own (`points`); empty without a sweep.
    _points: list[tuple[dict[str, Any], "SuiteConfig"]] = PrivateAttr(default_factory=list)

    # A run's record read where its plugins are not installed: the kinds its cases ran as, by label
    # (see `method_kind`). None for a suite about to run, whose methods must all be registered.
    _recorded_kinds: dict[str, str] | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        # Runs before the `after` validators below, which ask `method_kind`.
        self._recorded_kinds = _recorded_kinds(context)

    def method_kind(self, spec: MethodSpec) -> str:
        """The kind of `spec`'s method: the registry's, or in a run's record whose plugin is not
        installed here, the kind the run recorded for its label ("masked", a sparse method, when
        the run recorded none)."""
        try:
            return catalog.method_info(spec.name).kind
        except KeyError:
            if self._recorded_kinds is None:
                raise
            return self._recorded_kinds.get(spec.key, "masked")

    @model_validator(mode="before")
    @classmethod
    def _import_plugins_and_default_reference(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict):
            plugins = data.get("plugins") or []
            if isinstance(plugins, list) and all(isinstance(p, str) for p in plugins):
                # Beside the suite file too (`plugin_dirs`, see `dstbench.methods.import_plugins`).
                # A run's record is trusted for what it ran: a plugin missing here is no error.
                try:
                    catalog.import_plugins(plugins, (info.context or {}).get("plugin_dirs") or ())
                except catalog.PluginImportError:
                    if _recorded_kinds(info.context) is None:
                        raise
            methods = data.get("methods")
            if "reference" not in data and isinstance(methods, list) and methods:
                keys = [m if isinstance(m, str) else (m.get("label") or m.get("name")) for m in methods if isinstance(m, (str, dict))]
                if keys and "dense" not in keys:
                    data = {**data, "reference": keys[0]}
        return data

    @model_validator(mode="before")
    @classmethod
    def _first_seed_is_the_seed(cls, data: Any) -> Any:
        """With `seeds:` the suite's `seed` is the first of them: what a one-seed run of the suite
        ran with, so its hash (which holds `seed`) stays the same when seeds are added."""
        if not isinstance(data, dict) or data.get("seeds") is None:
            return data
        if "seed" in data:
            raise ValueError("seed and seeds: give one; with `seeds:` the first seed plays `seed`'s part")
        seeds = data["seeds"]
        if isinstance(seeds, list) and seeds and isinstance(seeds[0], int) and not isinstance(seeds[0], bool):
            data = {**data, "seed": seeds[0]}
        return data

    @field_validator("seeds")
    @classmethod
    def _seeds_distinct(cls, seeds: list[int] | None) -> list[int] | None:
        if seeds is None:
            return seeds
        for seed in seeds:
            if not 0 <= seed <= 2**63 - 1:
                raise ValueError(f"seed {seed} is outside [0, 2**63 - 1]")
        if len(set(seeds)) != len(seeds):
            raise ValueError("a seed is listed twice")
        return seeds

    @model_validator(mode="after")
    def _later_seeds_measure_something(self) -> "SuiteConfig":
        if self.seeds and len(self.seeds) > 1 and self.mode == "speed" and not self.timing.per_seed:
            raise ValueError(
                "seeds: in mode speed only the first seed is timed unless timing.per_seed: true, so the other seeds "
                "would measure nothing; set timing.per_seed: true, or mode accuracy or both")
        return self

    @model_serializer(mode="wrap")
    def _dump_seed_or_seeds(self, handler: Any) -> Any:
        # A suite with `seeds:` is written with them alone: read back, `seed` beside them is an error.
        data = handler(self)
        if self.seeds is not None and isinstance(data, dict):
            data.pop("seed", None)
        return data

    @property
    def run_seeds(self) -> list[int]:
        """The seeds every case runs with: `seeds`, or the suite's one `seed`."""
        return list(self.seeds) if self.seeds is not None else [self.seed]

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

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_flag(cls, compile: Any) -> Any:
        return {"enabled": compile} if isinstance(compile, bool) else compile

    @field_validator("sweep", mode="before")
    @classmethod
    def _sweep_shape(cls, sweep: Any) -> Any:
        # `sweep_mode` comes after: zipped lengths are checked with the points.
        if isinstance(sweep, dict):
            problems = sweep_problems(sweep, "product")
            if problems:
                raise ValueError("; ".join(problems))
        return sweep

    @model_validator(mode="after")
    def _compile_warms_up(self) -> "SuiteConfig":
        if self.compile.enabled and self.mode in ("speed", "both") and self.timing.warmup_steps < 2:
            raise ValueError(
                "timing.warmup_steps: compile needs at least 2 (the first counts FLOPs eagerly, the second absorbs the "
                "compilation, which must not fall in a timed segment)")
        return self

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, specs: list[MethodSpec], validation: ValidationInfo) -> list[MethodSpec]:
        known = catalog.list_methods()
        recorded = _recorded_kinds(validation.context) is not None
        for spec in specs:
            if recorded:
                continue  # a run's record: its methods ran with these params, installed here or not
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
        if data.teacher is not None:
            classes = data.teacher.classes
            from dstbench.models.timm_models import create_model, input_shape

            _, height, width = input_shape(create_model(self.model.name, device="meta", **kwargs), self.model.input_size)
            if height % data.teacher.patch or width % data.teacher.patch:
                raise ValueError(f"data.teacher.patch: {data.teacher.patch} does not divide the model's {height}x{width} input")
        model_classes = kwargs.get("num_classes", 1000)  # timm's ViT default
        if classes is not None and model_classes != classes:
            raise ValueError(f"model.num_classes: is {model_classes}, but {data.name} has {classes} classes")
        channels = kwargs.get("in_chans", 3)
        # Teacher inputs are drawn at the model's own shape: any channel count.
        if data.name != "teacher" and (channels not in (1, 3) or (channels == 1 and dataset.channels != 1)):
            allowed = "1 (as stored) or 3 (repeated)" if dataset.channels == 1 else "3"
            raise ValueError(f"model.in_chans: is {channels}; {data.name} images feed in_chans {allowed}")
        if (data.augment.mixup > 0 or data.augment.cutmix > 0) and self.batch_size % 2:
            raise ValueError(f"batch_size: mixup and cutmix pair images within a batch; {self.batch_size} is odd")
        return self

    def method_densities(self, spec: MethodSpec) -> list[float]:
        """The densities `spec` runs at: its own `densities` or else the suite's (dense: 1.0 only)."""
        if self.method_kind(spec) == "dense":
            return [1.0]
        return list(spec.densities) if spec.densities is not None else list(self.densities)

    @model_validator(mode="after")
    def _method_densities_in_suite(self) -> "SuiteConfig":
        for index, spec in enumerate(self.methods):
            if spec.densities is None:
                continue
            where = f"methods.{index}.densities"
            if self.method_kind(spec) == "dense":
                raise ValueError(f"{where}: {spec.name} is dense and runs at 1.0 only; remove the key")
            if len(set(spec.densities)) != len(spec.densities):
                raise ValueError(f"{where}: densities listed twice")
            strays = [d for d in spec.densities if not any(math.isclose(d, s) for s in self.densities)]
            if strays:
                listed = ", ".join(f"{d:g}" for d in self.densities)
                raise ValueError(f"{where}: {', '.join(f'{d:g}' for d in strays)} not among the suite's densities ({listed})")
        return self

    @model_validator(mode="after")
    def _methods_fit_model(self) -> "SuiteConfig":
        """Every method can train the suite's model here, its `execution` included
        (`dstbench.suite.model_fit`), so a run never starts cases that cannot run."""
        from dstbench.suite.model_fit import methods_problem

        problem = methods_problem(self) if self._recorded_kinds is None else None
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _target_sweep_has_dense(self) -> "SuiteConfig":
        """Targets below dense's top-1 need dense in the run to be below."""
        if isinstance(self.accuracy.target_sweep, TargetsBelowDense) and not any(self.method_kind(m) == "dense" for m in self.methods):
            raise ValueError("accuracy.target_sweep: below_dense needs dense in the run, which the suite does not run; "
                             "add dense, or list the targets as top-1 fractions")
        return self

    @model_validator(mode="after")
    def _launcher_fits_suite(self) -> "SuiteConfig":
        """What the chosen launcher cannot do with this suite (its config's `suite_problem`: e.g. the
        subprocess launcher's `parallel` on one CPU with interleaved groups)."""
        problem = self.launcher.suite_problem(self)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _case_files_distinct(self) -> "SuiteConfig":
        """Case ids name files (profiler traces, rank folders) through `slug`: two labels that
        slug alike (`r/1`, `r-1`; `R`, `r` on a case-insensitive disk) would overwrite each other."""
        seen: dict[str, str] = {}
        for spec in self.methods:
            dense = self.method_kind(spec) == "dense"
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
        instead of as a failed gate after it (`expectation_problem`)."""
        problem = expectation_problem(self)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _sweep_points_valid(self, info: ValidationInfo) -> "SuiteConfig":
        """Every point of the sweep, validated as a suite of its own (with this suite's validation
        context) and kept for `points`; last, so the suite itself is known to be sound first.
        Points must measure distinct setups: their suite hash is what tells their cases apart."""
        if not self.sweep:
            return self
        if self.sweep_mode == "zip":
            shape = sweep_problems(dict(self.sweep), "zip")
            if shape:
                raise ValueError("sweep: " + "; ".join(shape))
        values = sweep_values(dict(self.sweep), self.sweep_mode)
        problems = tag_problems(values)
        base = self.model_dump(mode="json")
        points: list[tuple[dict[str, Any], SuiteConfig]] = []
        hashes: dict[str, str] = {}
        for point in values:
            tag = point_tag(point)
            try:
                suite = SuiteConfig.model_validate(point_data(base, point), context=info.context)
            except ValidationError as exc:
                errors = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'suite'}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
                problems.append(f"point {tag}: {errors}")
                continue
            digest = suite.setup_hash()
            if digest in hashes:
                problems.append(f"points {hashes[digest]} and {tag} measure the same setup (the keys they differ in are not in the suite hash)")
            hashes[digest] = tag
            points.append((point, suite))
        if problems:
            raise ValueError("sweep: " + " | ".join(problems))
        self._points = points
        return self

    @property
    def points(self) -> list[tuple[dict[str, Any], "SuiteConfig"]]:
        """The sweep's points in order: each point's values (dotted key -> value) and its suite, as
        validated; empty without a sweep."""
        return list(self._points)

    def setup_settings(self) -> dict[str, Any]:
        """What a case's measurement depends on besides its method and density (`setup_hash`'s
        input; run.json keeps it, so a changed suite can be told key by key)."""
        measured = self.model_dump(
            mode="json", include={"device", "seed", "model", "data", "batch_size", "optimizer", "precision", "fuse_norms", "mode", "timing", "accuracy"}
        )
        # How samples are drawn (interleaving, process sets, round order, settle rounds, hand-over) is not a
        # setting of the measurement (such runs compare); a thread count is, but only an explicit one enters, so suites that leave it at
        # its default keep the hash they had.
        for key in ("interleave", "processes", "round_order", "settle_segments", "hand_over"):  # how samples are drawn
            measured["timing"].pop(key, None)
        # Which seeds run is not a setting of a case's measurement (each line names its seed); the
        # first seed is (`seed`), so a one-seed run and the same suite with seeds added share it.
        measured["seed"] = self.seed
        measured["timing"].pop("per_seed", None)
        measured["accuracy"].pop("target_top1", None)  # read from the curves after training
        measured["accuracy"].pop("target_sweep", None)
        if measured["data"].get("teacher") is None:  # only teacher suites have the key
            measured["data"].pop("teacher", None)
        for key in ("input_size", "prunable"):  # dstbench's model keys: in the hash only when set
            if measured["model"].get(key) is None:
                measured["model"].pop(key, None)
        if self.threads is not None:
            measured["threads"] = self.threads
        # Only when set, so suites without them keep the hash they had.
        if self.compile.enabled:
            measured["compile"] = self.compile.options()
        if self.sweep:
            measured["sweep"], measured["sweep_mode"] = dict(self.sweep), self.sweep_mode
        return measured

    def setup_hash(self) -> str:
        """Hash of what a case's measurement depends on besides its method and density.

        Two runs whose cases share this hash (and method, params, density) can be compared.
        """
        measured = self.setup_settings()
        return hashlib.sha256(json.dumps(measured, sort_keys=True).encode()).hexdigest()[:16]
