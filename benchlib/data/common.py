"""What every on-disk data set shares: the splits record, seeded subsets, transforms, file-backed images.

Everything here is picklable so DataLoader workers started with ``spawn`` or ``forkserver`` receive it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, Subset
from torchvision import transforms

from ..errors import DataPathError, one_line

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_IMAGE_EXTENSIONS: tuple[str, ...] = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class DatasetSplits:
    """A data set's train and test splits; each yields ``(float32 tensor [3,H,W], int label)``, or, where
    ``normalize`` holds the (mean, std) still to apply, ``(uint8 tensor [3,H,W], int label)``."""

    train: Dataset
    test: Dataset
    num_classes: int
    classes: list[str]
    name: str
    normalize: tuple[tuple[float, float, float], tuple[float, float, float]] | None = None


def subset_indices(total: int, wanted: int | None, seed: int, what: str) -> np.ndarray | None:
    """Sorted seeded random indices (None = keep all), so a seed always picks the same images."""
    if wanted is None:
        return None
    if wanted > total:
        raise DataPathError(f"{what} has {total} images but a subset of {wanted} was requested: "
                            f"expected a subset size of at most {total}")
    return np.sort(np.random.default_rng(seed).permutation(total)[:wanted])


def maybe_subset(dataset: Dataset, total: int, wanted: int | None, seed: int, what: str) -> Dataset:
    """Wrap in a seeded ``Subset`` when a subset size is given."""
    indices = subset_indices(total, wanted, seed, what)
    return dataset if indices is None else Subset(dataset, indices.tolist())


def _resize_steps(image_size: int, native_size_px: int | None) -> list[Any]:
    """A square resize, skipped when images already have the target size (resizing is lossy and slow)."""
    if native_size_px is not None and image_size == native_size_px:
        return []
    return [transforms.Resize((image_size, image_size))]


def image_transforms(
    image_size: int,
    native_size_px: int | None,
    mean: tuple[float, float, float],
    std: tuple[float, float, float],
    train_steps: Sequence[Any],
    uint8: bool = False,
) -> tuple[transforms.Compose, transforms.Compose]:
    """Train and test pipelines that differ only in the augmentation steps (picklable classes only); with
    ``uint8`` they stop at the image's bytes, to be copied as such and normalised on the device."""
    resize = _resize_steps(image_size, native_size_px)
    finish = [transforms.PILToTensor()] if uint8 else [transforms.ToTensor(), transforms.Normalize(mean, std)]
    return transforms.Compose([*resize, *train_steps, *finish]), transforms.Compose([*resize, *finish])


def is_image_file(file_name: str) -> bool:
    return file_name.lower().endswith(_IMAGE_EXTENSIONS) and not file_name.startswith(".")


def read_text_lines(file_path: str) -> list[str]:
    """Non-empty stripped lines; undecodable text is a layout problem the user can fix."""
    try:
        with open(file_path, encoding="utf-8") as handle:
            return [line.strip() for line in handle if line.strip()]
    except (OSError, UnicodeDecodeError) as error:
        raise DataPathError(f"data path file '{file_path}' is unreadable: expected UTF-8 text ({error})") from None


class FileImageDataset(Dataset):
    """Images listed by file path, decoded on access; a plain class so it pickles for spawned workers."""

    def __init__(self, samples: list[tuple[str, int]], transform: Callable[[Image.Image], torch.Tensor]):
        self.samples = samples
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        file_path, label = self.samples[index]
        return self.transform(open_rgb(file_path)), label


def open_rgb(file_path: str) -> Image.Image:
    """An image file as RGB (a few Tiny-ImageNet images are grayscale); a file that does not decode is named."""
    try:
        with Image.open(file_path) as image:
            return image.convert("RGB")
    except (OSError, ValueError, SyntaxError) as error:  # PIL's errors for truncated and foreign files
        raise DataPathError(f"image '{file_path}' cannot be read ({one_line(error)}); allowed: an "
                            "image file PIL decodes (remove or replace it)") from None

