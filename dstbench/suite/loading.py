"""Suite files: YAML -> a validated `SuiteConfig` (`dstbench.suite.schema`), or a `SuiteError` naming
the file, the key and what is allowed. Also the command line's `--set KEY=VALUE` overrides.

Hostile files are refused with a one-line `SuiteError`: invalid UTF-8, YAML aliases that expand too
far (an alias bomb, see `dstbench.util.safe_yaml`), nesting too deep, a plugin that raises at import.
"""

from __future__ import annotations

import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Union

import yaml
from pydantic import BaseModel, ValidationError

from dstbench.suite.schema import SuiteConfig
from dstbench.util.text import clip, short_repr
from dstbench.util.files import RUN_FILE, SUITE_FILE
from dstbench.util.safe_yaml import decode_utf8, load_bounded


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
    message = clip(error["msg"].removeprefix("Value error, "))
    if error["type"] == "literal_error" and "expected" in error.get("ctx", {}):
        # A bounded repr: the input may be anything a hostile file holds.
        message = f"got {short_repr(error.get('input'))}; allowed: {clip(error['ctx']['expected'])}"
    return clip(key, 200), message


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
        raise SuiteError(path, [("plugins", clip(f"cannot import: {exc}"))]) from None


def read_yaml(path: str | Path) -> Any:
    """A YAML file's data, read through `safeyaml.load_bounded`; `SuiteError` (one line, naming the
    file) when it cannot be read, is not UTF-8, is not YAML, or is hostile."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SuiteError(str(path), [("", f"cannot read: {exc.strerror}")]) from None
    try:
        return load_bounded(decode_utf8(raw))
    except UnicodeError as exc:
        raise SuiteError(str(path), [("", str(exc))]) from None
    except yaml.YAMLError as exc:
        raise SuiteError(str(path), [("", clip(f"not valid YAML: {exc}"))]) from None


def parse_assignment(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` from the command line (`run --set`): a dotted key and a YAML value, so
    `timing.segments=10` sets an int, `model.checkpoint=null` None and `densities=[0.1, 0.5]` a list."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ValueError(f"{text!r}: expected KEY=VALUE with a dotted key, e.g. timing.segments=10")
    try:
        return key, yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ValueError(f"{text!r}: the value is not valid YAML ({exc})") from None


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any], path: str = "<suite>") -> dict[str, Any]:
    """A copy of a suite mapping with each dotted key of `overrides` set (`model.depth`,
    `methods.1.params.delta_t`: a number indexes a list). Missing mappings on the way are created;
    a key through a value that is not a mapping or a list is a `SuiteError`. The result is then
    validated like any suite, so an unknown key or a bad value is reported as in a file."""
    import copy

    data = copy.deepcopy(data)
    problems = []
    for key, value in overrides.items():
        parts = key.split(".")
        node: Any = data
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                if not re.fullmatch(r"-?[0-9]+", part) or not -len(node) <= int(part) < len(node):
                    problems.append((f"--set {key}", f"{where}: no item {part} in a list of {len(node)}"))
                    break
                if last:
                    node[int(part)] = value
                else:
                    if isinstance(node[int(part)], str):
                        node[int(part)] = {"name": node[int(part)]}  # a bare method name, given keys
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    if node.get(part) is None:
                        node[part] = {}
                    node = node[part]
            else:
                problems.append((f"--set {key}", f"{'.'.join(parts[:depth])} is {short_repr(node)}, not a mapping"))
                break
    if problems:
        raise SuiteError(path, problems)
    return data


def is_stored_suite(path: str | Path) -> bool:
    """Whether `path` is the `suite.yaml` a run folder keeps (a `run.json` beside it), as opposed to
    a suite file someone wrote."""
    path = Path(path)
    return path.name == SUITE_FILE and (path.parent / RUN_FILE).exists()


def load_suite(path: str | Path, overrides: dict[str, Any] | None = None, *, check_files: bool | None = None) -> SuiteConfig:
    """Read and validate a suite file; `overrides` set keys before validation, each a dotted key
    (`device`, `timing.segments`: see `apply_overrides`).

    `check_files` defaults to True except for the `suite.yaml` a run folder keeps (a `run.json`
    beside it): checking or reporting a finished run must not need its dataset at hand.
    """
    path = Path(path)
    if check_files is None:
        check_files = not is_stored_suite(path)
    data = read_yaml(path)
    if overrides and isinstance(data, dict):
        data = apply_overrides(data, overrides, str(path))
    try:
        return parse_suite(data, str(path), check_files=check_files)
    except SuiteError as exc:
        if not overrides:
            raise
        # Say which problems come from the command line rather than the file.
        problems = [
            (key, f"{message} (from --set {key}={json.dumps(overrides[key])})" if key in overrides else message)
            for key, message in exc.problems
        ]
        raise SuiteError(exc.path, problems) from None
