"""`make_launcher`: the launcher a suite's `launcher:` config names, from the registry
(`dstbench.execution.launchers.base`). Every launcher folder's `launcher` module is found and
imported here, so each launcher class has registered itself by the time one is looked up; a
launcher is its folder (`config.py` with `@register_config`, `launcher.py` with
`@register_launcher`; a folder whose launchers live in more modules lists them in its
`__init__`'s `LAUNCHER_MODULES`), named nowhere else.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from dstbench.execution.launchers.base import LAUNCHERS, Launcher, launcher_class
from dstbench.execution.launchers.config import LauncherConfigBase


def _import_launcher_modules() -> None:
    """Import each launcher folder's modules that register launchers: `launcher`, or those its
    package names in `LAUNCHER_MODULES` (the subprocess folder's parallel form too)."""
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.ispkg:
            package = importlib.import_module(f"{__package__}.{module.name}")
            for name in getattr(package, "LAUNCHER_MODULES", ("launcher",)):
                importlib.import_module(f"{package.__name__}.{name}")


_import_launcher_modules()


def registered_launchers() -> tuple[type[Launcher], ...]:
    """Every registered launcher class, by name."""
    return tuple(LAUNCHERS[name] for name in sorted(LAUNCHERS))


def make_launcher(config: LauncherConfigBase) -> Launcher:
    """The registered launcher for `config` (its `launcher_name`: `subprocess` with `parallel > 1`
    names the parallel one)."""
    return launcher_class(config.launcher_name).from_config(config)
