"""The reference pages generated from the code (`dstbench.cli.reference`): every suite key, command
option, result field, exit code and method parameter is there, described."""

from __future__ import annotations

import argparse
import typing
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from dstbench.cli import build_parser
from dstbench.cli import reference
from dstbench.execution.launchers.config import CONFIGS
from dstbench.suite.schema import SuiteConfig


def _key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, info in model.model_fields.items():
        hint = info.annotation
        listed = typing.get_origin(hint) is list
        inner = typing.get_args(hint)[0] if listed else hint
        nested = isinstance(inner, type) and issubclass(inner, BaseModel)
        paths.append(f"{prefix}{name}")
        if nested:
            paths += _key_paths(inner, "" if listed else f"{prefix}{name}.")
    return paths


def test_every_suite_key_is_listed_with_its_description() -> None:
    text = reference.suite_keys()
    for path in _key_paths(SuiteConfig):
        assert f"| `{path}` |" in text, path
    for config in CONFIGS:
        for name, info in config.model_fields.items():
            assert f"| `launcher.{name}` |" in text
            assert info.description and reference._cell(info.description) in text


def test_a_key_without_a_description_is_an_error() -> None:
    class Undocumented(BaseModel):
        documented: int = Field(1, description="has one")
        bare: int = 2

    with pytest.raises(reference.ReferenceProblem, match="bare"):
        reference.model_keys(Undocumented)


def test_types_defaults_and_bounds_read_as_a_suite_writes_them() -> None:
    class Keys(BaseModel):
        mode: Literal["a", "b"] = Field("a", description="a choice")
        count: int = Field(3, gt=0, description="a positive count")
        share: float | None = Field(None, ge=0, lt=1, description="a share")
        names: list[str] = Field([], description="names")

    text = reference.model_keys(Keys, "x.")
    assert "| `x.mode` | one of `a`, `b` | `a` | a choice |" in text
    assert "| `x.count` | integer (> 0) | `3` |" in text
    assert "| `x.share` | number or null (>= 0, < 1) | `null` |" in text
    assert "| `x.names` | list of string | `[]` |" in text
    assert reference.type_text(dict[str, Any]) == "mapping"
    assert reference.type_text(tuple[float, float]) == "[number, number]"


def test_every_command_and_option_is_listed() -> None:
    text = reference.command_options()
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in subparsers.choices.items():
        assert f"### `dstbench {name}`" in text
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in text or f", {option}" in text, (name, option)
    assert "| `--time-basis {auto,relative,absolute}` | `auto` |" in reference.command_options("compare")
    with pytest.raises(reference.ReferenceProblem, match="no command"):
        reference.command_options("nonsense")


def test_every_result_field_is_listed() -> None:
    from dstbench.results.record import result_fields

    text = reference.result_fields()
    for spec in result_fields():
        assert f"| `{spec.name}` |" in text, spec.name


def test_exit_codes_come_with_their_constants() -> None:
    text = reference.exit_codes()
    for code, name in ((0, "EXIT_OK"), (1, "EXIT_FAILED"), (2, "EXIT_USAGE"), (74, "EXIT_IO_ERROR"), (130, "EXIT_INTERRUPTED")):
        assert f"| `{code}` (`{name}`) |" in text


def test_every_method_has_its_parameters_described() -> None:
    from dstbench.methods import list_methods, method_info, method_params

    # The shipped methods: other tests register plugin methods of their own, undocumented on purpose.
    for name in [m for m in list_methods() if method_info(m).cls.__module__.startswith("dstbench.methods.")]:
        text = reference.method_parameters(name)
        for param in method_params(name):
            assert f"| `{param.name}` |" in text, (name, param.name)
    with pytest.raises(reference.ReferenceProblem, match="unknown method"):
        reference.method_parameters("no_such_method")


def test_markers_expand_and_unknown_ones_fail() -> None:
    page = "# Exit codes\n\n<!-- reference: exit-codes -->\n\nand more"
    expanded = reference.expand_markers(page)
    assert "<!--" not in expanded and "| `2` (`EXIT_USAGE`) |" in expanded and expanded.endswith("and more")
    assert "### `dstbench.methods.create_method`" in reference.expand_markers("<!-- reference: functions dstbench.methods -->")
    with pytest.raises(reference.ReferenceProblem, match="unknown reference"):
        reference.expand_markers("<!-- reference: nonsense -->")
