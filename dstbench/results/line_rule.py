"""The rule every reader applies to a result line before using it (`line_problem_of`, which
`dstbench.results.record.line_problem` applies with the line's declared fields): a line that breaks
it is left out of every figure, with a warning naming its file and line, and fails `dstbench check`
(`dstbench.results.record.read_results`)."""

from __future__ import annotations

import math
import types
import typing
from typing import Any, Union

from dstbench.util.nesting import too_deep
from dstbench.util.text import short_repr

REQUIRED_FIELDS = ("case_id", "method", "kind", "density", "status")


def _matches(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a field's annotation, at the top level (JSON has no tuple, and
    NaN was written as null, so list items are not checked here: `segment_samples` filters)."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
    if hint in (str, bool):
        return isinstance(value, hint)
    if origin in (list, tuple) or hint in (list, tuple):
        return isinstance(value, list)
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    return True


def line_problem_of(data: Any, hints: dict[str, Any], schema_version: int) -> str | None:
    """Why a parsed result line cannot be used, or None: not an object, a required field missing, a
    field of the wrong type for its annotation in `hints`, a density outside (0, 1], a schema
    version this dstbench does not know (above `schema_version`), a time that is negative or not
    finite, an ok speed line without its segments, a top-1 outside [0, 1], a negative byte count."""
    if not isinstance(data, dict):
        return "not a JSON object"
    deep = too_deep(data)
    if deep:
        return deep
    missing = [key for key in REQUIRED_FIELDS if key not in data]
    if missing:
        return f"missing {', '.join(missing)}"
    for key, value in data.items():
        hint = hints.get(key)
        if hint is not None and not _matches(value, hint):
            return f"{key} is {short_repr(value, 40)}"
    if not 0.0 < data["density"] <= 1.0:
        return f"density {data['density']} outside (0, 1]"
    version = data.get("schema_version", 0)
    if isinstance(version, bool) or version not in range(schema_version + 1):
        return f"schema_version {short_repr(version, 20)}: this dstbench reads 0 to {schema_version}"
    for key, value in data.items():
        if key.endswith(TIME_SUFFIXES):
            bad = _bad_time(value)
            if bad is not None:
                return f"{key} {'holds' if isinstance(value, list) else 'is'} {bad}"
    if data["status"] == "ok" and data.get("mode") in ("speed", "both") and not isinstance(data.get("segment_ms"), list):
        return "an ok speed line without segment_ms"
    for key, value in data.items():
        bad = _bad_value(key, value)
        if bad is not None:
            return bad
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bad_value(key: str, value: Any) -> str | None:
    """A value no measurement can have: a top-1 or top-5 outside [0, 1] (a hand-edited 7.5 would
    read 750%), a byte count that is negative or not finite."""
    if key in ("top1", "top5") and _number(value) and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        return f"{key} {short_repr(value, 20)} outside [0, 1]"
    if key.endswith("_bytes") and _number(value) and not (math.isfinite(value) and value >= 0):
        return f"{key} {short_repr(value, 20)} is not a byte count"
    return None


# Fields of times and rates (`_ms`, `_s`): never negative, never infinite or NaN (the writer writes a
# missing figure as null).
TIME_SUFFIXES = ("_ms", "_s")


def _bad_time(value: Any) -> str | None:
    """The first number of a time field (or list of them) that is negative or not finite, as text."""
    for x in value if isinstance(value, list) else [value]:
        if isinstance(x, (int, float)) and not isinstance(x, bool) and (not math.isfinite(x) or x < 0):
            return short_repr(x, 20)
    return None

