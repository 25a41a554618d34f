"""dstbench: does a dynamic sparse training method make ViT training faster and smaller on real
hardware, and what does it cost in accuracy?

Stable Python API:
    list_methods() -> list[str]
    create_method(name, model, *, density, total_steps, optimizer, **params) -> Method
    register_method(name, kind=...)  class decorator for new methods
    Method, SegmentStats             the base class every method derives from, and what a segment returns

The names load on first use, so commands that only read results (report, compare) never import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from dstbench.util.version import __version__

_API = {
    "Method": "dstbench.dst.method_base",
    "SegmentStats": "dstbench.dst.method_base",
    "create_method": "dstbench.methods",
    "list_methods": "dstbench.methods",
    "method_info": "dstbench.methods",
    "register_method": "dstbench.dst.registry",
}

__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'dstbench' has no attribute {name!r}")
