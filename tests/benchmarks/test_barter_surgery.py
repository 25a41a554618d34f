"""BARTER's tensor surgery on the smoke suite's ViT: the resize of every block's heads and FFN
channels, and the optimizer-state remap that follows it.

The plan prunes a quarter of each block's units and clones another quarter, so the unit count,
and with it every round's work, stays the same from round to round.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dstbench.dst.compact.surgery import Swap, UnitAxis, remap_optimizer, resize_units
from dstbench.dst.optimizer import build_optimizer
from dstbench.measure.trackers.memory import unique_bytes
from tests.benchmarks.conftest import OPTIMIZER, pedantic, smoke_batch


def unit_groups(model: nn.Module) -> list[list[UnitAxis]]:
    """Per block: the axes of its attention heads, then those of its FFN channels."""
    groups = []
    for block in model.blocks:
        attn, mlp = block.attn, block.mlp
        head = UnitAxis(attn.qkv, "weight", 0, "in", groups=3, unit_size=attn.head_dim)
        heads = [head, UnitAxis(attn.proj, "weight", 1, "out", unit_size=attn.head_dim)]
        if attn.qkv.bias is not None:
            heads.append(UnitAxis(attn.qkv, "bias", 0, "in", groups=3, unit_size=attn.head_dim))
        channels = [UnitAxis(mlp.fc1, "weight", 0, "in"), UnitAxis(mlp.fc2, "weight", 1, "out")]
        if mlp.fc1.bias is not None:
            channels.append(UnitAxis(mlp.fc1, "bias", 0, "in"))
        groups += [heads, channels]
    return groups


def prune_and_clone(units: int) -> list[int]:
    """Drop units [0, k), keep the rest, clone units [k, 2k): the count stays `units`."""
    k = max(1, units // 4)
    return list(range(k, units)) + list(range(k, 2 * k))


def resize_all(groups: list[list[UnitAxis]]) -> list[Swap]:
    swaps = []
    for axes in groups:
        swaps += resize_units(axes, prune_and_clone(axes[0].units()))
    return swaps


def _trained(vit: nn.Module) -> torch.optim.Optimizer:
    """An AdamW with state for every parameter, as after a training step."""
    optimizer = build_optimizer(OPTIMIZER, vit)
    inputs, targets = smoke_batch(vit)
    nn.functional.cross_entropy(vit(inputs), targets).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return optimizer


def _state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return unique_bytes(v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor))


def test_barter_resize(benchmark: Any, vit: nn.Module) -> None:
    groups = unit_groups(vit)
    shapes = [tuple(p.shape) for p in vit.parameters()]
    benchmark.group = "barter surgery"
    benchmark.extra_info.update(
        tensors_resized=sum(len(axes) for axes in groups), units=sum(axes[0].units() for axes in groups),
        parameter_bytes=unique_bytes(vit.parameters()),
    )
    swaps = pedantic(benchmark, resize_all, args=(groups,))
    assert len(swaps) == benchmark.extra_info["tensors_resized"]
    assert [tuple(p.shape) for p in vit.parameters()] == shapes  # prune k + clone k: same sizes
    assert all(s.new is getattr(s.axis.module, s.axis.name) for s in swaps)


def test_barter_remap(benchmark: Any, vit: nn.Module) -> None:
    optimizer = _trained(vit)
    groups = unit_groups(vit)
    state_bytes = _state_bytes(optimizer)
    benchmark.group = "barter surgery"
    benchmark.extra_info.update(
        tensors_remapped=sum(len(axes) for axes in groups), optimizer_state_bytes=state_bytes,
        parameter_bytes=unique_bytes(vit.parameters()),
    )
    # Each round resizes (untimed) and then remaps the optimizer onto the new tensors (timed).
    pedantic(benchmark, remap_optimizer, setup=lambda: ((optimizer, resize_all(groups)), {}))
    params = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert params == {id(p) for p in vit.parameters()}  # the optimizer follows the live tensors
    assert set(map(id, optimizer.state)) == params and _state_bytes(optimizer) == state_bytes
