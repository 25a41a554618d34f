"""dstbench: does a dynamic sparse training method make ViT training faster and smaller on real
hardware, and what does it cost in accuracy?

Stable Python API (`dstbench.api` for runs, `dstbench.methods` and `dstbench.dst` for methods):
    run_suite(suite, out="runs", *, overrides=, only=, densities=, ...) -> Run   as `dstbench run`;
                                     RunFailed when every case failed
    load_run(path) -> Run            a run folder: .frame(), .segments(), .check(), .report(...)
    compare(baseline, current, ...) -> Comparison   as `dstbench compare`: .passed, .frame()
    load_suite(path, overrides=None) -> SuiteConfig  a suite file, validated
    list_methods() -> list[str]
    create_method(name, model, *, density, total_steps, optimizer, **params) -> Method
    register_method(name, kind=...)  class decorator for new methods
    register_tracker(name)           class decorator for new metrics (a `Tracker`: dstbench.measure.trackers.base)
    Tracker, ResultField             a metric's base class and how it declares a result field
    Method, SegmentStats             the base class every method derives from, and what a segment returns
    MaskedMethod                     the masked engine's base class (`dstbench.dst.masked`)

The names load on first use, so commands that only read results (report, compare) never import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from dstbench.util.version import __version__

_API = {
    "Method": "dstbench.dst.method_base",
    "SegmentStats": "dstbench.dst.method_base",
    "MaskedMethod": "dstbench.dst.masked",
    "create_method": "dstbench.methods",
    "list_methods": "dstbench.methods",
    "method_info": "dstbench.methods",
    "register_method": "dstbench.dst.registry",
    "register_tracker": "dstbench.measure.trackers.registry",
    "Tracker": "dstbench.measure.trackers.base",
    "ResultField": "dstbench.measure.trackers.base",
    "Comparison": "dstbench.api",
    "Run": "dstbench.api",
    "RunFailed": "dstbench.api",
    "compare": "dstbench.api",
    "load_run": "dstbench.api",
    "load_suite": "dstbench.api",
    "run_suite": "dstbench.api",
}

__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'dstbench' has no attribute {name!r}")
