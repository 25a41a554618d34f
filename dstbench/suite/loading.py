"""Suite files: YAML -> a validated `SuiteConfig` (`dstbench.suite.schema`), or a `SuiteError` naming
the file, the key and what is allowed. Also the command line's `--set KEY=VALUE` overrides.

Hostile files are refused with a one-line `SuiteError`: invalid UTF-8, YAML aliases that expand too
far (an alias bomb, see `dstbench.util.safe_yaml`), nesting too deep, a plugin that raises at import.

Plugins (`plugins:`) are imported from `sys.path` first, then from the suite file's folder
(`dstbench.methods.import_plugins`). A run folder's `suite.yaml` is read as the record of what ran
(`recorded`): its plugins are looked for on `sys.path` only, never beside it (a run folder copied
from elsewhere must not run code it carries), and a method whose plugin is not installed here is
taken as the run recorded it, so `check`, `report`, `compare`, `publish` and `export` read any run
folder; only `run` needs the methods.
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
from dstbench.util.files import RESULTS_FILE, RUN_FILE, SUITE_FILE, read_regular_text
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


def suite_folders(path: str | Path) -> list[str]:
    """Where a suite file's `plugins:` are looked for after `sys.path`: the folder of the file
    (absolute, so a case process started elsewhere finds the same one); none for a path that names
    no file (a suite built in Python)."""
    path = Path(path)
    return [str(path.absolute().parent)] if path.is_file() else []


def parse_suite(
    data: Any, path: str = "<suite>", *, check_files: bool = True, recorded_kinds: dict[str, str] | None = None
) -> SuiteConfig:
    """Validate a suite. `check_files=False` skips what reads the filesystem (dataset folders,
    `model.checkpoint`): a run folder's record of its suite stays readable where the data is not.

    `recorded_kinds` ({method label: kind}, see `recorded_kinds`) marks `data` as a run folder's
    record: a plugin that cannot be imported here is skipped and a method it would have registered
    is taken with the kind the run recorded (`SuiteConfig.method_kind`). Otherwise `plugins:` are
    looked for in the folder of `path` too (`suite_folders`)."""
    if not isinstance(data, dict):
        raise SuiteError(path, [("", "a suite must be a YAML mapping")])
    context: dict[str, Any] = {"check_files": check_files}
    if recorded_kinds is None:
        context["plugin_dirs"] = suite_folders(path)
    else:
        context["recorded_kinds"] = dict(recorded_kinds)
    try:
        return SuiteConfig.model_validate(data, context=context)
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
        return key, load_bounded(value)  # an alias loop or a bomb in a --set value is refused too
    except yaml.YAMLError as exc:
        raise ValueError(f"{clip(repr(text), 120)}: the value is not valid YAML ({exc})") from None


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any], path: str = "<suite>") -> dict[str, Any]:
    """A copy of a suite mapping with each dotted key of `overrides` set (`model.depth`,
    `methods.1.params.delta_t`: a number indexes a list). Missing mappings on the way are created;
    a key through a value that is not a mapping or a list is a `SuiteError`. The result is then
    validated like any suite, so an unknown key or a bad value is reported as in a file. `seeds`
    replaces the file's `seed` (a suite may not name both)."""
    import copy

    data = copy.deepcopy(data)
    if "seeds" in overrides and "seed" not in overrides and isinstance(data, dict):
        # `--set seeds=[0,1,2]` takes the place of the file's `seed:` (the first seed plays its part).
        data.pop("seed", None)
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


def recorded_kinds(run_dir: str | Path) -> dict[str, str]:
    """Each method label's kind as a run folder recorded it: run.json's `cases` (every run since
    they were recorded), else its result lines. Unreadable parts count as no record."""
    run_dir = Path(run_dir)
    kinds: dict[str, str] = {}
    try:
        meta = json.loads(read_regular_text(run_dir / RUN_FILE))
        cases = meta.get("cases") if isinstance(meta, dict) else None
    except (OSError, UnicodeError, ValueError, RecursionError):  # RecursionError: nested too deeply
        cases = None
    records = cases if isinstance(cases, list) else []
    if not records:
        try:
            with open(run_dir / RESULTS_FILE, encoding="utf-8", errors="replace") as lines:
                records = [_json_object(line) for line in lines]
        except OSError:
            records = []
    for record in records:
        if isinstance(record, dict) and isinstance(record.get("method"), str) and isinstance(record.get("kind"), str):
            kinds.setdefault(record["method"], record["kind"])
    return kinds


def _json_object(line: str) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):  # a torn last line, or one nested too deeply
        return None


def load_suite(
    path: str | Path, overrides: dict[str, Any] | None = None, *, check_files: bool | None = None,
    recorded: bool | None = None,
) -> SuiteConfig:
    """Read and validate a suite file; `overrides` set keys before validation, each a dotted key
    (`device`, `timing.segments`: see `apply_overrides`).

    `check_files` and `recorded` default to the file's role: for the `suite.yaml` a run folder keeps
    (a `run.json` beside it) no files are checked (checking or reporting a finished run must not
    need its dataset at hand) and it is read as the run's record (`parse_suite`: its methods need not
    be installed here). A suite about to run passes `recorded=False`, whatever file it comes from.
    """
    path = Path(path)
    stored = is_stored_suite(path)
    if check_files is None:
        check_files = not stored
    kinds = recorded_kinds(path.parent) if (stored if recorded is None else recorded) else None
    data = read_yaml(path)
    if overrides and isinstance(data, dict):
        data = apply_overrides(data, overrides, str(path))
    try:
        return parse_suite(data, str(path), check_files=check_files, recorded_kinds=kinds)
    except SuiteError as exc:
        if not overrides:
            raise
        # Say which problems come from the command line rather than the file.
        problems = [
            (key, f"{message} (from --set {key}={json.dumps(overrides[key])})" if key in overrides else message)
            for key, message in exc.problems
        ]
        raise SuiteError(exc.path, problems) from None
