"""Any train/test tree of class folders (Kaggle's cats vs dogs, for one), resized to a square."""
from __future__ import annotations

import os
from collections.abc import Sequence

from torchvision import transforms
from torchvision.datasets import ImageFolder

from ..errors import DataPathError
from .common import IMAGENET_MEAN, IMAGENET_STD, DatasetSplits, image_transforms, maybe_subset, open_rgb

LAYOUT = ("a train split folder (train or training_set) and a test split folder (test, test_set, val or "
          "validation), each with one subfolder per class")
_TRAIN_SPLIT_NAMES: tuple[str, ...] = ("train", "training_set")
_TEST_SPLIT_NAMES: tuple[str, ...] = ("test", "test_set", "val", "validation")


def class_folders(split_dir: str) -> list[str]:
    """Sorted sub-folder names, the same rule ``torchvision.datasets.ImageFolder`` uses for classes."""
    return sorted(entry.name for entry in os.scandir(split_dir) if entry.is_dir())


def _unnest_split(split_dir: str) -> str:
    """Follow Kaggle's ``training_set/training_set/<class>`` nesting: one same-named folder inside."""
    folders = class_folders(split_dir)
    nested = os.path.join(split_dir, os.path.basename(os.path.normpath(split_dir)))
    if folders == [os.path.basename(os.path.normpath(split_dir))] and class_folders(nested):
        return nested
    return split_dir


def _find_split(path: str, names: Sequence[str], role: str) -> str:
    for split_name in names:
        candidate = os.path.join(path, split_name)
        if os.path.isdir(candidate):
            return _unnest_split(candidate)
    raise DataPathError(f"data path '{path}' has no {role} split folder: expected one of {', '.join(names)} "
                        "with one subfolder per class")


def split_dirs(path: str) -> tuple[str, str]:
    """The train and test split folders holding the class folders."""
    return _find_split(path, _TRAIN_SPLIT_NAMES, "train"), _find_split(path, _TEST_SPLIT_NAMES, "test")


def matching_class_folders(train_dir: str, test_dir: str) -> list[str]:
    """Both splits must name the same classes, or labels would silently mean different things."""
    train_classes, test_classes = class_folders(train_dir), class_folders(test_dir)
    if not train_classes:
        raise DataPathError(f"data path '{train_dir}' has no class folders: expected one subfolder per class")
    if train_classes != test_classes:
        only_train = sorted(set(train_classes) - set(test_classes))
        only_test = sorted(set(test_classes) - set(train_classes))
        raise DataPathError(f"data path '{test_dir}' has class folders {test_classes} but '{train_dir}' has "
                            f"{train_classes}: expected the same classes in both (only in train: {only_train}, "
                            f"only in test: {only_test})")
    return train_classes


def _image_folder(split_dir: str, transform: transforms.Compose) -> ImageFolder:
    try:
        return ImageFolder(split_dir, transform=transform, loader=open_rgb)
    except (FileNotFoundError, OSError) as error:  # e.g. a class folder without image files
        raise DataPathError(f"data path '{split_dir}' has a class folder without images: expected image files "
                            f"in every class folder ({error})") from None


def load(
    path: str, image_size: int, train_subset: int | None, test_subset: int | None, seed: int, augment: bool,
    uint8: bool = False,
) -> DatasetSplits:
    """Any ``train``/``test`` tree of class folders (e.g. Kaggle cats vs dogs), resized to a square."""
    train_dir, test_dir = split_dirs(path)
    classes = matching_class_folders(train_dir, test_dir)
    augmentation = [transforms.RandomHorizontalFlip()] if augment else []
    train_tf, test_tf = image_transforms(image_size, None, IMAGENET_MEAN, IMAGENET_STD, augmentation, uint8)
    train_folder, test_folder = _image_folder(train_dir, train_tf), _image_folder(test_dir, test_tf)
    train = maybe_subset(train_folder, len(train_folder), train_subset, seed, f"data path '{train_dir}'")
    test = maybe_subset(test_folder, len(test_folder), test_subset, seed, f"data path '{test_dir}'")
    return DatasetSplits(train, test, len(classes), classes, "imagefolder",
                         (IMAGENET_MEAN, IMAGENET_STD) if uint8 else None)
