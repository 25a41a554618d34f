"""dstbench: does a dynamic sparse training method make ViT training faster and smaller on real
hardware, and what does it cost in accuracy?

Stable Python API:
    list_methods() -> list[str]
    create_method(name, model, *, density, total_steps, optimizer, **params) -> Method
    register_method(name, kind=...)  class decorator for new methods
"""

from dstbench.method import Method, SegmentStats
from dstbench.registry import create_method, list_methods, method_info, register_method

__version__ = "0.1.0"

__all__ = ["Method", "SegmentStats", "create_method", "list_methods", "method_info", "register_method", "__version__"]
