"""timm Vision Transformers as dstbench builds and inspects them."""

from __future__ import annotations

import re
from typing import Any

import timm
import torch
from timm.models.vision_transformer import VisionTransformer

# The weights DST acts on; everything else (patch embedding, tokens, norms, biases, head) stays dense.
DEFAULT_PRUNABLE = r"blocks\.\d+\.(attn\.(qkv|proj)|mlp\.(fc1|fc2))\.weight"


def create_vit(name: str, device: torch.device | str = "cpu", **kwargs: Any) -> VisionTransformer:
    """`timm.create_model(name, **kwargs)` without pretrained downloads; must give a VisionTransformer."""
    if kwargs.pop("pretrained", False):
        raise ValueError("pretrained downloads are not allowed; load weights with model.checkpoint")
    if not timm.is_model(name):
        raise ValueError(f"unknown timm model {name!r}")
    model = timm.create_model(name, pretrained=False, device=device, **kwargs)
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"{name!r} is a {type(model).__name__}, not a timm VisionTransformer")
    return model


def prunable_weights(model: torch.nn.Module, pattern: str = DEFAULT_PRUNABLE) -> dict[str, torch.nn.Parameter]:
    regex = re.compile(pattern)
    return {name: p for name, p in model.named_parameters() if regex.fullmatch(name)}


def input_shape(model: VisionTransformer) -> tuple[int, int, int]:
    """(channels, height, width) the model's patch embedding expects."""
    embed = model.patch_embed
    height, width = embed.img_size
    return embed.proj.in_channels, height, width
