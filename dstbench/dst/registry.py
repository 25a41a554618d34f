"""The method registry: methods register where they are defined, third parties through entry points.

    @register_method("rigl", kind="masked")
    class RigL(MaskedMethod): ...

Built-in methods live in `dstbench.methods` (the repository's `methods/` folder) and are imported
on first use; packages that declare the entry-point group `dstbench.methods` are loaded then too.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import inspect
import io
import pkgutil
import tokenize
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeVar

if TYPE_CHECKING:
    import torch

    from dstbench.dst.method import Method

KINDS = ("dense", "masked", "compact")
ENTRY_POINT_GROUP = "dstbench.methods"

M = TypeVar("M", bound="type[Method]")


@dataclass(frozen=True)
class MethodInfo:
    name: str
    kind: str
    description: str
    cls: type
    module: str


_REGISTRY: dict[str, MethodInfo] = {}
_loaded = False


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
    help: str  # the comment after the field in its source, if any


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


def method_params(name: str) -> list[ParamInfo]:
    """The parameters a method takes in a suite (`params:`), with defaults and their comments."""
    params_cls = method_info(name).cls.Params
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
        out.append(ParamInfo(field.name, kind, default, comments.get(field.name, "")))
    return out


def _import_builtins() -> None:
    import dstbench.methods as package

    for module in pkgutil.iter_modules(package.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{module.name}")


def _import_entry_points() -> None:
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry_point.load()
        except Exception as exc:  # a broken plugin must not take the built-ins down with it
            warnings.warn(f"dstbench: could not load method plugin {entry_point.value!r}: {exc}")
            continue
        # An entry point may name a module (whose decorators register) or an unregistered class.
        if isinstance(loaded, type) and entry_point.name not in _REGISTRY:
            register_method(entry_point.name, kind=getattr(loaded, "kind", "masked"))(loaded)


def ensure_loaded() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        _import_builtins()
        _import_entry_points()


class PluginImportError(ImportError):
    """A suite's plugin raised at import: any exception, reported as a suite error (exit 2)."""


def import_plugins(modules: list[str]) -> None:
    """Import modules named in a suite's `plugins` so their decorators register methods.

    Whatever a plugin raises at import (not only ImportError) becomes a `PluginImportError`
    naming the plugin, so a broken plugin is one line of a suite error, not a traceback.
    """
    for module in modules:
        try:
            importlib.import_module(str(module))
        except PluginImportError:
            raise
        except ImportError as exc:
            raise PluginImportError(f"{module}: {exc}") from exc
        except (Exception, SystemExit) as exc:
            raise PluginImportError(f"{module} raised {type(exc).__name__} at import: {exc}") from exc


def list_methods() -> list[str]:
    """Names of every registered method, sorted."""
    ensure_loaded()
    return sorted(_REGISTRY)


def method_info(name: str) -> MethodInfo:
    ensure_loaded()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown method {name!r} (registered: {', '.join(sorted(_REGISTRY))})") from None


def create_method(
    name: str,
    model: torch.nn.Module,
    *,
    density: float,
    total_steps: int,
    optimizer: dict[str, Any],
    **params: Any,
) -> Method:
    """Build the method `name` around `model`; the method owns the model and its optimizer."""
    return method_info(name).cls(
        model, density=density, total_steps=total_steps, optimizer=optimizer, **params
    )
