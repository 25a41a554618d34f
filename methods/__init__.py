"""Built-in DST methods, one file each, installed as `dstbench.methods`, and the catalog of every
method: built-ins, packages that declare the entry-point group `dstbench.methods`, and the modules a
suite names in `plugins:`.

Each file registers its method with `@register_method` (`dstbench.dst.registry`) where the class is
defined. The files are imported on first use of the catalog (`list_methods`, `method_info`,
`create_method`), so `import dstbench` stays light.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import warnings
from typing import TYPE_CHECKING, Any

from dstbench.dst.registry import MethodInfo, ParamInfo, params_of, register_method, registered

if TYPE_CHECKING:
    import torch

    from dstbench.dst.method_base import Method

ENTRY_POINT_GROUP = "dstbench.methods"

_loaded = False


def _import_builtins() -> None:
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


def _import_entry_points() -> None:
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry_point.load()
        except Exception as exc:  # a broken plugin must not take the built-ins down with it
            warnings.warn(f"dstbench: could not load method plugin {entry_point.value!r}: {exc}")
            continue
        # An entry point may name a module (whose decorators register) or an unregistered class.
        if isinstance(loaded, type) and entry_point.name not in registered():
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
    return sorted(registered())


def method_info(name: str) -> MethodInfo:
    ensure_loaded()
    try:
        return registered()[name]
    except KeyError:
        raise KeyError(f"unknown method {name!r} (registered: {', '.join(sorted(registered()))})") from None


def method_params(name: str) -> list[ParamInfo]:
    """The parameters method `name` takes in a suite (`params:`), with defaults and their comments."""
    return params_of(method_info(name).cls)


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


__all__ = [
    "ENTRY_POINT_GROUP", "MethodInfo", "PluginImportError", "create_method", "ensure_loaded", "import_plugins",
    "list_methods", "method_info", "method_params",
]
