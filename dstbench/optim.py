"""Optimizers from a suite's spec, e.g. `{"name": "adamw", "lr": 1e-3, "weight_decay": 0.05}`."""

from __future__ import annotations

from typing import Any, Iterable

import torch

OPTIMIZERS = ("sgd", "adamw")


def param_groups(named_params: Iterable[tuple[str, torch.nn.Parameter]], weight_decay: float) -> list[dict]:
    """Two groups as timm builds them: weight decay on matrices, none on biases, norms and tokens."""
    decay, no_decay = [], []
    for _, param in named_params:
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(spec: dict[str, Any], model: torch.nn.Module) -> torch.optim.Optimizer:
    spec = dict(spec)
    name = spec.pop("name", "adamw")
    lr = float(spec.pop("lr", 1e-3))
    weight_decay = float(spec.pop("weight_decay", 0.0))
    groups = param_groups(model.named_parameters(), weight_decay)
    # `foreach=False`: the per-parameter loop keeps state tensors addressable one by one, which the
    # compact method's state remap relies on, and it is what every method here runs for fairness.
    if name == "sgd":
        return torch.optim.SGD(
            groups,
            lr=lr,
            momentum=float(spec.pop("momentum", 0.9)),
            nesterov=bool(spec.pop("nesterov", False)),
            foreach=spec.pop("foreach", None),
        )
    if name == "adamw":
        spec.pop("momentum", None)
        spec.pop("nesterov", None)
        return torch.optim.AdamW(
            groups,
            lr=lr,
            betas=tuple(spec.pop("betas", (0.9, 0.999))),
            eps=float(spec.pop("eps", 1e-8)),
            foreach=spec.pop("foreach", None),
        )
    raise ValueError(f"unknown optimizer {name!r} (allowed: {', '.join(OPTIMIZERS)})")
