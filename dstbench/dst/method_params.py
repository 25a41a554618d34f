"""A method's parameters from a suite's `params:`: each value checked against its `Params` field's
annotation before the method is built, so a suite is refused before anything runs."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Union

from dstbench.util.text import short_repr


def param_fits(value: Any, hint: Any) -> bool:
    """Whether a suite value fits a `Params` field's annotation: bools are not numbers, an `int`
    field takes an integral float (YAML's `1.0e3`), a `float` field any finite number."""
    if hint is Any:
        return True
    if typing.get_origin(hint) in (Union, types.UnionType):
        return any(param_fits(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if hint is int:
        return isinstance(value, int) or isinstance(value, float) and value.is_integer()
    if hint is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    origin = typing.get_origin(hint) or hint
    return isinstance(value, origin) if isinstance(origin, type) else True


def type_name(hint: Any) -> str:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return " or ".join(type_name(arg) for arg in typing.get_args(hint))
    names = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string", type(None): "null"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def param_names(params_cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(params_cls)]


def parse_params(method_name: str, params_cls: type, params: dict[str, Any]) -> Any:
    """`params_cls` built from a suite's `params`: unknown names and values of the wrong type (by
    the field's annotation) raise TypeError here, out-of-range values ValueError in the `Params`'
    own `__post_init__`."""
    names = param_names(params_cls)
    unknown = sorted(set(params) - set(names))
    if unknown:
        allowed = ", ".join(names) or "none"
        raise TypeError(f"method {method_name!r}: unknown parameter(s) {unknown} (allowed: {allowed})")
    try:
        hints = typing.get_type_hints(params_cls)
    except Exception:  # a plugin's annotation that does not resolve: its __post_init__ checks
        hints = {}
    params = dict(params)  # the caller's mapping is left as it was
    for name, value in list(params.items()):
        if name in hints and not param_fits(value, hints[name]):
            raise TypeError(f"method {method_name!r}: parameter {name} must be {type_name(hints[name])}, got {short_repr(value)}")
        if hints.get(name) is int and isinstance(value, float):
            params[name] = int(value)  # `delta_t: 1.0e2` (YAML reads a float) is the int it names
    return params_cls(**params)
