"""`launcher:` in a suite: one config model per launcher (`<name>/config.py`), a subclass of
`LauncherConfigBase` registered with `@register_config`, told apart by `name` (default
`subprocess`). Every launcher folder's `config` module is found and imported here, so the
discriminated union the suite schema's field has (`LauncherConfig`), `CONFIGS` and the names an
error lists come from the registered classes; adding a launcher is its folder.

A key that only another launcher reads would be silently ignored by the chosen one, so it is
refused (the torchrun launcher's rendezvous keys excepted: the one flat model these replace took
them under every launcher, so they are type-checked and dropped); except at that launcher's
default, where it is accepted and dropped: a run folder's
`suite.yaml` written before the models were split lists every launcher's keys at their defaults,
and must still load (and compare equal on `--resume`, both sides going through these models).

Errors read as on one model: `launcher.timeout_s`, not pydantic's `launcher.subprocess.timeout_s`;
an unknown `name` lists the launchers, an unknown key the chosen launcher's keys.

A leaf module of the schema's layer: it imports pydantic and the config modules beside it only.
The registry is complete once this module has run to its end; the union is built on first use
(`__getattr__`), so a launcher's config module imported first (it imports this one for its base)
still joins it.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, TypeAdapter, ValidationError, ValidatorFunctionWrapHandler
from pydantic import WrapValidator
from pydantic_core import InitErrorDetails

DEFAULT_NAME = "subprocess"


class LauncherConfigBase(BaseModel):
    """What every launcher's config has: its `name` (a subclass narrows it to its own literal), a
    case's time limit, strict keys (no unknown key, no inf or nan seconds), and what the rest of
    dstbench asks of it."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    summary: ClassVar[str] = ""  # what the launcher does, in a few words (errors and the suite reference)
    order: ClassVar[int] = 100  # where it is listed: the default first

    name: str = Field(description="the launcher")
    timeout_s: PositiveFloat = Field(3600.0, description="seconds a case may take")

    @property
    def launcher_name(self) -> str:
        """The registered launcher that runs this config (`dstbench.execution.launchers.base`)."""
        return self.name

    @property
    def distributed(self) -> bool:
        """Whether a case's ranks train under torchrun, the model in DistributedDataParallel."""
        return False

    def describe(self) -> list[str]:
        """What `dstbench run` says of the launcher's settings, e.g. ["timeout 3600 s"]."""
        return [f"timeout {self.timeout_s:g} s"]

    def suite_problem(self, suite: Any) -> str | None:
        """Why this launcher cannot run `suite` (a `SuiteConfig`), or None: checked at validation."""
        return None


C = TypeVar("C", bound=type[LauncherConfigBase])
_CONFIGS: dict[str, type[LauncherConfigBase]] = {}


def register_config(cls: C) -> C:
    """Class decorator: `cls` joins the union of launcher configs under its `name`'s default."""
    name = cls.model_fields["name"].default
    if not isinstance(name, str):
        raise ValueError(f"{cls.__name__}: a launcher config's name needs its literal as the default")
    _CONFIGS[name] = cls
    return cls


def _import_config_modules() -> None:
    """Import `<folder>.config` of every launcher folder beside this module (each registers)."""
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.ispkg:
            try:
                importlib.import_module(f"{__package__}.{module.name}.config")
            except ModuleNotFoundError as exc:
                if exc.name != f"{__package__}.{module.name}.config":
                    raise


def configs() -> tuple[type[LauncherConfigBase], ...]:
    """Every registered launcher config, the default first, then by `order` and name."""
    return tuple(sorted(_CONFIGS.values(), key=lambda c: (c.model_fields["name"].default != DEFAULT_NAME, c.order,
                                                          c.model_fields["name"].default)))


def _config_by_name() -> dict[str, type[LauncherConfigBase]]:
    return {c.model_fields["name"].default: c for c in configs()}


def _key_order() -> list[str]:
    return list(dict.fromkeys(key for c in configs() for key in c.model_fields))


def default_config() -> LauncherConfigBase:
    """The launcher a suite gets without `launcher:`."""
    return _CONFIGS[DEFAULT_NAME]()


def _names_text() -> str:
    """The launchers' names as pydantic words a Literal's choices."""
    names = list(_config_by_name())
    return ", ".join(repr(n) for n in names[:-1]) + f" or {names[-1]!r}"


# The torchrun launcher's rendezvous keys, which other launchers have always taken and ignored.
UNCHECKED_TORCHRUN_KEYS = ("nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port")


def _at_default(owner: type[BaseModel], key: str, value: Any) -> bool:
    """Whether `value` is `owner`'s default for `key` once validated (`1.0` is `1`)."""
    try:
        validated = owner.model_validate({key: value})
    except ValidationError:
        return False
    return bool(getattr(validated, key) == owner.model_fields[key].get_default(call_default_factory=True))


def _refusals(name: str, strays: list[str]) -> list[str]:
    """Why each key of another launcher, set away from its default, cannot be set for `name`:
    one message per kind of key."""
    messages: list[str] = []
    by_owners: dict[tuple[type[BaseModel], ...], list[str]] = {}
    for key in strays:
        # These two say more than "only for": why the launcher cannot do what the key asks.
        if key == "parallel":
            where = "submitit runs jobs at once by itself (array_parallelism)" if name == "submitit" else "it runs one case at a time"
            messages.append(f"parallel: cases at once on one host is the subprocess launcher's; {name} cannot ({where})")
        elif key == "nnodes" and name == "submitit":
            messages.append("nnodes: a submitit job runs its case on one node (torchrun with nproc_per_node ranks)")
        else:
            owners = tuple(c for c in configs() if key in c.model_fields)
            by_owners.setdefault(owners, []).append(key)
    for owners, keys in by_owners.items():
        only = " or ".join(f"{c.model_fields['name'].default} ({getattr(c, 'summary')})" for c in owners)  # each config's ClassVar
        messages.append(f"{', '.join(keys)}: only for name: {only}, not {name}")
    return messages


def _error(loc: tuple[Any, ...], message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(type="value_error", loc=loc, input=value, ctx={"error": ValueError(message)})


def _as_on_one_model(exc: ValidationError, chosen: type[BaseModel]) -> ValidationError:
    """`exc` with the union's tag taken out of each location and unknown keys worded as the suite
    loader words them elsewhere (`dstbench.suite.loading`), listing the chosen launcher's keys."""
    tag = chosen.model_fields["name"].default
    details = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        loc = loc[1:] if loc[:1] == (tag,) else loc
        if error["type"] == "extra_forbidden":
            details.append(_error(loc, f"unknown key (allowed: {', '.join(chosen.model_fields)})", error["input"]))
        else:
            details.append(InitErrorDetails(type=error["type"], loc=loc, input=error["input"], ctx=error.get("ctx", {})))
    return ValidationError.from_exception_data(exc.title, details)


def _fit_launcher(data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Validate `launcher:` as the config model its `name` picks (see the module docstring)."""
    if not isinstance(data, dict):
        return handler(data)  # a config model already, or pydantic's own type error
    name = data.get("name", DEFAULT_NAME)
    by_name = _config_by_name()
    if not isinstance(name, str) or name not in by_name:
        details = [InitErrorDetails(type="literal_error", loc=("name",), input=name, ctx={"expected": _names_text()})]
        raise ValidationError.from_exception_data("LauncherConfig", details)
    chosen = by_name[name]
    kept: dict[str, Any] = {"name": name}
    strays = []
    for key, value in data.items():
        owners = [c for c in configs() if key in c.model_fields]
        if key in chosen.model_fields or not owners:
            kept[key] = value  # the chosen launcher's, or nobody's (refused below as an unknown key)
        elif key in UNCHECKED_TORCHRUN_KEYS and not (name == "submitit" and key == "nnodes"):
            # One flat model used to take these under every launcher, checking their type only:
            # a suite that ran before still runs (dropped; still type-checked).
            torchrun = by_name["torchrun"]
            try:
                torchrun.model_validate({key: value})
            except ValidationError as exc:
                raise _as_on_one_model(exc, torchrun) from None
        elif not _at_default(owners[0], key, value):
            strays.append(key)
    if strays:
        strays.sort(key=_key_order().index)  # as the keys were listed on one model, not as given
        raise ValidationError.from_exception_data("LauncherConfig", [_error((), m, data) for m in _refusals(name, strays)])
    try:
        return handler(kept)
    except ValidationError as exc:
        raise _as_on_one_model(exc, chosen) from None


_BUILT: dict[str, Any] = {}


def _union() -> dict[str, Any]:
    """The union of the registered configs, its annotated form and its adapter, built on first use."""
    key = configs()
    if _BUILT.get("key") != key:
        any_config = Union[tuple(configs())]  # type: ignore[valid-type]
        annotated = Annotated[any_config, Field(discriminator="name"), WrapValidator(_fit_launcher)]  # type: ignore[valid-type]
        _BUILT.update(key=key, AnyLauncherConfig=any_config, LauncherConfig=annotated, adapter=TypeAdapter(annotated))
    return _BUILT


def parse_launcher_config(data: Any) -> LauncherConfigBase:
    """A `launcher:` mapping as its launcher's config model; `ValidationError` as in a suite."""
    config: LauncherConfigBase = _union()["adapter"].validate_python(data)
    return config


def __getattr__(name: str) -> Any:
    """`LauncherConfig` (the suite field's type), `AnyLauncherConfig` (the plain union) and `CONFIGS`
    (every registered config), made from the registry when first asked for."""
    if name in ("LauncherConfig", "AnyLauncherConfig"):
        return _union()[name]
    if name == "CONFIGS":
        return configs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_import_config_modules()
