"""The RigL paper's Small-Dense widths: a model of the same timm family with every width narrowed by
one multiplier, so that its prunable weights are a given share of the full model's.

- A VisionTransformer: the number of heads (the head dimension kept, so the embedding narrows with
  it) and the FFN hidden width. Heads are whole, so the multiplier `m` (about `sqrt(density)`: the
  prunable weights of a block, `4 E^2 + 2 E F`, scale with its square) is rounded to whole heads
  and the FFN width is the whole number that brings the prunable weights closest to the budget; of
  the head counts next to `m x heads`, the one landing closest is taken.
- A ResNet: every stage's width (`channels`), residual and downsample paths with them, and a deep
  stem's (`stem_width`); a ConvNeXt: every stage's (`dims`), its patchify stem with the first.
  One multiplier for all, found by bisection (the prunable count grows with it), widths rounded to
  whole channels.

The stem's input (the image) and the classifier's output (the classes) keep their sizes. timm's
basic ResNet stem (resnet18, resnet50) has a fixed 64-channel output whatever `stem_width` says:
it stays 64 wide, and the first block then projects it to its narrowed width with a 1x1
convolution (a downsample path the full model does not need), counted with the prunable weights.
The share is counted over the weights DST prunes in each model (`default_prunable`: for a CNN every
convolution and linear but the stem and the classifier, which RigL keeps dense too).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import torch

from dstbench.models.timm_models import create_model, default_prunable, family, is_vision_transformer, prunable_weights

SCALED_FAMILIES = ("VisionTransformer", "ResNet", "ConvNeXt")


@dataclasses.dataclass(frozen=True)
class ScaledWidths:
    """A narrowed model: its timm kwargs, the multiplier and the widths it sets, the prunable weights
    it holds and the full model's."""

    kwargs: dict[str, Any]
    multiplier: float
    widths: dict[str, Any]
    prunable: int
    full_prunable: int

    @property
    def density(self) -> float:
        return self.prunable / self.full_prunable


def prunable_numel(model: torch.nn.Module) -> int:
    """The weights DST prunes in `model` by default (`default_prunable`)."""
    return sum(p.numel() for p in prunable_weights(model, default_prunable(model)).values())


def scaled_problem(model: torch.nn.Module) -> str | None:
    """Why `model` (built on the meta device) cannot be narrowed here, or None."""
    if family(model) in SCALED_FAMILIES or is_vision_transformer(model):
        return None
    return f"layout scaled narrows a {', '.join(SCALED_FAMILIES[:-1])} or {SCALED_FAMILIES[-1]}, not a {family(model)}"


def scaled_widths(name: str, kwargs: Mapping[str, Any], density: float) -> ScaledWidths:
    """The narrowed model of `name` (timm, with the suite's `kwargs`) whose prunable weights come
    closest to `density` of the full model's (module docstring). ValueError for another family."""
    full = create_model(name, device="meta", **dict(kwargs))
    problem = scaled_problem(full)
    if problem:
        raise ValueError(problem)
    full_prunable = prunable_numel(full)
    if is_vision_transformer(full):
        return _vit(name, dict(kwargs), full, full_prunable, density)
    return _cnn(name, dict(kwargs), full, full_prunable, density)


def _vit(name: str, kwargs: dict[str, Any], full: Any, full_prunable: int, density: float) -> ScaledWidths:
    heads, embed = full.blocks[0].attn.num_heads, full.embed_dim
    head_dim, hidden = embed // heads, full.blocks[0].mlp.fc1.out_features
    budget = density * (4 * embed * embed + 2 * embed * hidden)  # per block: qkv, proj, fc1, fc2
    multiplier = math.sqrt(density)

    def fit(h: int) -> tuple[bool, float, float, int]:
        """(whether the FFN width had to be clamped, how far `h` is from m x heads, the count's miss, the FFN width)."""
        width = h * head_dim
        exact = (budget - 4 * width * width) / (2 * width)
        ffn = min(hidden, max(1, round(exact)))
        return not 1 <= exact <= hidden, abs(h - multiplier * heads), abs(4 * width * width + 2 * width * ffn - budget), ffn

    # The head count nearest m x heads whose FFN width can take up the rest of the budget.
    near = round(multiplier * heads)
    h = min({min(heads, max(1, h)) for h in (near - 1, near, near + 1)}, key=lambda h: fit(h)[:3])
    ffn = fit(h)[3]
    width = h * head_dim
    # timm sizes the FFN as int(embed_dim * mlp_ratio): half a channel over lands on `ffn` exactly.
    narrowed = {**kwargs, "embed_dim": width, "num_heads": h, "mlp_ratio": (ffn + 0.5) / width}
    model = create_model(name, device="meta", **narrowed)
    widths = {"embed_dim": width, "num_heads": h, "head_dim": head_dim, "mlp_hidden": ffn,
              "heads_share": h / heads, "mlp_share": ffn / hidden}
    return ScaledWidths(narrowed, multiplier, widths, prunable_numel(model), full_prunable)


def _cnn(name: str, kwargs: dict[str, Any], full: Any, full_prunable: int, density: float) -> ScaledWidths:
    stages = [int(info["num_chs"]) for info in full.feature_info if str(info.get("module", "")).startswith(("layer", "stages"))]
    if family(full) == "ResNet":
        expansion = int(getattr(type(full.layer1[0]), "expansion", 1))
        base: dict[str, Any] = {"channels": [c // expansion for c in stages]}
        if isinstance(full.conv1, torch.nn.Sequential):  # a deep stem: timm sizes it by stem_width
            base["stem_width"] = int(full.conv1[0].out_channels)
    else:  # ConvNeXt
        base = {"dims": stages}

    def narrowed(m: float) -> dict[str, Any]:
        return {key: [max(1, round(w * m)) for w in value] if isinstance(value, list) else max(1, round(value * m))
                for key, value in base.items()}

    counted: dict[str, int] = {}

    def held(m: float) -> int:
        widths = narrowed(m)
        key = repr(widths)  # many multipliers round to the same widths: build each model once
        if key not in counted:
            counted[key] = prunable_numel(create_model(name, device="meta", **{**kwargs, **widths}))
        return counted[key]

    target = density * full_prunable
    low, high = 0.0, 1.0  # held(m) grows with m: the smallest m holding at least the budget
    for _ in range(20):
        middle = (low + high) / 2
        low, high = (middle, high) if held(middle) < target else (low, middle)
    multiplier = min((low, high), key=lambda m: abs(held(m) - target)) if low > 0 else high
    widths = narrowed(multiplier)
    return ScaledWidths({**kwargs, **widths}, multiplier, widths, held(multiplier), full_prunable)
