"""`launcher:` in a suite: one config model per launcher (`<name>/config.py`), told apart by `name`
(default `subprocess`). `LauncherConfig` is the discriminated union the suite schema's field has.

A key that only another launcher reads would be silently ignored by the chosen one, so it is
refused (the torchrun launcher's rendezvous keys excepted: the one flat model these replace took
them under every launcher, so they are type-checked and dropped); except at that launcher's
default, where it is accepted and dropped: a run folder's
`suite.yaml` written before the models were split lists every launcher's keys at their defaults,
and must still load (and compare equal on `--resume`, both sides going through these models).

Errors read as on one model: `launcher.timeout_s`, not pydantic's `launcher.subprocess.timeout_s`;
an unknown `name` lists the launchers, an unknown key the chosen launcher's keys.

A leaf module of the schema's layer: it imports pydantic and the config modules beside it only.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import InitErrorDetails

from dstbench.execution.launchers.inprocess.config import InProcessConfig
from dstbench.execution.launchers.submitit.config import SubmititConfig
from dstbench.execution.launchers.subprocess.config import SubprocessConfig
from dstbench.execution.launchers.torchrun.config import TorchrunConfig

AnyLauncherConfig = Union[SubprocessConfig, InProcessConfig, TorchrunConfig, SubmititConfig]
CONFIGS: tuple[type[BaseModel], ...] = (SubprocessConfig, InProcessConfig, TorchrunConfig, SubmititConfig)
CONFIG_BY_NAME: dict[str, type[BaseModel]] = {c.model_fields["name"].default: c for c in CONFIGS}
DEFAULT_NAME = "subprocess"
KEY_ORDER = list(dict.fromkeys(key for c in CONFIGS for key in c.model_fields))
# The torchrun launcher's rendezvous keys, which other launchers have always taken and ignored.
UNCHECKED_TORCHRUN_KEYS = ("nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port")
# As pydantic words a Literal's choices, so an unknown name reads as it did on one model.
NAMES_TEXT = ", ".join(repr(n) for n in list(CONFIG_BY_NAME)[:-1]) + f" or {list(CONFIG_BY_NAME)[-1]!r}"


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
            owners = tuple(c for c in CONFIGS if key in c.model_fields)
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
    if not isinstance(name, str) or name not in CONFIG_BY_NAME:
        details = [InitErrorDetails(type="literal_error", loc=("name",), input=name, ctx={"expected": NAMES_TEXT})]
        raise ValidationError.from_exception_data("LauncherConfig", details)
    chosen = CONFIG_BY_NAME[name]
    kept: dict[str, Any] = {"name": name}
    strays = []
    for key, value in data.items():
        owners = [c for c in CONFIGS if key in c.model_fields]
        if key in chosen.model_fields or not owners:
            kept[key] = value  # the chosen launcher's, or nobody's (refused below as an unknown key)
        elif key in UNCHECKED_TORCHRUN_KEYS and not (name == "submitit" and key == "nnodes"):
            # One flat model used to take these under every launcher, checking their type only:
            # a suite that ran before still runs (dropped; still type-checked).
            try:
                TorchrunConfig.model_validate({key: value})
            except ValidationError as exc:
                raise _as_on_one_model(exc, TorchrunConfig) from None
        elif not _at_default(owners[0], key, value):
            strays.append(key)
    if strays:
        strays.sort(key=KEY_ORDER.index)  # as the keys were listed on one model, not as given
        raise ValidationError.from_exception_data("LauncherConfig", [_error((), m, data) for m in _refusals(name, strays)])
    try:
        return handler(kept)
    except ValidationError as exc:
        raise _as_on_one_model(exc, chosen) from None


LauncherConfig = Annotated[AnyLauncherConfig, Field(discriminator="name"), WrapValidator(_fit_launcher)]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(LauncherConfig)


def parse_launcher_config(data: Any) -> AnyLauncherConfig:
    """A `launcher:` mapping as its launcher's config model; `ValidationError` as in a suite."""
    config: AnyLauncherConfig = _ADAPTER.validate_python(data)
    return config
