"""Small on-disk datasets built by tests: CIFAR in torchvision's layout and a folder of PNGs."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from PIL import Image

from dstbench.data.cifar import LAYOUT


def cifar_row(red: int, green: int, blue: int) -> np.ndarray:
    """One image as a CIFAR file stores it: 1024 red, then 1024 green, then 1024 blue bytes."""
    return np.concatenate([np.full(1024, c, np.uint8) for c in (red, green, blue)])


def write_cifar(root: Path, name: str = "cifar10", per_file: int = 4, classes: int = 10, skip: tuple[str, ...] = ()) -> Path:
    """A CIFAR folder whose image i of file f has colour (f, i, label) and label (f + i) % classes."""
    folder, train, test, label_key = LAYOUT[name]
    base = root / folder
    base.mkdir(parents=True, exist_ok=True)
    for index, file in enumerate(train + test):
        if file in skip:
            continue
        labels = [(index + i) % classes for i in range(per_file)]
        data = np.stack([cifar_row(index, i, labels[i]) for i in range(per_file)])
        entry = {"batch_label": file, label_key: labels, "data": data, "filenames": [f"{file}_{i}.png" for i in range(per_file)]}
        if name == "cifar100":
            entry["coarse_labels"] = [label // 5 for label in labels]
        with open(base / file, "wb") as handle:
            pickle.dump(entry, handle, protocol=2)
    meta = "batches.meta" if name == "cifar10" else "meta"
    with open(base / meta, "wb") as handle:
        pickle.dump({"label_names": [f"class{i}" for i in range(classes)]}, handle, protocol=2)
    return root


def write_imagefolder(root: Path, train: dict[str, int], val: dict[str, int], size: int = 12) -> Path:
    """ROOT/train/<class>/*.png and ROOT/val/<class>/*.png; class k's images have red value 20 k."""
    names = sorted(set(train) | set(val))
    for split, counts in (("train", train), ("val", val)):
        for cls, count in counts.items():
            folder = root / split / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = np.zeros((size, size + i, 3), np.uint8)  # sizes differ: loaders must resize
                pixels[..., 0] = 20 * names.index(cls)
                Image.fromarray(pixels).save(folder / f"img{i}.png")
    return root
