"""CIFAR-10/100 from a small folder in torchvision's on-disk layout, built by the test."""

from __future__ import annotations

import datetime
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from dstbench.suite.schema_sections import DataConfig
from dstbench.data import cifar
from dstbench.inputs.loaders import build_datasets
from tests.data.fakes import write_cifar


def test_cifar10_reads_five_train_batches_and_the_test_batch(tmp_path: Path) -> None:
    splits = cifar.load_cifar(write_cifar(tmp_path, per_file=3), "cifar10")
    train_x, train_y = splits["train"]
    test_x, test_y = splits["test"]
    assert train_x.shape == (15, 32, 32, 3) and train_x.dtype == np.uint8
    assert test_x.shape == (3, 32, 32, 3)
    # Image 2 of data_batch_4 (file index 3) is coloured (3, 2, label): channel-major rows -> HWC.
    assert train_x[3 * 3 + 2, 5, 7].tolist() == [3, 2, (3 + 2) % 10]
    assert train_y.tolist()[:3] == [0, 1, 2] and train_y.dtype == np.int64
    assert test_y.tolist() == [5, 6, 7]  # test_batch is file index 5
    assert (test_x[:, 0, 0, 0] == 5).all()


def test_cifar100_uses_fine_labels(tmp_path: Path) -> None:
    splits = cifar.load_cifar(write_cifar(tmp_path, "cifar100", per_file=4, classes=100), "cifar100")
    assert splits["train"][0].shape == (4, 32, 32, 3)
    assert splits["train"][1].tolist() == [0, 1, 2, 3]  # fine labels, not the coarse ones (label // 5)
    assert splits["test"][1].tolist() == [1, 2, 3, 4]


def test_datasets_are_normalised_tensors_for_the_model(tmp_path: Path) -> None:
    root = write_cifar(tmp_path, per_file=2)
    data = DataConfig(name="cifar10", root=str(root), augment={"random_crop": False, "flip": False})
    datasets = build_datasets(data, (3, 32, 32))
    assert datasets.num_classes == 10 and len(datasets.train) == 10 and len(datasets.test) == 2
    image, label = datasets.test[0]
    assert image.shape == (3, 32, 32) and label == 5
    expected_red = (5 / 255 - 0.4914) / 0.2470  # the test image's red value, normalised
    assert torch.allclose(image[0], torch.full((32, 32), expected_red), atol=1e-5)
    # A model at another resolution gets resized images.
    assert build_datasets(data, (3, 16, 16)).train[0][0].shape == (3, 16, 16)


def test_files_that_are_not_cifar_batches_are_refused(tmp_path: Path) -> None:
    root = write_cifar(tmp_path, per_file=2)
    batch = root / "cifar-10-batches-py" / "data_batch_2"
    with open(batch, "wb") as handle:  # a pickle that references something other than numpy arrays
        pickle.dump({"data": datetime.date(2020, 1, 1), "labels": [0]}, handle, protocol=2)
    with pytest.raises(pickle.UnpicklingError, match="datetime"):
        cifar.load_cifar(root, "cifar10")
    with open(batch, "wb") as handle:
        pickle.dump({"data": np.zeros((2, 100), np.uint8), "labels": [0, 1]}, handle, protocol=2)
    with pytest.raises(ValueError, match="expected \\(N, 3072\\)"):
        cifar.load_cifar(root, "cifar10")


def test_download_only_when_asked_and_only_when_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Path] = []

    def fake_download(root: Path, name: str) -> None:  # never touch the network in a test
        calls.append(root)
        write_cifar(root, name, per_file=1)

    monkeypatch.setattr(cifar, "_download", fake_download)
    root = tmp_path / "new"
    with pytest.raises(FileNotFoundError, match="no such folder"):
        cifar.load_cifar(root, "cifar10", download=False)
    assert calls == []
    assert len(cifar.load_cifar(root, "cifar10", download=True)["train"][0]) == 5
    assert calls == [root]
    cifar.load_cifar(root, "cifar10", download=True)  # present now: no second download
    assert calls == [root]
