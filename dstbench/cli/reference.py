"""The reference pages of the manual, generated from the code: suite keys from the pydantic schema,
each command's options from its argparse parser, result fields from the tracker and record
declarations, exit codes, and a method's parameters from its `Params`.

The docs site's build hook (`docs/hooks.py`) replaces each `<!-- reference: NAME [ARG] -->` marker
in a page with `render(NAME, ARG)`, so what the manual says about a key, an option or a field is
what the code declares. A key or field without a description is an error, not an empty cell.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

MARKER = re.compile(r"<!--\s*reference:\s*([a-z-]+)(?:\s+([\w.-]+))?\s*-->")


class ReferenceProblem(ValueError):
    """A reference that cannot be generated: an unknown marker, an undocumented key or field."""


# -- types, as a reader of a YAML file or a JSON line sees them --------------------------------------
_PLAIN = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null", Any: "any"}


def type_text(hint: Any) -> str:
    """`hint` in words: `integer`, `one of "a", "b"`, `list of number`, `string or null`."""
    if (isinstance(hint, type) or hint is Any) and hint in _PLAIN:
        return _PLAIN[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return ("one of " if len(args) > 1 else "") + ", ".join(f"`{_value_text(a)}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if all(inspect.isclass(a) and issubclass(a, BaseModel) for a in present) and len(present) > 1:
            return "mapping (by `name`)"
        text = " or ".join(type_text(a) for a in present)
        return f"{text} or null" if len(present) < len(args) else text
    if origin in (list, tuple) and args:
        if origin is tuple and len(args) > 1 and args[-1] is not Ellipsis:
            return "[" + ", ".join(type_text(a) for a in args) + "]"
        return f"list of {type_text(args[0])}"
    if origin is dict:
        return f"mapping of {type_text(args[1])}" if args and args[1] is not Any else "mapping"
    if inspect.isclass(hint) and issubclass(hint, BaseModel):
        return "mapping"
    return getattr(hint, "__name__", str(hint))


def _value_text(value: Any) -> str:
    """A value as a suite or a JSON line writes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", exclude_defaults=True)
    return json.dumps(value, default=str)


def _cell(text: Any) -> str:
    """Text for one Markdown table cell: no line breaks, pipes escaped outside code spans (inside
    them Python-Markdown's tables need no escape, and would show the backslash)."""
    parts = re.split(r"(`[^`]*`)", " ".join(str(text).split()))
    return "".join(part if part.startswith("`") else part.replace("|", "\\|") for part in parts)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _first_sentence(doc: str | None) -> str:
    text = " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())
    return text.split(". ")[0].rstrip(".") + "." if text else ""


# -- suite keys ------------------------------------------------------------------------------------
def _constraints(info: FieldInfo) -> str:
    """A field's bounds in words (`> 0`, `>= 0, < 1`, `1-100 characters`)."""
    bounds: dict[str, Any] = {}
    for item in info.metadata:
        for name in ("gt", "ge", "lt", "le", "min_length", "max_length"):
            if getattr(item, name, None) is not None:
                bounds[name] = getattr(item, name)
    words = [f"{sign} {_number(bounds[name])}" for name, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
             if name in bounds]
    if "min_length" in bounds or "max_length" in bounds:
        low, high = bounds.get("min_length", 0), bounds.get("max_length")
        unit = "characters" if info.annotation is str or typing.get_args(info.annotation)[:1] == (str,) else "items"
        words.append(f"{low}-{high} {unit}" if high is not None else f"at least {low} {unit.removesuffix('s') if low == 1 else unit}")
    return ", ".join(words)


def _number(value: float) -> str:
    """A bound as people write it: 2^63 - 1 rather than its 19 digits."""
    if isinstance(value, int) and value >= 2**16 and (value + 1) & value == 0:
        return f"2^{(value + 1).bit_length() - 1} - 1"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        factory = info.default_factory
        if inspect.isclass(factory) and issubclass(factory, BaseModel):
            return "its keys' defaults"
        return f"`{_value_text(factory())}`"  # type: ignore[call-arg]
    default = info.default
    if isinstance(default, BaseModel):
        changed = default.model_dump(mode="json", exclude_defaults=True)
        return f"`{_value_text(changed)}`" if changed else "its keys' defaults"
    return f"`{_value_text(default)}`"


def _nested_model(info: FieldInfo) -> type[BaseModel] | None:
    """The model a field holds (itself, as list items, or else null), when it is one model."""
    hint = info.annotation
    if typing.get_origin(hint) is list:
        hint = typing.get_args(hint)[0]
    held = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(held) == 1:
        hint = held[0]
    return hint if inspect.isclass(hint) and issubclass(hint, BaseModel) else None


def model_keys(model: type[BaseModel], prefix: str = "") -> str:
    """One model's keys as a table: key, type, default, what it does."""
    rows, undocumented = [], []
    for name, info in model.model_fields.items():
        if not info.description:
            undocumented.append(name)
            continue
        kind = type_text(info.annotation)
        bounds = _constraints(info)
        rows.append([f"`{prefix}{name}`", f"{kind} ({bounds})" if bounds else kind, _default_text(info), info.description])
    if undocumented:
        raise ReferenceProblem(f"{model.__name__}: keys without Field(description=...): {', '.join(undocumented)}")
    return _table(["key", "type", "default", "what it does"], rows)


def suite_keys() -> str:
    """Every key of a suite file, section by section, as the schema declares it."""
    from dstbench.execution.launchers.config import CONFIGS
    from dstbench.suite.schema import SuiteConfig

    parts = ["### Top level", _first_sentence(SuiteConfig.__doc__), model_keys(SuiteConfig)]

    def sections(model: type[BaseModel], prefix: str) -> None:
        """Each nested model's table right after its parent's, depth first."""
        for name, info in model.model_fields.items():
            nested = _nested_model(info)
            if nested is None:
                continue
            listed = typing.get_origin(info.annotation) is list
            path = f"{prefix}{name}" + ("[]" if listed else "")
            parts.extend([f"### `{path}`", _first_sentence(nested.__doc__), model_keys(nested, "" if listed else f"{path}.")])
            sections(nested, f"{path}.")

    sections(SuiteConfig, "")
    for config in CONFIGS:
        launcher = config.model_fields["name"].default
        summary = getattr(config, "summary", "")
        parts += [f"### `launcher` with `name: {launcher}`", f"{summary[:1].upper()}{summary[1:]}.", model_keys(config, "launcher.")]
    return "\n\n".join(p for p in parts if p)


# -- commands --------------------------------------------------------------------------------------
def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _argument_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            shown_as = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper())
            takes = "" if action.nargs == 0 else f" {shown_as}"
            if action.nargs in ("+", "*"):
                takes += "..."
            elif action.nargs == "?":
                takes = f" [{takes.strip()}]"
            name = ", ".join(action.option_strings) + takes
        else:
            name = action.metavar or action.dest
            name += "..." if action.nargs in ("+", "*") else ""
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) or not action.option_strings else f"`{default}`"
        if action.required and action.option_strings:
            shown = "required"
        choices = f" (one of: {', '.join(str(c) for c in action.choices)})" if action.choices else ""
        rows.append([f"`{name}`", shown, (action.help or "") + choices])
    return rows


def command_options(command: str | None = None) -> str:
    """Each command's usage line, description and options (`command`: one of them only)."""
    from dstbench.cli import build_parser

    parser = build_parser()
    commands = _subcommands(parser)
    if command is not None and command not in commands:
        raise ReferenceProblem(f"no command {command!r} (commands: {', '.join(commands)})")
    parts = []
    if command is None:
        parts += ["### `dstbench`", _table(["option", "default", "what it does"], _argument_rows(parser))]
    for name, sub in commands.items():
        if command is not None and name != command:
            continue
        usage = " ".join(sub.format_usage().removeprefix("usage: ").split())
        parts += [f"### `dstbench {name}`", f"```text\n{usage}\n```", " ".join((sub.description or "").split()),
                  _table(["argument", "default", "what it does"], _argument_rows(sub))]
    return "\n\n".join(parts)


def command_list() -> str:
    """One row per command: its name and one-line help, in `dstbench --help`'s order."""
    from dstbench.cli import build_parser

    parser = build_parser()
    helps = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return _table(["command", "what it does"], [[f"[`dstbench {n}`](commands.md#dstbench-{n})", h] for n, h in helps.items()])


# -- result fields and exit codes ------------------------------------------------------------------
def result_fields() -> str:
    """Every field of a result line: type, unit, meaning, how it aggregates over the timed segments
    and over seeds, which way is better, and how it merges across groups and ranks."""
    from dstbench.measure.trackers.base import SEED_AGGREGATES, SEGMENT_AGGREGATES
    from dstbench.results.record import SCHEMA_VERSION, STATUSES, result_fields as line_fields

    rows = [[f"`{spec.name}`", type_text(spec.type), spec.unit or "", spec.doc, spec.over_segments, spec.over_seeds,
             spec.better or "", spec.groups.name, spec.ranks.name + ("; listed per rank in `ranks`" if spec.per_rank else "")]
            for spec in line_fields()]
    undocumented = [row[0] for row in rows if not row[3].strip()]
    if undocumented:
        raise ReferenceProblem(f"result fields without a doc: {', '.join(undocumented)}")
    intro = (f"A line of schema version {SCHEMA_VERSION}; `status` is one of "
             + ", ".join(f"`{s}`" for s in STATUSES) + ". The merge rules say how a case's lines combine when it "
             "was timed in several interleaved groups (dense) or ran on several ranks (torchrun).")
    legend = ("Over segments: " + "; ".join(f"`{k}` {v}" for k, v in SEGMENT_AGGREGATES.items())
              + ". Over seeds (a row of `Run.frame()` pooled over a case's seeds): "
              + "; ".join(f"`{k}` {v}" for k, v in SEED_AGGREGATES.items()) + ".")
    return intro + "\n\n" + legend + "\n\n" + _table(
        ["field", "type", "unit", "meaning", "over segments", "over seeds", "better", "across groups", "across ranks"], rows)


def exit_codes() -> str:
    """The exit codes every command shares, as `dstbench --help` lists them, with their constants."""
    from dstbench.util import exitcodes

    rows: list[list[str]] = []
    for line in exitcodes.EXIT_CODES_HELP.splitlines()[1:]:
        match = re.match(r"\s{2}(\d+)\s+(.*)", line)
        if match and not line.startswith("       "):
            rows.append([match.group(1), match.group(2)])
        elif rows:
            rows[-1][1] += " " + line.strip()
    names = {value: name for name, value in vars(exitcodes).items() if name.startswith("EXIT_") and isinstance(value, int)}
    for row in rows:
        row[0] = f"`{row[0]}`" + (f" (`{names[int(row[0])]}`)" if int(row[0]) in names else "")
    if not rows:
        raise ReferenceProblem("dstbench.util.exitcodes.EXIT_CODES_HELP lists no exit code")
    return _table(["code", "meaning"], rows)


def method_parameters(method: str | None) -> str:
    """A method's parameters in a suite's `params:`: type, default and what each does."""
    if not method:
        raise ReferenceProblem("method-params needs a method name: <!-- reference: method-params rigl -->")
    from dstbench.methods import method_info, method_params

    try:
        info = method_info(method)
    except KeyError as exc:
        raise ReferenceProblem(exc.args[0]) from None
    params = method_params(method)
    head = f"`{info.name}` (kind `{info.kind}`, `{info.cls.__module__}.{info.cls.__qualname__}`): {info.description}"
    if not params:
        return head + "\n\nNo parameters."
    missing = [p.name for p in params if not p.help.strip()]
    if missing:
        raise ReferenceProblem(f"{method}: parameters without help: {', '.join(missing)}")
    rows = [[f"`{p.name}`", p.type, f"`{_value_text(p.default)}`", p.help] for p in params]
    return head + "\n\n" + _table(["parameter", "type", "default", "what it does"], rows)


def module_functions(module_name: str | None) -> str:
    """The documented public functions of an importable module (its `__all__`; one without a
    docstring is internal plumbing and left out): signature and docstring. For modules the docs' API
    renderer cannot find in the source tree (`dstbench.methods` is the repository's `methods/`
    folder, mapped at install time)."""
    import importlib

    if not module_name:
        raise ReferenceProblem("functions needs a module: <!-- reference: functions dstbench.methods -->")
    module = importlib.import_module(module_name)
    parts = []
    for name in getattr(module, "__all__", []):
        function = getattr(module, name)
        if not inspect.isfunction(function):
            continue
        doc = inspect.cleandoc(function.__doc__ or "")
        if not doc:
            continue
        signature = str(inspect.signature(function)).replace("'", "")
        parts.append(f"### `{module_name}.{name}`\n\n```python\n{name}{signature}\n```\n\n{doc}")
    if not parts:
        raise ReferenceProblem(f"{module_name} lists no public function in __all__")
    return "\n\n".join(parts)


# -- markers ---------------------------------------------------------------------------------------
GENERATORS: dict[str, Callable[[str | None], str]] = {
    "suite-keys": lambda arg: suite_keys(),
    "commands": command_options,
    "command-list": lambda arg: command_list(),
    "result-fields": lambda arg: result_fields(),
    "exit-codes": lambda arg: exit_codes(),
    "method-params": method_parameters,
    "functions": module_functions,
}


def render(name: str, arg: str | None = None) -> str:
    """The Markdown a `<!-- reference: NAME [ARG] -->` marker stands for."""
    if name not in GENERATORS:
        raise ReferenceProblem(f"unknown reference {name!r} (known: {', '.join(GENERATORS)})")
    return GENERATORS[name](arg)


def expand_markers(markdown: str) -> str:
    """`markdown` with every reference marker replaced by what it stands for."""
    return MARKER.sub(lambda match: render(match.group(1), match.group(2)), markdown)


__all__ = ["GENERATORS", "MARKER", "ReferenceProblem", "command_options", "exit_codes", "expand_markers", "model_keys",
           "method_parameters", "module_functions", "render", "result_fields", "suite_keys", "type_text"]
