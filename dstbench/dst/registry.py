"""The method registry: methods register where they are defined.

    @register_method("rigl", kind="masked")
    class RigL(MaskedMethod): ...

This module holds the table and what a registered class says about itself (kind, description,
parameters). Finding methods (the built-ins in `dstbench.methods`, entry points, a suite's
`plugins:`) and building one by name is `dstbench.methods`' business: the catalog sits above the
method files, the registry below them.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import tokenize
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:
    from dstbench.dst.method_base import Method

KINDS = ("dense", "masked", "compact")

M = TypeVar("M", bound="type[Method]")


@dataclass(frozen=True)
class MethodInfo:
    name: str
    kind: str
    description: str
    cls: type
    module: str


_REGISTRY: dict[str, MethodInfo] = {}


def register_method(name: str, *, kind: str, description: str | None = None) -> Callable[[M], M]:
    """Class decorator that registers a `Method` subclass under `name`.

    The description defaults to the first paragraph of the class docstring.
    """
    if kind not in KINDS:
        raise ValueError(f"method {name!r}: kind must be one of {KINDS}, got {kind!r}")

    def decorator(cls: M) -> M:
        info = MethodInfo(
            name=name,
            kind=kind,
            description=description or first_paragraph(cls.__doc__),
            cls=cls,
            module=cls.__module__,
        )
        previous = _REGISTRY.get(name)
        if previous is not None and previous.cls.__qualname__ != cls.__qualname__:
            raise ValueError(f"method {name!r} is already registered by {previous.module}")
        _REGISTRY[name] = info
        cls.name = name
        cls.kind = kind
        cls.description = info.description
        return cls

    return decorator


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph as one line."""
    paragraph = inspect.cleandoc(doc or "").split("\n\n", 1)[0]
    return " ".join(paragraph.split())


@dataclass(frozen=True)
class ParamInfo:
    """One parameter of a method's `Params`: what `dstbench list` shows."""

    name: str
    type: str
    default: Any
    help: str  # `field(metadata={"help": ...})`, else the comment after the field in its source


def _field_comments(cls: type) -> dict[str, str]:
    """`name: type = default  # comment` lines of a class's source, as {name: comment}."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    first_name: dict[int, str] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            row = token.start[0]
            if token.type == tokenize.NAME and row not in first_name:
                first_name[row] = token.string
            elif token.type == tokenize.COMMENT and row in first_name:
                comments.setdefault(first_name[row], token.string.lstrip("#").strip())
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return comments
    return comments


def params_of(cls: type) -> list[ParamInfo]:
    """The parameters a method class takes in a suite (`params:`), with defaults and their help.

    A parameter's help is `dataclasses.field(metadata={"help": "..."})` when the field gives one,
    else the comment after the field on its line in the class source (`delta_t: int = 100  # ...`);
    a subclass's comment wins over its base's."""
    params_cls = cls.Params
    comments: dict[str, str] = {}
    for klass in reversed(params_cls.__mro__):  # a subclass's comment wins over its base's
        if dataclasses.is_dataclass(klass):
            comments.update(_field_comments(klass))
    out = []
    for field in dataclasses.fields(params_cls):
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = None
        kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
        help_text = str(field.metadata.get("help") or comments.get(field.name, ""))
        out.append(ParamInfo(field.name, kind, default, help_text))
    return out


def registered() -> dict[str, MethodInfo]:
    """The methods registered so far, by name (what has been imported; see `dstbench.methods`)."""
    return _REGISTRY
