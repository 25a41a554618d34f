"""Any timm model as dstbench builds and inspects it: the input it takes and the weights DST prunes.

A timm VisionTransformer keeps the ViT rules of `dstbench.models.vit` (its own input size; the
qkv, proj, fc1 and fc2 weights of every block). Any other model (ResNet, ConvNeXt, Swin, ...)
prunes every `Conv2d` and `Linear` weight but the stem (the first convolution) and the classifier,
as the RigL paper and code do; a suite's `model.prunable` (a regex over parameter names) replaces
either default, and a masked method's own `prunable` parameter replaces both.
"""

from __future__ import annotations

import re
from typing import Any

import timm
import torch
from timm.models.vision_transformer import VisionTransformer

from dstbench.models.vit import DEFAULT_PRUNABLE, vit_input_shape


def create_model(name: str, device: torch.device | str = "cpu", **kwargs: Any) -> torch.nn.Module:
    """`timm.create_model(name, **kwargs)` without pretrained downloads."""
    if kwargs.pop("pretrained", False):
        raise ValueError("pretrained downloads are not allowed; load weights with model.checkpoint")
    if not timm.is_model(name):
        raise ValueError(f"unknown timm model {name!r}")
    return timm.create_model(name, pretrained=False, device=device, **kwargs)


def create_vit(name: str, device: torch.device | str = "cpu", **kwargs: Any) -> VisionTransformer:
    """`create_model` that must give a timm VisionTransformer."""
    model = create_model(name, device=device, **kwargs)
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"{name!r} is a {type(model).__name__}, not a timm VisionTransformer")
    return model


def is_vision_transformer(model: torch.nn.Module) -> bool:
    """Whether `model` is a timm VisionTransformer (DeiT included): what the compact methods need."""
    return isinstance(model, VisionTransformer)


def family(model: torch.nn.Module) -> str:
    """The model's class, as errors name it: 'ResNet', 'ConvNeXt', 'VisionTransformer'."""
    return type(model).__name__


def input_shape(model: torch.nn.Module, input_size: tuple[int, int, int] | list[int] | None = None) -> tuple[int, int, int]:
    """(channels, height, width) of one input: `input_size` when given (the suite's
    `model.input_size`), else a ViT's own, else timm's pretrained config `input_size`."""
    if input_size is not None:
        channels, height, width = (int(v) for v in input_size)
        return channels, height, width
    if is_vision_transformer(model):
        return vit_input_shape(model)  # type: ignore[arg-type]
    config = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    size = config.get("input_size")
    if not size or len(size) != 3:
        raise ValueError(f"{family(model)} names no input size in its timm config; set model.input_size: [C, H, W]")
    channels = getattr(model, "in_chans", None) or size[0]
    return int(channels), int(size[1]), int(size[2])


def default_prunable(model: torch.nn.Module) -> str:
    """The regex of the weights DST prunes in `model` when nothing else is named (module docstring)."""
    if is_vision_transformer(model):
        return DEFAULT_PRUNABLE
    layers = [name for name, module in model.named_modules() if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear))]
    convolutions = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Conv2d)]
    classifier = model.get_classifier() if hasattr(model, "get_classifier") else None
    head = {name for name, module in model.named_modules() if classifier is not None and module is classifier}
    kept = [name for name in layers if name not in head and name not in convolutions[:1]]
    return "|".join(re.escape(f"{name}.weight") for name in kept) or r"(?!)"


def prunable_weights(model: torch.nn.Module, pattern: str | None = None) -> dict[str, torch.nn.Parameter]:
    """The parameters whose names `pattern` matches in full (default: `default_prunable`), by name."""
    regex = re.compile(default_prunable(model) if pattern is None else pattern)
    return {name: p for name, p in model.named_parameters() if regex.fullmatch(name)}
