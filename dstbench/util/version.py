"""The package's version, in the lowest layer so that any module (the command's `--version`
among them) can read it without importing the package's top; `dstbench.__version__` is this one.
pyproject.toml's `version` must match it."""

__version__ = "0.1.0"
