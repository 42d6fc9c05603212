"""The embedded default data set: scikit-learn's 8x8 digits, upscaled, with a fixed stratified split.

Nothing is downloaded: the images ship inside scikit-learn.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import TensorDataset

from .common import DatasetSplits, subset_indices

NUM_CLASSES = 10
_DIGITS_MAX_VALUE = 16.0
_DIGITS_TEST_FRACTION = 0.2
_DIGITS_SPLIT_RANDOM_STATE = 0


class _DigitsDataset(TensorDataset):
    """Precomputed image/label tensors that yield an ``int`` label like the other data sets."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:  # type: ignore[override]
        images, labels = self.tensors
        return images[index], int(labels[index])


def _digits_images(pixels_8x8: np.ndarray, image_size: int) -> torch.Tensor:
    """Scale 0..16 to [0,1] and upscale bilinearly to one channel ``[N,1,S,S]``."""
    images = torch.from_numpy(pixels_8x8.astype(np.float32) / _DIGITS_MAX_VALUE).reshape(-1, 1, 8, 8)
    return torch.nn.functional.interpolate(images, size=(image_size, image_size), mode="bilinear", align_corners=False)


def load(image_size: int, train_subset: int | None, test_subset: int | None, seed: int) -> DatasetSplits:
    """sklearn digits with a split fixed independently of ``seed`` so every run tests on the same 360 images."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        bunch.data, bunch.target, test_size=_DIGITS_TEST_FRACTION, stratify=bunch.target,
        random_state=_DIGITS_SPLIT_RANDOM_STATE,
    )
    train_images, test_images = _digits_images(x_train, image_size), _digits_images(x_test, image_size)
    mean, std = train_images.mean(), train_images.std()
    splits = []
    for images, labels, wanted, what in (
        (train_images, y_train, train_subset, "digits train split"),
        (test_images, y_test, test_subset, "digits test split"),
    ):
        label_tensor = torch.as_tensor(labels, dtype=torch.int64)
        indices = subset_indices(len(label_tensor), wanted, seed, what)
        if indices is not None:
            keep = torch.from_numpy(indices)
            images, label_tensor = images[keep], label_tensor[keep]
        splits.append(_DigitsDataset(((images - mean) / std).repeat(1, 3, 1, 1), label_tensor))
    classes = [str(digit) for digit in range(NUM_CLASSES)]
    return DatasetSplits(splits[0], splits[1], NUM_CLASSES, classes, "digits")
