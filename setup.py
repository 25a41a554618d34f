"""setuptools' package discovery: every package under dstbench/, and methods/ shipped as
dstbench.methods (pyproject.toml's package-dir). Everything else is in pyproject.toml; this file
exists because pyproject's `packages.find` cannot name a package whose folder is mapped
(setuptools' find names packages by their folder's path)."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["dstbench", "dstbench.*"]), "dstbench.methods"])
