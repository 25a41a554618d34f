"""Epoch-seeded loaders, augmentation, mixup and the loss, and real data for speed cases."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torchvision import transforms as T

from dstbench.suite.schema_sections import AugmentConfig

from dstbench.inputs.speed import speed_batches
from dstbench.data.catalog import CATALOG
from dstbench.inputs.loaders import ArrayDataset, EpochLoader
from dstbench.inputs.transforms import mixup_and_loss, train_transform
from dstbench.suite.loading import parse_suite
from tests.conftest import micro_suite, micro_vit

DIGITS_MODEL = {"img_size": 8, "patch_size": 4, "in_chans": 1}


def _numbered(count: int) -> ArrayDataset:
    """Image i is uniformly i and labelled i, so a batch's labels show the order."""
    images = np.repeat(np.arange(count, dtype=np.uint8), 16).reshape(count, 4, 4)
    return ArrayDataset(images, np.arange(count), T.PILToTensor())


def test_an_epoch_depends_on_seed_and_epoch_only() -> None:
    loader = EpochLoader(_numbered(50), 8, 0, seed=3)
    assert len(loader) == 6  # 50 // 8: only full batches
    first = [y for _, y in loader.epoch(2)]
    torch.manual_seed(123)  # the global RNG decides nothing about the order
    again = [y for _, y in loader.epoch(2)]
    other = [y for _, y in loader.epoch(3)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))
    assert all(len(y) == 8 for y in first) and len(set(torch.cat(first).tolist())) == 48
    assert [y.tolist() for _, y in EpochLoader(_numbered(50), 8, 0, seed=4).epoch(2)] != [y.tolist() for y in first]
    with pytest.raises(ValueError, match="larger than the training split"):
        EpochLoader(_numbered(50), 64, 0, seed=0)


def test_workers_give_the_same_epoch_as_the_main_process() -> None:
    # Without random transforms the data of an epoch is the same however it is loaded.
    in_process = [y for _, y in EpochLoader(_numbered(20), 5, 0, seed=1).epoch(1)]
    workers = [y for _, y in EpochLoader(_numbered(20), 5, 2, seed=1).epoch(1)]
    assert all(torch.equal(a, b) for a, b in zip(in_process, workers)) and len(workers) == 4


def test_randaugment_crop_and_flip_keep_the_shape() -> None:
    from PIL import Image

    augment = AugmentConfig(randaugment="rand-m9-mstd0.5", random_crop=True, flip=True)
    transform = train_transform(CATALOG["mnist5k"], 28, 1, augment)
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (28, 28), dtype=np.uint8))
    out = transform(image)
    assert out.shape == (1, 28, 28) and out.dtype == torch.float32


def test_mixup_gives_soft_targets_and_their_loss() -> None:
    mixup, loss_fn = mixup_and_loss(AugmentConfig(mixup=0.8, cutmix=1.0, label_smoothing=0.1), 10)
    inputs, targets = torch.randn(8, 3, 8, 8), torch.arange(8)
    mixed, soft = mixup(inputs, targets)
    assert soft.shape == (8, 10) and torch.allclose(soft.sum(1), torch.ones(8))
    assert loss_fn(torch.randn(8, 10), soft).ndim == 0


def test_label_smoothing_alone_is_a_cross_entropy_option() -> None:
    mixup, loss_fn = mixup_and_loss(AugmentConfig(label_smoothing=0.2), 10)
    logits, targets = torch.randn(4, 10), torch.tensor([1, 2, 3, 4])
    assert mixup is None
    assert torch.allclose(loss_fn(logits, targets), F.cross_entropy(logits, targets, label_smoothing=0.2))
    assert mixup_and_loss(AugmentConfig(), 10) == (None, F.cross_entropy)
    assert isinstance(mixup_and_loss(AugmentConfig(label_smoothing=0.2), 10)[1], functools.partial)


def test_speed_cases_on_a_real_dataset_use_a_prefetching_loader() -> None:
    suite = parse_suite(micro_suite(
        model={**micro_suite()["model"], **DIGITS_MODEL}, data={"name": "digits", "num_workers": 0}, batch_size=256
    ))
    model = micro_vit(**DIGITS_MODEL)
    batches, description = speed_batches(suite, model, torch.device("cpu"))
    assert "digits" in description and "DataLoader" in description
    # Endless: more batches than one epoch holds (1437 // 256 = 5).
    for _ in range(7):
        inputs, targets = next(batches)
    assert inputs.shape == (256, 1, 8, 8) and targets.shape == (256,)
    synthetic, how = speed_batches(parse_suite(micro_suite()), micro_vit(), torch.device("cpu"))
    assert how == "synthetic, device-resident"


def test_every_dataset_is_a_catalog_entry_and_its_loader() -> None:
    from dstbench.data.catalog import CATALOG
    from dstbench.inputs.loaders import dataset_loader, loaded_datasets
    from dstbench.suite.schema_sections import DATASETS

    assert DATASETS == tuple(CATALOG)
    assert set(CATALOG) - set(loaded_datasets()) == {"synthetic"}  # speed cases only
    with pytest.raises(ValueError, match="not in dstbench.data.catalog.CATALOG"):
        dataset_loader("nowhere")
