"""Any folder of class sub-folders (ImageNet, Tiny-ImageNet, your own), with fixed split folders:

    ROOT/train/<class>/<image>     training images, one sub-folder per class
    ROOT/val/<class>/<image>       test images, the same class names (a subset is allowed)

Class indices are the sorted training class names, and the test split uses the same mapping, so a
class missing from `val/` never shifts the others. Files are kept by extension; images are opened
with PIL and converted to RGB. (Tiny-ImageNet ships its validation images in one folder with an
annotations file: sort them into class sub-folders first.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch
from PIL import Image

TRAIN, TEST = "train", "val"
EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _is_image(name: str) -> bool:
    return name.lower().endswith(EXTENSIONS)


def class_names(split_dir: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(split_dir) if e.is_dir() and not e.name.startswith("."))


def _has_image(folder: Path) -> bool:
    # Stops at the first image, so validating an ImageNet-sized folder reads a few entries per class.
    subfolders = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_file() and _is_image(entry.name):
                return True
            if entry.is_dir():
                subfolders.append(entry.path)
    return any(_has_image(Path(sub)) for sub in subfolders)


def layout_problem(root: Path) -> str | None:
    """What is wrong with `root` as an image folder, or None. Looks at folder names and stops at the
    first image of each class, so it is quick enough to run when a suite is validated."""
    layout = f"expected {TRAIN}/<class>/<images> and {TEST}/<class>/<images>"
    if not root.is_dir():
        return f"{root}: no such folder"
    for split in (TRAIN, TEST):
        if not (root / split).is_dir():
            return f"{root}: no {split}/ folder inside ({layout})"
    train_classes = class_names(root / TRAIN)
    if not train_classes:
        return f"{root / TRAIN}: no class sub-folders ({layout})"
    empty = [c for c in train_classes if not _has_image(root / TRAIN / c)]
    if empty:
        return f"{root / TRAIN}: class folder(s) without images: {', '.join(empty[:5])}"
    test_classes = class_names(root / TEST)
    unknown = sorted(set(test_classes) - set(train_classes))
    if unknown:
        return f"{root / TEST}: classes not in {TRAIN}/: {', '.join(unknown[:5])}"
    if not any(_has_image(root / TEST / c) for c in test_classes):
        return f"{root / TEST}: no images ({layout})"
    return None


def list_samples(split_dir: Path, classes: list[str]) -> list[tuple[str, int]]:
    """(path, class index) for every image of `split_dir`, in a fixed (sorted) order."""
    samples = []
    for index, name in enumerate(classes):
        folder = split_dir / name
        if not folder.is_dir():
            continue
        for dirpath, dirnames, files in os.walk(folder):
            dirnames.sort()
            samples.extend((os.path.join(dirpath, f), index) for f in sorted(files) if _is_image(f))
    return samples


class FolderDataset(torch.utils.data.Dataset):
    """Images read from disk on demand (the DataLoader's workers do the decoding)."""

    def __init__(self, samples: list[tuple[str, int]], transform: Callable[[Image.Image], torch.Tensor]) -> None:
        self.samples = samples
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        with Image.open(path) as image:
            return self.transform(image.convert("RGB")), label


def load_imagefolder(root: str | Path) -> tuple[list[str], list[tuple[str, int]], list[tuple[str, int]]]:
    """Class names, training samples and test samples."""
    root = Path(root).expanduser()
    problem = layout_problem(root)
    if problem:
        raise FileNotFoundError(problem)
    classes = class_names(root / TRAIN)
    return classes, list_samples(root / TRAIN, classes), list_samples(root / TEST, classes)
