"""Optimizers from a suite's spec, e.g. `{"name": "adamw", "lr": 1e-3, "weight_decay": 0.05}`, and
the one description of their element-wise state that the masked and compact methods both use."""

from __future__ import annotations

from typing import Any, Iterable

import torch

OPTIMIZERS = ("sgd", "adamw")

# The element-wise optimizer state of SGD and Adam/AdamW (amsgrad's running maximum included), each
# with the power of the gradient it accumulates: linear (momentum, first moment) or quadratic
# (second moments). The masked methods zero these where a weight is masked; the compact method's
# state remap scales an incoming tensor's entries by share ** power when it clones a unit.
STATE_POWERS: dict[str, int] = {"momentum_buffer": 1, "exp_avg": 1, "exp_avg_sq": 2, "max_exp_avg_sq": 2}
STATE_KEYS: tuple[str, ...] = tuple(STATE_POWERS)


def state_tensors(
    optimizer: torch.optim.Optimizer, param: torch.Tensor, keys: Iterable[str] = STATE_KEYS
) -> list[torch.Tensor]:
    """The element-wise state tensors `optimizer` holds for `param` (those of its shape), of `keys`."""
    state = optimizer.state.get(param)  # .get: never create entries in the defaultdict
    if not state:
        return []
    values = (state.get(key) for key in keys)
    return [v for v in values if isinstance(v, torch.Tensor) and v.shape == param.shape]


@torch.no_grad()
def zero_state(
    optimizer: torch.optim.Optimizer, param: torch.Tensor, where: torch.Tensor, keys: Iterable[str] = STATE_KEYS
) -> None:
    """Zero `param`'s element-wise optimizer state (of `keys`: all of it by default) at the
    positions where `where` (bool, broadcast to the param's shape) is True."""
    for value in state_tensors(optimizer, param, keys):
        value.masked_fill_(where, 0.0)


def param_groups(
    named_params: Iterable[tuple[str, torch.nn.Parameter]], weight_decay: float, skip: Iterable[str] = ()
) -> list[dict]:
    """Two groups as timm builds them: weight decay on matrices, none on biases, norms and the
    parameters named in `skip` (a timm model's `no_weight_decay()`: position embedding, tokens)."""
    skip = set(skip)
    decay, no_decay = [], []
    for name, param in named_params:
        if param.requires_grad:
            (decay if param.ndim >= 2 and name not in skip else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(spec: dict[str, Any], model: torch.nn.Module) -> torch.optim.Optimizer:
    spec = dict(spec)
    name = spec.pop("name", "adamw")
    lr = float(spec.pop("lr", 1e-3))
    weight_decay = float(spec.pop("weight_decay", 0.0))
    no_weight_decay = getattr(model, "no_weight_decay", None)
    groups = param_groups(model.named_parameters(), weight_decay, no_weight_decay() if callable(no_weight_decay) else ())
    # `foreach`: None (the default) lets torch choose, as a researcher's script would: the
    # multi-tensor kernels on CUDA, the per-parameter loop on the CPU. Every method gets the same
    # choice. The state stays one dict of tensors per parameter either way, which is all the compact
    # method's state remap needs. (`build_optimizer` accepts `foreach` to force either, for tests.)
    foreach = spec.pop("foreach", None)
    if name == "sgd":
        return torch.optim.SGD(
            groups,
            lr=lr,
            momentum=float(spec.pop("momentum", 0.9)),
            nesterov=bool(spec.pop("nesterov", False)),
            foreach=foreach,
        )
    if name == "adamw":
        spec.pop("momentum", None)
        spec.pop("nesterov", None)
        return torch.optim.AdamW(
            groups,
            lr=lr,
            betas=tuple(spec.pop("betas", (0.9, 0.999))),
            eps=float(spec.pop("eps", 1e-8)),
            foreach=foreach,
        )
    raise ValueError(f"unknown optimizer {name!r} (allowed: {', '.join(OPTIMIZERS)})")
