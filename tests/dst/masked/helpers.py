"""Helpers shared by the tests of the masked methods: a hand-built one-layer model, checks, and a
CPU stand-in for the 2:4 compression."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import dstbench
from dstbench.dst.optimizer import state_tensors as optimizer_state_tensors
from dstbench.dst.masked import semi_structured
from tests.conftest import micro_batches, micro_vit

MASKED_METHODS = ["set", "rigl", "mest", "chase"]
LAYER = "layer.weight"


class OneLayer(torch.nn.Module):
    """A single bias-free linear layer: every weight of it is prunable under `prunable=LAYER`."""

    def __init__(self, features: int = 8, classes: int = 8) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(features, classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def one_layer_method(name: str, density: float = 0.5, seed: int = 0, **params: Any) -> dstbench.Method:
    torch.manual_seed(0)
    params = {"prunable": r"layer\.weight", "distribution": "uniform", "delta_t": 10, **params}
    optimizer = {"name": "sgd", "lr": 0.1, "momentum": 0.9}
    return dstbench.create_method(name, OneLayer(), density=density, total_steps=100, optimizer=optimizer, seed=seed, **params)


def one_layer_batches(seed: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield torch.randn(16, 8, generator=generator), torch.randint(0, 8, (16,), generator=generator)


def micro_method(name: str, optimizer: dict, density: float = 0.2, total_steps: int = 12, seed: int = 0, **params: Any) -> dstbench.Method:
    params = {"delta_t": 3, "t_end": 11, **params}  # updates at steps 3, 6 and 9
    return dstbench.create_method(name, micro_vit(), density=density, total_steps=total_steps, optimizer=optimizer, seed=seed, **params)


def run_steps(method: dstbench.Method, steps: int, batches: Iterator | None = None) -> Iterator[tuple[int, dict[str, torch.Tensor], dict[str, torch.Tensor]]]:
    """Yield (step, masks before, masks after) for each of `steps` training steps."""
    batches = batches or micro_batches()
    for _ in range(steps):
        before = method.masks()
        method.train_segment(batches, 1)
        yield method.step, before, method.masks()


def state_tensors(method: dstbench.Method, weight: torch.Tensor) -> list[torch.Tensor]:
    return optimizer_state_tensors(method.optimizer, weight)


def assert_zero_where_masked(method: dstbench.Method, masks: dict[str, torch.Tensor]) -> None:
    weights = dict(method.model.named_parameters())
    for name, mask in masks.items():
        weight = weights[name]
        assert torch.all(weight[~mask] == 0), f"{name}: a masked weight is nonzero"
        for value in state_tensors(method, weight):
            assert torch.all(value[~mask] == 0), f"{name}: optimizer state is nonzero at a masked position"



def dense_2to4_stand_in(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """CPU only: semi_structured's compression becomes (W, W^T) uncompressed, so the layer's
    products are dense ones, and its device check passes. Returns the shapes compressed, in order."""
    compressed: list[tuple[int, ...]] = []

    def pair(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        compressed.append(tuple(weight.shape))
        return weight, weight.t()

    monkeypatch.setattr(semi_structured, "compress_pair", pair)
    monkeypatch.setattr(semi_structured, "check_device", lambda device, density, precision: None)
    return compressed
