"""CIFAR-10 and CIFAR-100 read from torchvision's on-disk layout under `root`.

    ROOT/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}
    ROOT/cifar-100-python/{train, test, meta}

Each file is a pickle of a dict with `data` (N x 3072 uint8, channel-major rows of 32x32 images) and
`labels` (CIFAR-10) or `fine_labels` (CIFAR-100). The pickles are read here rather than through
torchvision's dataset classes, which insist on the official MD5 sums (so a small folder a test builds
could not be read), and through an unpickler that only accepts numpy arrays and plain containers.
torchvision is used for one thing: downloading, when the suite says `download: true`.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

LAYOUT: dict[str, tuple[str, list[str], list[str], str]] = {
    # name: (folder, train files, test files, label key)
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], "labels"),
    "cifar100": ("cifar-100-python", ["train"], ["test"], "fine_labels"),
}

# What a CIFAR pickle may reference: numpy's array reconstruction (numpy 1 and 2 module paths), and
# `_codecs.encode`, which protocol-2 pickles written by Python 3 use to store bytes.
_ALLOWED_GLOBALS = {
    ("_codecs", "encode"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
}


class _ArraysOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"CIFAR file references {module}.{name}, which a CIFAR batch never does")
        return super().find_class(module, name)


def layout_problem(root: Path, name: str) -> str | None:
    """What is missing under `root` for CIFAR `name`, or None."""
    folder, train, test, _ = LAYOUT[name]
    if not root.is_dir():
        return f"{root}: no such folder"
    base = root / folder
    if not base.is_dir():
        return f"{root}: no {folder}/ inside (torchvision's layout: ROOT/{folder}/...)"
    missing = [f for f in train + test if not (base / f).is_file()]
    if missing:
        return f"{base}: missing {', '.join(missing)}"
    return None


def _read_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as handle:
        # The official files were written by Python 2: byte-string keys.
        entry = _ArraysOnly(handle, encoding="latin1").load()
    if not isinstance(entry, dict) or "data" not in entry or label_key not in entry:
        raise ValueError(f"{path}: not a CIFAR batch (expected keys 'data' and {label_key!r})")
    data = np.asarray(entry["data"], dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: data has shape {data.shape}, expected (N, 3072)")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # to N x H x W x C, as PIL wants
    return np.ascontiguousarray(images), np.asarray(entry[label_key], dtype=np.int64)


def _download(root: Path, name: str) -> None:
    import torchvision

    cls = torchvision.datasets.CIFAR10 if name == "cifar10" else torchvision.datasets.CIFAR100
    root.mkdir(parents=True, exist_ok=True)
    cls(str(root), train=True, download=True)


def load_cifar(root: str | Path, name: str, download: bool = False) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train": (images, labels), "test": (images, labels)}; images N x 32 x 32 x 3 uint8."""
    root = Path(root).expanduser()
    problem = layout_problem(root, name)
    if problem and download:
        from dstbench.util import distributed
        # the same archive; a node that does not share rank 0's disk then fetches its own copy.
        if distributed.rank() == 0:
            _download(root, name)
        distributed.barrier()
        if layout_problem(root, name) and distributed.local_rank() == 0:
            _download(root, name)
        distributed.barrier()
        problem = layout_problem(root, name)
    if problem:
        raise FileNotFoundError(problem)
    folder, train, test, label_key = LAYOUT[name]
    splits = {}
    for split, files in (("train", train), ("test", test)):
        parts = [_read_batch(root / folder / f, label_key) for f in files]
        splits[split] = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return splits
