"""A teacher-student workload: inputs drawn fresh every epoch, labels from a fixed random function.

Why: on a small real set (digits, mnist5k) a dense ViT overfits, so sparse methods can match or pass
it and an accuracy run cannot rank methods. Here the data never repeat (each epoch draws new inputs)
and the labels are a fixed function of the inputs that a network needs capacity to imitate, so a
student's top-1 on the test split measures how much of the teacher it captured in its training
budget: what capacity and a good topology buy, the question DST papers ask on ImageNet.

- Inputs: standard normal tensors of the model's input shape (C, H, W).
- Teacher (`Teacher`): random sinusoids of each patch summed over the patches, drawn from
  `teacher_seed` alone, so every suite seed and every method learns the same function. Its logits
  are standardised per class over a calibration sample and then given biases that make the classes
  about equally frequent (a random function's argmax otherwise favours a few classes); the label is
  the argmax.
- Test split: `test_size` inputs drawn from `teacher_seed` too (the same inputs for every case).
- Training split: `train_size` inputs per epoch, drawn from the seed the loader gives each epoch (a
  function of the case's seed and the epoch), so a run is reproducible and a case resumed at an
  epoch boundary sees the batches of one that never stopped.

What it cannot show: anything about natural images (no spatial statistics, no augmentation, no
distribution shift between splits); the ranking it gives is of how methods use capacity on one
random function, which is one of the things that decide a real ranking, not all of them.
"""

from __future__ import annotations

import math

import numpy as np
import torch

CALIBRATION_SIZE = 16384
BALANCE_ROUNDS = 50
_TRAIN_STREAM, _TEST_STREAM, _CALIBRATION_STREAM, _WEIGHT_STREAM = 0, 1, 2, 3


def _generator(*entropy: int) -> torch.Generator:
    seed = int(np.random.SeedSequence(list(entropy)).generate_state(1, dtype=np.uint64)[0] >> 1)
    return torch.Generator().manual_seed(seed)


class Teacher:
    """A fixed random function labelling inputs of `shape` into `classes` classes (see the module doc).

    Each `patch` x `patch` patch x_p (all channels, flattened to d values) is mapped to `features`
    random sinusoids sin(frequency * w_j . x_p / sqrt(d) + b_j); class c's logit sums a_cj times
    them over j and over the patches. The same function applies to every patch (as a ViT's patch
    embedding and blocks do), so a ViT can represent it; the sinusoids leave it no linear part to
    learn cheaply, and `frequency` sets how many units imitating them takes.
    """

    def __init__(
        self, shape: tuple[int, int, int], classes: int, features: int, frequency: float, patch: int, seed: int
    ) -> None:
        channels, height, width = shape
        if classes < 2 or features < 1 or frequency <= 0:
            raise ValueError(f"a teacher needs 2 or more classes, features and a positive frequency ({classes}, {features}, {frequency})")
        if patch < 1 or height % patch or width % patch:
            raise ValueError(f"teacher patch {patch} does not divide the input's {height}x{width}")
        self.shape, self.classes, self.patch, self.seed = (channels, height, width), int(classes), int(patch), int(seed)
        generator = _generator(seed, _WEIGHT_STREAM)
        dims = channels * patch * patch
        self.projection = torch.randn(dims, features, generator=generator) * (frequency / dims**0.5)
        self.phase = torch.rand(features, generator=generator) * (2 * math.pi)
        self.readout = torch.randn(features, classes, generator=generator) / features**0.5
        self.shift = torch.zeros(classes)
        self.scale = torch.ones(classes)
        self.bias = torch.zeros(classes)
        calibration = torch.randn(CALIBRATION_SIZE, *shape, generator=_generator(seed, _CALIBRATION_STREAM))
        logits = self._raw_logits(calibration)
        self.shift, self.scale = logits.mean(0), logits.std(0).clamp_min(1e-12)
        standard = (logits - self.shift) / self.scale
        # Biases that equalise the class frequencies on the calibration sample, by damped steps on
        # log(frequency): a few dozen rounds bring every class within a few percent of 1/classes.
        for _ in range(BALANCE_ROUNDS):
            counts = torch.bincount((standard + self.bias).argmax(1), minlength=classes).double()
            self.bias -= 0.5 * torch.log((counts + 1.0) / (CALIBRATION_SIZE / classes)).float()

    def patches(self, inputs: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) -> (N, patches, C * patch * patch), patches in row-major order."""
        p = self.patch
        tiles = inputs.unfold(2, p, p).unfold(3, p, p)  # N, C, H/p, W/p, p, p
        return tiles.permute(0, 2, 3, 1, 4, 5).reshape(inputs.shape[0], -1, self.projection.shape[0])

    def _raw_logits(self, inputs: torch.Tensor) -> torch.Tensor:
        return (torch.sin(self.patches(inputs) @ self.projection + self.phase) @ self.readout).sum(1)

    @torch.no_grad()
    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        return (self._raw_logits(inputs) - self.shift) / self.scale + self.bias

    def labels(self, inputs: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
        return torch.cat([self.logits(part).argmax(1) for part in inputs.split(chunk)])


class TeacherDataset(torch.utils.data.Dataset):
    """`size` (input, label) pairs of `teacher`. A training split is drawn by `reseed(seed)` at each
    epoch's start (`dstbench.inputs.loaders.EpochLoader`); the test split once, from its own stream."""

    def __init__(self, teacher: Teacher, size: int, test: bool = False) -> None:
        if size < 1:
            raise ValueError(f"a teacher split needs at least one input, not {size}")
        self.teacher, self.size = teacher, int(size)
        self.seed: int | None = None
        if test:
            self._draw(_generator(teacher.seed, _TEST_STREAM))
        else:
            self.reseed(0)

    def reseed(self, seed: int) -> None:
        """Draw the split afresh from `seed` (with the teacher's seed: another teacher, other inputs)."""
        self.seed = int(seed)
        self._draw(_generator(self.teacher.seed, _TRAIN_STREAM, self.seed))

    def _draw(self, generator: torch.Generator) -> None:
        self.inputs = torch.randn(self.size, *self.teacher.shape, generator=generator)
        self.labels = self.teacher.labels(self.inputs)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.inputs[index], int(self.labels[index])


def teacher_splits(
    shape: tuple[int, int, int], classes: int, features: int, frequency: float, patch: int, teacher_seed: int,
    train_size: int, test_size: int,
) -> tuple[Teacher, TeacherDataset, TeacherDataset]:
    """The teacher, its training split (drawn again each epoch by the loader) and its fixed test split."""
    teacher = Teacher(shape, classes, features, frequency, patch, teacher_seed)
    return teacher, TeacherDataset(teacher, train_size), TeacherDataset(teacher, test_size, test=True)
