"""Data sets benchlib trains and evaluates on, read from their usual on-disk formats without downloading.

Why this module exists: benchmarks must run offline and reproducibly, so every data set is either embedded
(``digits``), read from a folder the user already has, or handed over from Python (:mod:`.user_data`), with
layout problems reported as one-line ``DataPathError`` messages before any training starts. One module per
format does the reading (:mod:`.digits`, :mod:`.cifar`, :mod:`.tinyimagenet`, :mod:`.imagefolder`); this
one dispatches by name.
"""
from __future__ import annotations

import os

from ..errors import DataPathError
from ..spec.vocab import DATA_FORMS, DATASETS, DATASETS_NEEDING_PATH, is_python_data
from . import cifar, digits, imagefolder, tinyimagenet, user_data
from .common import DatasetSplits

LAYOUTS: dict[str, str] = {"cifar10": cifar.LAYOUT, "tinyimagenet": tinyimagenet.LAYOUT,
                           "imagefolder": imagefolder.LAYOUT}

__all__ = ["DATASETS", "DATASETS_NEEDING_PATH", "DatasetSplits", "check_data_path", "load_dataset", "num_classes_of"]


def _check_name(name: str) -> None:
    """Reject unknown names here so each caller need not repeat the allowed list."""
    if name not in DATASETS and not is_python_data(name):
        raise ValueError(f"unknown data set '{name}': expected {DATA_FORMS}")


def num_classes_of(name: str, path: str | None) -> int:
    """Number of classes without decoding images, so models can be built before data is loaded."""
    _check_name(name)
    if name == "synthetic":
        raise ValueError("the 'synthetic' data set has no fixed number of classes: the caller chooses it")
    if is_python_data(name):
        return user_data.user_classes(name)
    if name == "digits":
        return digits.NUM_CLASSES
    if name == "cifar10":
        return len(cifar.CLASSES)
    check_data_path(name, path)
    assert path is not None
    if name == "tinyimagenet":
        return len(tinyimagenet.class_ids(tinyimagenet.find_root(path)))
    train_dir, _ = imagefolder.split_dirs(path)
    return len(imagefolder.class_folders(train_dir))


def check_data_path(name: str, path: str | None) -> None:
    """Fail fast, with a fixable one-line message, before any slow loading; only lists folders."""
    _check_name(name)
    if is_python_data(name):
        user_data.user_data(name)
        return
    if name not in DATASETS_NEEDING_PATH:
        return
    if path is None or str(path) == "":
        raise DataPathError(f"data set '{name}' needs a data path but none was given: expected {LAYOUTS[name]}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataPathError(f"data path '{path}' does not exist: expected {LAYOUTS[name]}")
    if not os.path.isdir(path):
        raise DataPathError(f"data path '{path}' is not a folder: expected {LAYOUTS[name]}")
    if name == "cifar10":
        cifar.find_root(path)
    elif name == "tinyimagenet":
        root = tinyimagenet.find_root(path)
        tinyimagenet.class_ids(root)
        tinyimagenet.val_annotations_file(root)
    else:
        train_dir, test_dir = imagefolder.split_dirs(path)
        imagefolder.matching_class_folders(train_dir, test_dir)


def load_dataset(name: str, path: str | None, image_size: int, *, train_subset: int | None = None,
                 test_subset: int | None = None, seed: int = 0, augment: bool = True,
                 uint8: bool = False) -> DatasetSplits:
    """Build train/test datasets at ``image_size`` pixels square; subsets are seeded so runs are comparable.

    ``uint8``: image files (CIFAR-10, Tiny-ImageNet, an image folder) yield their bytes, with the mean and std
    left to the device (``DatasetSplits.normalize``); the embedded digits and a user's data set ignore it."""
    _check_name(name)
    if name == "synthetic":
        raise ValueError("load_dataset does not build the 'synthetic' data set: the caller generates it")
    if image_size <= 0:
        raise ValueError(f"image_size must be a positive number of pixels, got {image_size}")
    for label, size in (("train_subset", train_subset), ("test_subset", test_subset)):
        if size is not None and size <= 0:
            raise ValueError(f"{label} must be a positive number of images, got {size}")
    check_data_path(name, path)
    if is_python_data(name):
        return user_data.load_user_data(name, image_size, train_subset, test_subset, seed)
    if name == "digits":
        return digits.load(image_size, train_subset, test_subset, seed)
    assert path is not None
    path = os.fspath(path)
    if name == "cifar10":
        return cifar.load(path, image_size, train_subset, test_subset, seed, augment, uint8)
    if name == "tinyimagenet":
        return tinyimagenet.load(path, image_size, train_subset, test_subset, seed, augment, uint8)
    return imagefolder.load(path, image_size, train_subset, test_subset, seed, augment, uint8)
