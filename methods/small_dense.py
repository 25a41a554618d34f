"""Small-Dense: a dense network with the sparse methods' parameter budget, in BARTER's shapes, its
blocks narrowed uniformly, or every width of the model narrowed by one multiplier (the RigL paper's)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from dstbench.dst.compact.compact_vit import (
    LAYOUTS, barter_layout, compact_blocks, compact_vit, empty_branch_parameters, full_prunable_numel, topology, uniform_layout,
)
from dstbench.dst.method_base import Method
from dstbench.dst.optimizer import build_optimizer
from dstbench.dst.registry import register_method
from dstbench.models.fused_norms import fuse_block_norms
from dstbench.models.scaled_widths import ScaledWidths, prunable_numel, scaled_problem, scaled_widths
from dstbench.models.timm_models import create_model, default_prunable, family, is_vision_transformer

SCALED = "scaled"  # every width of the model narrowed by one multiplier (dstbench.models.scaled_widths)
# How far a layout's prunable share may land from its density before the case warns.
OFF_DENSITY = 0.01


@register_method("small_dense", kind="compact")
class SmallDense(Method):
    """Small-Dense: a compact ViT at the density's budget trained densely, never updated (BARTER's
    initial shapes by default, or every block narrowed alike).

    `layout: barter` (the default): the blocks hold exactly what BARTER's hold at construction
    (`compact_vit`): H = round(d * total heads) heads and the C FFN channels that bring the prunable
    weights closest to d times their full count (`budgets`), spread evenly over the blocks (whole heads go to the earliest blocks; later ones may
    hold none). Its step is what any compact method at these shapes costs at least, so a compact
    method's time against it says what its own machinery costs (the report's shape limit).

    `layout: uniform`: every block narrowed alike, the embedding width kept: the same number of
    heads in each (round(d * heads per block), at least 1) and the same number of FFN channels, as
    many as bring the prunable weights closest to the budget (`uniform_layout`).

    `layout: scaled`: the RigL paper's Small-Dense, every width of the model narrowed by one
    multiplier (`dstbench.models.scaled_widths`): a ViT's heads (the head dimension kept, so its
    embedding too) and FFN width, a ResNet's or ConvNeXt's channels, residual widths included; a
    new model of those widths from the suite's timm name and kwargs, the prunable share within a
    few thousandths of the density. It trains the CNNs the other layouts cannot.

    Every layout: physically sized tensors, the suite's `fuse_norms`, no topology update, no
    importance hooks, no method buffers; a case warns when its prunable share lands more than 0.01
    from its density.
    """

    @dataclasses.dataclass
    class Params:
        layout: str = "barter"  # barter (BARTER's shapes, heads in the first blocks), uniform (every block alike) or scaled (every width by one multiplier)

        def __post_init__(self) -> None:
            if self.layout not in (*LAYOUTS, SCALED):
                raise ValueError(f"layout must be one of {[*LAYOUTS, SCALED]}, got {self.layout!r}")

    @classmethod
    def model_problem(cls, model: torch.nn.Module, params: Mapping[str, Any], model_prunable: str | None) -> str | None:
        """barter and uniform narrow ViT blocks; scaled narrows a ViT, a ResNet or a ConvNeXt."""
        if params.get("layout") == SCALED:
            return scaled_problem(model)
        if not is_vision_transformer(model):
            return (f"{cls.name} resizes the attention heads and MLP channels of timm VisionTransformer blocks, which a "
                    f"{family(model)} does not have (layout scaled narrows a ResNet or ConvNeXt)")
        return None

    @classmethod
    def builds_own_model(cls, params: Mapping[str, Any]) -> bool:
        return params.get("layout") == SCALED

    @classmethod
    def initial_layout(cls, model: nn.Module, density: float, params: dict[str, Any]) -> tuple[list[int], list[int]] | None:
        """The heads and FFN channels per block it holds on a dense timm ViT (`--dry-run`); None for
        `scaled`, which narrows the embedding too."""
        if params.get("layout") == SCALED:
            return None
        return (uniform_layout if params.get("layout") == "uniform" else barter_layout)(model, density)

    def __init__(self, model: nn.Module, *, density: float, **kwargs: Any) -> None:
        # As BARTER: the base validates and builds an optimizer over the dense model (no state yet),
        # which is rebuilt over the compact Parameters.
        super().__init__(model, density=density, **kwargs)
        self.scaled: ScaledWidths | None = None
        if self.params.layout == SCALED:
            self._build_scaled(density)
        else:
            compact_vit(self._model, density, fuse_norms=self.fuse_norms, layout=self.params.layout)
            self._optimizer = build_optimizer(self.optimizer_spec, self._model)
            self._full_numel = full_prunable_numel(self._model)
        held = self.density()
        if abs(held - density) > OFF_DENSITY:
            warnings.warn(f"small_dense layout {self.params.layout} holds {held:.4f} of the prunable weights at density "
                          f"{density:g}: more than {OFF_DENSITY} off", stacklevel=2)

    def _build_scaled(self, density: float) -> None:
        """A new model of the narrowed widths in place of the full one (same family, same kwargs
        otherwise; drawn from the torch seed where it stands, after the full model's draws)."""
        if self.model_name is None:
            raise ValueError("small_dense layout scaled builds a narrower model from the timm name and kwargs of the "
                             "full one: pass model_name and model_kwargs (the harness does)")
        self.scaled = scaled_widths(self.model_name, self.model_kwargs, density)
        self._model = create_model(self.model_name, device=self.device, **self.scaled.kwargs)
        if self.fuse_norms:
            fuse_block_norms(self._model)
        self.model_prunable = default_prunable(self._model)
        self._optimizer = build_optimizer(self.optimizer_spec, self._model)
        self._full_numel = self.scaled.full_prunable

    def density(self) -> float:
        """Fraction of the full-size model's prunable weights (a ViT's qkv/proj/fc1/fc2) physically present."""
        if self.scaled is not None:
            return prunable_numel(self._model) / self._full_numel
        return sum(w.numel() for w in self.prunable().values()) / self._full_numel

    def method_buffers(self) -> dict[str, torch.Tensor]:
        """None: nothing beside the (compact) parameters and their optimizer state."""
        return {}

    def result_extras(self) -> dict[str, Any]:
        """`layout_rule` (barter, uniform or scaled); for barter and uniform the total heads and
        channels held (`budgets`), the dense widths and the per-block `layout`; for scaled the
        multiplier and the widths it set (`scaled_widths`)."""
        if self.scaled is not None:
            return {"layout_rule": SCALED, "multiplier": round(self.scaled.multiplier, 6), "scaled_widths": self.scaled.widths}
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
        if self.scaled is not None:
            return super().ddp_ignored_parameters()
        return super().ddp_ignored_parameters() | empty_branch_parameters(self.model)
