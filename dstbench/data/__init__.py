"""Training data for a case: synthetic on the device for speed, real datasets for accuracy."""

from __future__ import annotations

from typing import Iterator

import torch

from dstbench.config import SuiteConfig
from dstbench.data.synthetic import synthetic_batches
from dstbench.vit import input_shape


def speed_batches(
    suite: SuiteConfig, model: torch.nn.Module, device: torch.device
) -> tuple[Iterator[tuple[torch.Tensor, torch.Tensor]], str]:
    """Batches for the timed segments, and how they are loaded (the report says which)."""
    return (
        synthetic_batches(suite.batch_size, input_shape(model), model.num_classes, device, seed=suite.seed),
        "synthetic, device-resident",
    )
