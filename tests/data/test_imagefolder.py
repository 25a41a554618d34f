"""Image folders: ROOT/train/<class>/ and ROOT/val/<class>/ with PNGs made by the test."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dstbench.suite.schema_sections import DataConfig
from dstbench.data import imagefolder
from dstbench.inputs.loaders import build_datasets
from tests.data.fakes import write_imagefolder


def test_classes_come_from_train_and_val_uses_the_same_indices(tmp_path: Path) -> None:
    root = write_imagefolder(tmp_path, train={"cat": 2, "dog": 3, "emu": 1}, val={"dog": 2})
    classes, train, test = imagefolder.load_imagefolder(root)
    assert classes == ["cat", "dog", "emu"]
    assert [label for _, label in train] == [0, 0, 1, 1, 1, 2]
    assert [label for _, label in test] == [1, 1]  # "dog" keeps index 1 although val has no "cat"


def test_datasets_decode_resize_and_normalise(tmp_path: Path) -> None:
    root = write_imagefolder(tmp_path, train={"a": 2, "b": 2}, val={"a": 1, "b": 1}, size=20)
    data = DataConfig(name="imagefolder", root=str(root))
    datasets = build_datasets(data, (3, 16, 16))
    assert datasets.num_classes == 2 and len(datasets.train) == 4 and len(datasets.test) == 2
    assert "2 classes" in datasets.description
    image, label = datasets.test[1]
    assert image.shape == (3, 16, 16) and label == 1
    # Class b's images are red 20 everywhere: after the centre crop still 20, then normalised.
    assert torch.allclose(image[0], torch.full((16, 16), (20 / 255 - 0.485) / 0.229), atol=1e-2)
    train_image, _ = datasets.train[0]  # random-resized crop + flip: the size is the model's
    assert train_image.shape == (3, 16, 16)


@pytest.mark.parametrize(
    "train, val, fragment",
    [
        ({}, {"a": 1}, "no class sub-folders"),
        ({"a": 1, "b": 0}, {"a": 1}, "without images: b"),
        ({"a": 1}, {"a": 1, "z": 1}, "classes not in train/: z"),
        ({"a": 1}, {"a": 0}, "val: no images"),
    ],
)
def test_layout_problems_are_named(tmp_path: Path, train: dict, val: dict, fragment: str) -> None:
    write_imagefolder(tmp_path, train, val)
    (tmp_path / "train").mkdir(exist_ok=True)
    (tmp_path / "val").mkdir(exist_ok=True)
    problem = imagefolder.layout_problem(tmp_path)
    assert problem is not None and fragment in problem
    with pytest.raises(FileNotFoundError, match=fragment.split(":")[0]):
        imagefolder.load_imagefolder(tmp_path)


def test_missing_split_folder_and_non_image_files(tmp_path: Path) -> None:
    (tmp_path / "train" / "a").mkdir(parents=True)
    (tmp_path / "train" / "a" / "notes.txt").write_text("not an image")
    assert "no val/ folder" in imagefolder.layout_problem(tmp_path)
    (tmp_path / "val" / "a").mkdir(parents=True)
    assert "without images: a" in imagefolder.layout_problem(tmp_path)

