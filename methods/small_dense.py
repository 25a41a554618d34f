"""Small-Dense: a dense network with the sparse methods' parameter budget, in BARTER's shapes or
narrowed uniformly."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from dstbench.dst.compact.compact_vit import (
    LAYOUTS, barter_layout, compact_blocks, compact_vit, empty_branch_parameters, full_prunable_numel, topology, uniform_layout,
)
from dstbench.dst.method_base import Method
from dstbench.dst.optimizer import build_optimizer
from dstbench.dst.registry import register_method


@register_method("small_dense", kind="compact")
class SmallDense(Method):
    """Small-Dense: a compact ViT at the density's budget trained densely, never updated (BARTER's
    initial shapes by default, or every block narrowed alike).

    `layout: barter` (the default): the blocks hold exactly what BARTER's hold at construction
    (`compact_vit`): H = round(d * total heads) heads and the C FFN channels that bring the prunable
    weights closest to d times their full count (`budgets`), spread evenly over the blocks (whole heads go to the earliest blocks; later ones may
    hold none). Its step is what any compact method at these shapes costs at least, so a compact
    method's time against it says what its own machinery costs (the report's shape limit).

    `layout: uniform`: the RigL paper's Small-Dense, every block narrowed alike: the same number of
    heads in each (round(d * heads per block), at least 1) and the same number of FFN channels, as
    many as bring the prunable weights closest to the budget (`uniform_layout`). It is the
    accuracy baseline of a dense model of the same size that does not start from BARTER's layout.

    Either way: physically sized tensors from the same dense initialisation, the suite's
    `fuse_norms`, no topology update, no importance hooks, no method buffers.
    """

    vision_transformer_only = True  # BARTER's shapes: narrowed ViT blocks

    @dataclasses.dataclass
    class Params:
        layout: str = "barter"  # initial shapes: barter (BARTER's, heads in the first blocks) or uniform (every block alike)

        def __post_init__(self) -> None:
            if self.layout not in LAYOUTS:
                raise ValueError(f"layout must be one of {list(LAYOUTS)}, got {self.layout!r}")

    @classmethod
    def initial_layout(cls, model: nn.Module, density: float, params: dict[str, Any]) -> tuple[list[int], list[int]]:
        """The heads and FFN channels per block it holds on a dense timm ViT (`--dry-run`)."""
        return (uniform_layout if params.get("layout") == "uniform" else barter_layout)(model, density)

    def __init__(self, model: nn.Module, *, density: float, **kwargs: Any) -> None:
        # As BARTER: the base validates and builds an optimizer over the dense model (no state yet),
        # which is rebuilt over the compact Parameters.
        super().__init__(model, density=density, **kwargs)
        compact_vit(self._model, density, fuse_norms=self.fuse_norms, layout=self.params.layout)
        self._optimizer = build_optimizer(self.optimizer_spec, self._model)
        self._full_numel = full_prunable_numel(self._model)

    def density(self) -> float:
        """Fraction of the full-size model's qkv/proj/fc1/fc2 weights physically present."""
        return sum(w.numel() for w in self.prunable().values()) / self._full_numel

    def method_buffers(self) -> dict[str, torch.Tensor]:
        """None: nothing beside the (compact) parameters and their optimizer state."""
        return {}

    def result_extras(self) -> dict[str, Any]:
        """`layout_rule` (barter or uniform), the total heads and channels held (`budgets`), the
        dense widths and the per-block `layout`."""
        topo = topology(self.model)
        blocks = compact_blocks(self.model)
        return {
            "layout_rule": self.params.layout,
            "budgets": {"heads": sum(t["heads"] for t in topo), "hidden": sum(t["hidden"] for t in topo)},
            "dense_width": {"heads": [b.attn.max_units for b in blocks], "hidden": [b.mlp.max_units for b in blocks]},
            "layout": {"heads": [t["heads"] for t in topo], "hidden": [t["hidden"] for t in topo]},
        }

    def ddp_ignored_parameters(self) -> set[str]:
        """The base's, plus the parameters of empty branches (a block without heads or channels)."""
        return super().ddp_ignored_parameters() | empty_branch_parameters(self.model)
