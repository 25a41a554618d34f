"""Synthetic batches kept on the device: speed cases measure training, never data loading."""

from __future__ import annotations

import itertools
from typing import Iterator

import torch


def synthetic_batches(
    batch_size: int,
    shape: tuple[int, int, int],
    num_classes: int,
    device: torch.device,
    seed: int = 0,
    distinct: int = 4,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Cycle forever through `distinct` random batches made once, on `device`."""
    generator = torch.Generator().manual_seed(seed)
    batches = [
        (
            torch.randn(batch_size, *shape, generator=generator).to(device),
            torch.randint(0, num_classes, (batch_size,), generator=generator).to(device),
        )
        for _ in range(distinct)
    ]
    return itertools.cycle(batches)
