"""Training data for a case: synthetic on the device for speed, real datasets for accuracy.

Modules: `catalog` (what each dataset is, validation checks), `packaged` (digits, mnist5k),
`cifar`, `imagefolder`, `transforms` (augmentation, mixup, loss), `loaders` (DataLoaders seeded
per epoch, device prefetch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import torch

from dstbench.data.synthetic import synthetic_batches
from dstbench.util.distributed import rank, rank_seed
from dstbench.models.timm_models import input_shape

if TYPE_CHECKING:  # dstbench.suite.schema imports dstbench.data.catalog while it validates
    from dstbench.suite.schema import SuiteConfig


def speed_batches(
    suite: SuiteConfig, model: torch.nn.Module, device: torch.device, seed: int | None = None
) -> tuple[Iterator[tuple[torch.Tensor, torch.Tensor]], str]:
    """Batches for the timed segments, and how they are loaded (the report says which).

    Synthetic data is made once on the device, so a speed case measures training alone. A real
    dataset comes through a DataLoader with `data.num_workers` persistent workers, copied ahead to
    the device; the timed segments then include any wait for data, which the `data` phase of a
    profile shows.

    `suite.batch_size` is per process: under torchrun each rank trains on batches of that size
    from its own shard (synthetic batches seeded per rank; a real dataset split across ranks).
    `seed`: the case's (one of the suite's `seeds`); default the suite's `seed`.
    """
    seed = suite.seed if seed is None else seed
    if suite.data.name == "synthetic":
        seed = rank_seed(seed, rank())
        return (
            synthetic_batches(suite.batch_size, input_shape(model, suite.model.input_size), model.num_classes, device, seed=seed),
            "synthetic, device-resident",
        )
    from dstbench.inputs.loaders import real_speed_batches

    return real_speed_batches(suite.data, input_shape(model, suite.model.input_size), suite.batch_size, seed, device)
