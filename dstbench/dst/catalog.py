"""The catalog of every method: the built-ins (`methods/`, installed as `dstbench.methods`),
packages that declare the entry-point group `dstbench.methods`, and the modules a suite names in
`plugins:`; `dstbench.methods` re-exports it.

Each method registers itself with `@register_method` (`dstbench.dst.registry`) where its class is
defined. The built-in files are imported on first use of the catalog (`list_methods`,
`method_info`, `create_method`), so `import dstbench` stays light.

Where a suite's `plugins:` are found (`import_plugins`): on `sys.path` first, as any import, then in
the suite file's folder. The folder joins `sys.path` (at its end) only while the plugin is imported,
so a plugin beside its suite may import its sibling modules at import time, and the folder never
shadows an installed module or lingers to answer a later, unrelated import (a `utils.py` beside a
suite must not become every process's `utils`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import pkgutil
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from dstbench.dst.registry import MethodInfo, ParamInfo, params_of, register_method, registered

if TYPE_CHECKING:
    import torch

    from dstbench.dst.method_base import Method

ENTRY_POINT_GROUP = "dstbench.methods"
# The built-in methods' package (`methods/`, installed as dstbench.methods): a layer above this one,
# so it is imported by name on first use, as the entry points' modules are.
BUILTIN_PACKAGE = "dstbench.methods"

_loaded = False


def _import_builtins() -> None:
    package = importlib.import_module(BUILTIN_PACKAGE)
    for module in pkgutil.iter_modules(package.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{BUILTIN_PACKAGE}.{module.name}")


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


def import_plugins(modules: list[str], search: Iterable[str | Path] = ()) -> None:
    """Import modules named in a suite's `plugins` so their decorators register methods.

    A module is looked up on `sys.path` first; one whose top-level name is not there is looked up
    in the folders of `search` (the suite file's folder), in order. Whatever a plugin raises at
    import (not only ImportError) becomes a `PluginImportError` naming the plugin, so a broken
    plugin is one line of a suite error, not a traceback.
    """
    folders = [str(Path(folder)) for folder in search]
    for module in modules:
        module = str(module)
        try:
            folder = _plugin_folder(module, folders)
            with _on_path(folder):
                importlib.import_module(module)
        except PluginImportError:
            raise
        except ImportError as exc:
            where = f" (looked on sys.path and in {', '.join(folders)})" if folders and _missing(exc, module) else ""
            raise PluginImportError(f"{module}: {exc}{where}") from exc
        except (Exception, SystemExit) as exc:
            raise PluginImportError(f"{module} raised {type(exc).__name__} at import: {exc}") from exc


def _plugin_folder(module: str, folders: list[str]) -> str | None:
    """The first of `folders` that holds `module`'s top-level package or module, when `sys.path`
    does not (None: import it as any module)."""
    top = module.partition(".")[0]
    if not top or top in sys.modules or importlib.util.find_spec(top) is not None:
        return None
    for folder in folders:
        if importlib.machinery.PathFinder.find_spec(top, [folder]) is not None:
            return folder
    return None


@contextlib.contextmanager
def _on_path(folder: str | None) -> Iterator[None]:
    """`folder` at the end of `sys.path` for the duration (nothing when None or already there)."""
    if folder is None or folder in sys.path:
        yield
        return
    sys.path.append(folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # the plugin itself took it out again
            sys.path.remove(folder)


def _missing(exc: ImportError, module: str) -> bool:
    """Whether `exc` says `module` (or a package on its way) does not exist, rather than that
    something the plugin imports is missing."""
    name = exc.name if isinstance(exc, ModuleNotFoundError) else None
    return name is not None and (module == name or module.startswith(f"{name}."))


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
