"""Small-Dense: a dense network with the sparse methods' parameter budget, here BARTER's shapes."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dstbench.dst.compact.compact_vit import compact_blocks, compact_vit, empty_branch_parameters, full_prunable_numel, topology
from dstbench.dst.method_base import Method
from dstbench.dst.optimizer import build_optimizer
from dstbench.dst.registry import register_method


@register_method("small_dense", kind="compact")
class SmallDense(Method):
    """Small-Dense: BARTER's initial compact ViT trained densely, never updated (shape baseline).

    At density d the blocks hold exactly what BARTER's hold at construction (`compact_vit`): H =
    round(d * total heads) heads and C = round(d * total FFN channels) channels, spread evenly over
    the blocks, as physically sized tensors from the same dense initialisation, with the suite's
    `fuse_norms`. No topology update, no importance hooks, no method buffers: its step is what any
    compact method at these shapes costs at least, so a compact method's time against it says what
    its own machinery costs (the report's shape limit).
    """

    def __init__(self, model: nn.Module, *, density: float, **kwargs: Any) -> None:
        # As BARTER: the base validates and builds an optimizer over the dense model (no state yet),
        # which is rebuilt over the compact Parameters.
        super().__init__(model, density=density, **kwargs)
        compact_vit(self._model, density, fuse_norms=self.fuse_norms)
        self._optimizer = build_optimizer(self.optimizer_spec, self._model)
        self._full_numel = full_prunable_numel(self._model)

    def density(self) -> float:
        """Fraction of the full-size model's qkv/proj/fc1/fc2 weights physically present."""
        return sum(w.numel() for w in self.prunable().values()) / self._full_numel

    def method_buffers(self) -> dict[str, torch.Tensor]:
        return {}

    def result_extras(self) -> dict[str, Any]:
        topo = topology(self.model)
        blocks = compact_blocks(self.model)
        return {
            "budgets": {"heads": sum(t["heads"] for t in topo), "hidden": sum(t["hidden"] for t in topo)},
            "dense_width": {"heads": [b.attn.max_units for b in blocks], "hidden": [b.mlp.max_units for b in blocks]},
            "layout": {"heads": [t["heads"] for t in topo], "hidden": [t["hidden"] for t in topo]},
        }

    def ddp_ignored_parameters(self) -> set[str]:
        return super().ddp_ignored_parameters() | empty_branch_parameters(self.model)
