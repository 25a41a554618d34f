"""Datasets and DataLoaders for a suite's `data` section, shaped for the model that trains on them.

Randomness is a function of (seed, epoch): each epoch's shuffle and the seeds of its DataLoader
workers come from a generator reseeded at the epoch's start, never from the global RNG. A case that
resumes at an epoch boundary therefore sees the same batches as one that never stopped, and how
often it is evaluated does not change what it trains on. (With `num_workers: 0` the random
transforms draw from the process's global RNGs, which the case checkpoints save and restore.)

Distributed (torchrun): every rank draws the same shuffled order of the training split and takes
every world_size-th image of it from its rank on (`ShardSampler`), so the ranks' i-th batches
together are one batch of world_size x batch_size images, as `DistributedSampler` splits; `batch_size`
is per rank. The test split is divided the same way, unshuffled, and the caller sums the counts.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from PIL import Image

from dstbench.suite.schema_sections import DataConfig
from dstbench.data.catalog import CATALOG, DatasetInfo
from dstbench.inputs.transforms import eval_transform, train_transform
from dstbench.util.distributed import rank, rank_seed, world_size

Batch = tuple[torch.Tensor, torch.Tensor]


class ArrayDataset(torch.utils.data.Dataset):
    """Images held in memory as uint8 arrays (N x H x W, or N x H x W x 3), transformed on access."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform: Callable[[Image.Image], torch.Tensor]) -> None:
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images = images
        self.labels = labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(Image.fromarray(self.images[index])), int(self.labels[index])


@dataclasses.dataclass
class Datasets:
    info: DatasetInfo
    num_classes: int
    train: torch.utils.data.Dataset
    test: torch.utils.data.Dataset
    description: str  # what the report says about the data


# A dataset's loader: its train and test splits from the suite's `data`, its catalog entry and the
# model's input shape (channels, side, side). Registered by dataset name (`dataset_loader`); a
# dataset is its catalog entry (`dstbench.data.catalog.CATALOG`) and its loader here.
SplitLoader = Callable[[DataConfig, DatasetInfo, tuple[int, int, int]], Datasets]
_LOADERS: dict[str, SplitLoader] = {}


def dataset_loader(*names: str) -> Callable[[SplitLoader], SplitLoader]:
    """Register a function as the loader of the catalog's datasets `names`."""
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise ValueError(f"dataset loader for {', '.join(unknown)}: not in dstbench.data.catalog.CATALOG")

    def register(loader: SplitLoader) -> SplitLoader:
        _LOADERS.update(dict.fromkeys(names, loader))
        return loader

    return register


def loaded_datasets() -> tuple[str, ...]:
    """The catalog's datasets that have train and test splits (a loader); the others feed speed cases only."""
    return tuple(name for name in CATALOG if name in _LOADERS)


def build_datasets(data: DataConfig, shape: tuple[int, int, int]) -> Datasets:
    """Train and test splits of `data`, transformed to `shape` = (channels, height, width)."""
    channels, height, width = shape
    if height != width:
        raise ValueError(f"the model expects {height}x{width} inputs; dstbench's datasets feed square images")
    loader = _LOADERS.get(data.name)
    if loader is None:
        raise ValueError(f"{data.name} has no train and test split")
    return loader(data, CATALOG[data.name], shape)


@dataset_loader("teacher")
def _teacher_splits(data: DataConfig, info: DatasetInfo, shape: tuple[int, int, int]) -> Datasets:
    from dstbench.data.teacher import teacher_splits

    t = data.teacher
    assert t is not None  # filled in by DataConfig's validation
    _, train, test = teacher_splits(shape, t.classes, t.features, t.frequency, t.patch, t.seed, t.train_size, t.test_size)
    return Datasets(
        info, t.classes, train, test,
        f"teacher ({t.features} random sinusoids of frequency {t.frequency:g} per {t.patch}x{t.patch} patch, seed "
        f"{t.seed}, {t.classes} classes; {t.train_size} new train inputs per epoch / {t.test_size} fixed test inputs)",
    )


@dataset_loader("imagefolder")
def _folder_splits(data: DataConfig, info: DatasetInfo, shape: tuple[int, int, int]) -> Datasets:
    from dstbench.data.imagefolder import FolderDataset, load_imagefolder

    channels, side, _ = shape
    classes, train, test = load_imagefolder(data.root)  # type: ignore[arg-type]
    return Datasets(
        info, len(classes), FolderDataset(train, train_transform(info, side, channels, data.augment)),
        FolderDataset(test, eval_transform(info, side, channels)),
        f"imagefolder {data.root} ({len(train)} train / {len(test)} val images, {len(classes)} classes)",
    )


@dataset_loader("digits", "mnist5k")
def _packaged_splits(data: DataConfig, info: DatasetInfo, shape: tuple[int, int, int]) -> Datasets:
    from dstbench.data import packaged

    splits = packaged.load_digits_splits() if data.name == "digits" else packaged.load_mnist5k_splits()
    return _array_datasets(data, info, shape, splits)


@dataset_loader("cifar10", "cifar100")
def _cifar_splits(data: DataConfig, info: DatasetInfo, shape: tuple[int, int, int]) -> Datasets:
    from dstbench.data.cifar import load_cifar

    return _array_datasets(data, info, shape, load_cifar(data.root, data.name, data.download))  # type: ignore[arg-type]


def _array_datasets(data: DataConfig, info: DatasetInfo, shape: tuple[int, int, int], splits: dict[str, Any]) -> Datasets:
    """Datasets of in-memory uint8 image arrays (`splits`: train and test, each images and labels)."""
    channels, side, _ = shape
    (train_x, train_y), (test_x, test_y) = splits["train"], splits["test"]
    classes = info.num_classes or int(max(train_y.max(), test_y.max())) + 1
    return Datasets(
        info, classes, ArrayDataset(train_x, train_y, train_transform(info, side, channels, data.augment)),
        ArrayDataset(test_x, test_y, eval_transform(info, side, channels)),
        f"{data.name} ({len(train_x)} train / {len(test_x)} test images)",
    )


def epoch_seed(seed: int, epoch: int) -> int:
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def this_shard(shard: tuple[int, int] | None) -> tuple[int, int]:
    """(rank, world_size): the given pair, or this process's (rank 0 of 1 outside torchrun)."""
    return shard if shard is not None else (rank(), world_size())


class ShardSampler(torch.utils.data.Sampler[int]):
    """One rank's share of a shuffled order of `size` indices: positions rank, rank + W, ... of a
    permutation drawn from `generator` (seed it alike on every rank), the tail that does not
    divide by W dropped, as `DistributedSampler(drop_last=True)` splits."""

    def __init__(self, size: int, rank_: int, world: int) -> None:
        if not 0 <= rank_ < world:
            raise ValueError(f"rank {rank_} outside a world of {world}")
        self.size, self.rank, self.world = int(size), int(rank_), int(world)
        self.generator = torch.Generator()

    def __len__(self) -> int:
        return self.size // self.world

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.size, generator=self.generator)
        return iter(order[self.rank : len(self) * self.world : self.world].tolist())


class EpochLoader:
    """A shuffled DataLoader whose order and worker seeds depend on (seed, epoch) alone.

    Batches are full (`drop_last`): every training step sees `batch_size` images, which keeps the
    steps comparable across methods and lets mixup pair images within a batch. `shard` = (rank,
    world_size) (default: this process's) reads one rank's share; a single process reads it all.
    """

    def __init__(
        self, dataset: torch.utils.data.Dataset, batch_size: int, num_workers: int, seed: int,
        pin_memory: bool = False, persistent: bool = False, shard: tuple[int, int] | None = None,
    ) -> None:
        self.rank, self.world = this_shard(shard)
        images = len(dataset) // self.world  # type: ignore[arg-type]
        if images < batch_size:
            where = "the training split" if self.world == 1 else (
                f"a rank's share of the training split (1/{self.world})"
            )
            raise ValueError(f"batch_size {batch_size} is larger than {where} ({images} images)")
        self.seed = seed
        self.generator = torch.Generator()
        # One process keeps the plain shuffled loader (its batches stay what they always were).
        size = len(dataset)  # type: ignore[arg-type]
        self.sampler = ShardSampler(size, self.rank, self.world) if self.world > 1 else None
        self.loader = torch.utils.data.DataLoader(
            dataset, batch_size=batch_size, shuffle=self.sampler is None, sampler=self.sampler, drop_last=True,
            num_workers=num_workers, generator=self.generator, pin_memory=pin_memory,
            persistent_workers=persistent and num_workers > 0,
            prefetch_factor=4 if num_workers > 0 else None,
        )

    def __len__(self) -> int:
        return len(self.loader)

    def epoch(self, epoch: int) -> Iterator[Batch]:
        reseed = getattr(self.loader.dataset, "reseed", None)
        if reseed is not None:  # a split drawn afresh every epoch (teacher): the same draw on every rank
            reseed(epoch_seed(self.seed, epoch))
        if self.sampler is None:
            self.generator.manual_seed(epoch_seed(self.seed, epoch))
        else:
            # The same order on every rank; the workers' random transforms differ per rank.
            self.sampler.generator.manual_seed(epoch_seed(self.seed, epoch))
            self.generator.manual_seed(epoch_seed(rank_seed(self.seed, self.rank), epoch))
        return iter(self.loader)


def eval_loader(
    dataset: torch.utils.data.Dataset, batch_size: int, num_workers: int, pin_memory: bool = False,
    shard: tuple[int, int] | None = None,
) -> torch.utils.data.DataLoader:
    """The test split in order; with several ranks, images rank, rank + W, ... (every image is
    evaluated once over all ranks, so the summed counts are the whole split's)."""
    rank_, world = this_shard(shard)
    if world > 1:
        dataset = torch.utils.data.Subset(dataset, range(rank_, len(dataset), world))  # type: ignore[arg-type]
    # Its own generator: iterating a DataLoader draws a worker seed, which must not come from the
    # global RNG that training depends on.
    return torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers, pin_memory=pin_memory,
        generator=torch.Generator().manual_seed(0),
    )


def to_device(batches: Iterable[Batch], device: torch.device) -> Iterator[Batch]:
    """Batches moved to `device`. On CUDA the copy of the next batch runs on a side stream while the
    current one trains, so a step waits for data only when the loader itself falls behind."""
    if device.type != "cuda":
        for inputs, targets in batches:
            yield inputs.to(device), targets.to(device)
        return
    copy_stream = torch.cuda.Stream(device)

    def start_copy(batch: Batch) -> Batch:
        with torch.cuda.stream(copy_stream):
            return tuple(t.to(device, non_blocking=True) for t in batch)  # type: ignore[return-value]

    iterator = iter(batches)
    pending = next(iterator, None)
    pending = start_copy(pending) if pending is not None else None
    while pending is not None:
        ready = pending
        upcoming = next(iterator, None)
        compute = torch.cuda.current_stream(device)
        compute.wait_stream(copy_stream)
        for tensor in ready:
            tensor.record_stream(compute)  # the allocator must not reuse it while compute reads it
        pending = start_copy(upcoming) if upcoming is not None else None
        yield ready


def forever(loader: EpochLoader) -> Iterator[Batch]:
    for epoch in itertools.count(1):
        yield from loader.epoch(epoch)


def describe_loader(num_workers: int, device: torch.device) -> str:
    workers = f"{num_workers} workers" if num_workers else "in-process"
    if device.type == "cuda":
        return f"DataLoader ({workers}, pinned), copied ahead to {device} on a side stream"
    return f"DataLoader ({workers}) on {device}"


def real_speed_batches(data: DataConfig, shape: tuple[int, int, int], batch_size: int, seed: int, device: torch.device) -> tuple[Iterator[Batch], str]:
    """An endless stream of training batches from a real dataset for the timed segments."""
    datasets = build_datasets(data, shape)
    loader = EpochLoader(
        datasets.train, batch_size, data.num_workers, seed, pin_memory=device.type == "cuda", persistent=True
    )
    description = f"{datasets.description}, {describe_loader(data.num_workers, device)}"
    return to_device(forever(loader), device), description
