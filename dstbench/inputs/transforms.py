"""Training augmentation and evaluation preprocessing, per dataset, plus mixup/cutmix and the loss.

Images reach these transforms as 8-bit PIL images and stay in their own mode (grayscale "L" or
RGB) until the last step converts them to the model's channels: a grayscale source becomes RGB for
a 3-channel model. RandAugment is written for RGB, so with it the pipeline converts first (and
back to "L" for a 1-channel model, exact since a converted gray image has R = G = B). Images whose size differs from the model's
`img_size` are resized to it first (bicubic), e.g. digits' 8x8 onto a 32x32 model; a model built at
the native size (digits: `img_size: 8`) skips that and trains on the pixels as they are.

- small fixed-size sets (digits, mnist5k, CIFAR): random crop with zero padding of 1/8 of the side
  (4 pixels at 32x32, CIFAR's usual), horizontal flip;
- image folders: random-resized crop for training, resize to 1/0.875 of the side and a centre crop
  for evaluation (timm's ImageNet recipe);
- optional RandAugment (a timm spec such as `rand-m9-mstd0.5`) after the geometric ones;
- normalisation by the dataset's mean and std (repeated over channels for grayscale sources).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from PIL import Image
from torchvision import transforms as T

from dstbench.suite.schema_sections import AugmentConfig
from dstbench.data.catalog import DatasetInfo

Transform = Callable[..., torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _stats(info: DatasetInfo, channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if len(info.mean) == channels:
        return info.mean, info.std
    return info.mean * channels, info.std * channels  # grayscale source fed to an RGB model


def _tail(info: DatasetInfo, channels: int) -> list[Callable]:
    mean, std = _stats(info, channels)
    return [functools.partial(_to_mode, mode="L" if channels == 1 else "RGB"), T.ToTensor(), T.Normalize(mean, std)]


def train_transform(info: DatasetInfo, size: int, channels: int, augment: AugmentConfig) -> Transform:
    steps: list[Callable] = [functools.partial(_to_mode, mode="RGB")] if augment.randaugment else []
    if info.size is None:  # images of any size: crop a random region, or resize and centre-crop
        steps += [T.RandomResizedCrop(size)] if augment.random_crop else _eval_resize(size)
    else:
        if info.size != size:
            steps.append(T.Resize(size, interpolation=T.InterpolationMode.BICUBIC))
        if augment.random_crop:
            steps.append(T.RandomCrop(size, padding=max(1, size // 8)))
    if augment.flip:
        steps.append(T.RandomHorizontalFlip())
    if augment.randaugment:
        from timm.data import rand_augment_transform

        hparams = {
            "translate_const": int(size * 0.45),
            "img_mean": tuple(round(255 * m) for m in _stats(info, 3)[0]),
        }
        steps.append(rand_augment_transform(augment.randaugment, hparams))
    return T.Compose(steps + _tail(info, channels))


def _eval_resize(size: int) -> list[Callable]:
    return [T.Resize(int(round(size / 0.875)), interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(size)]


def eval_transform(info: DatasetInfo, size: int, channels: int) -> Transform:
    steps: list[Callable] = []
    if info.size is None:
        steps += _eval_resize(size)
    elif info.size != size:
        steps.append(T.Resize(size, interpolation=T.InterpolationMode.BICUBIC))
    return T.Compose(steps + _tail(info, channels))


def _to_mode(image: Image.Image, mode: str) -> Image.Image:
    return image if image.mode == mode else image.convert(mode)


def mixup_and_loss(augment: AugmentConfig, num_classes: int) -> tuple[Callable | None, LossFn]:
    """timm's Mixup (applied to device batches) with the soft-target loss it needs, or None and a
    cross-entropy with the configured label smoothing."""
    if augment.mixup > 0 or augment.cutmix > 0:
        from timm.data import Mixup
        from timm.loss import SoftTargetCrossEntropy

        mixup = Mixup(
            mixup_alpha=augment.mixup,
            cutmix_alpha=augment.cutmix,
            label_smoothing=augment.label_smoothing,
            num_classes=num_classes,
        )
        return mixup, SoftTargetCrossEntropy()
    if augment.label_smoothing > 0:
        return None, functools.partial(F.cross_entropy, label_smoothing=augment.label_smoothing)
    return None, F.cross_entropy
