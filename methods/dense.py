"""Dense training: the baseline every sparse method is measured against."""

from __future__ import annotations

from dstbench.dst.method_base import Method
from dstbench.dst.registry import register_method


@register_method("dense", kind="dense")
class Dense(Method):
    """Ordinary dense training, every weight active (runs once, at density 1.0)."""
