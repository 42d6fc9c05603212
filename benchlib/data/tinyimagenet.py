"""Tiny-ImageNet-200: ``train/<wnid>/images``, and the labelled ``val`` split as the test split."""
from __future__ import annotations

import os

from torchvision import transforms

from ..errors import DataPathError
from .common import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    DatasetSplits,
    FileImageDataset,
    image_transforms,
    is_image_file,
    maybe_subset,
    read_text_lines,
)

LAYOUT = ("train/<wnid>/images/, val/images/ and val/val_annotations.txt in it or in its tiny-imagenet-200/ "
          "folder")
_TINY_FOLDER = "tiny-imagenet-200"
_TINY_SIDE_PX = 64


def find_root(path: str) -> str:
    """The data set folder: ``path`` itself or its ``tiny-imagenet-200/`` (how the official zip unpacks)."""
    for candidate in (path, os.path.join(path, _TINY_FOLDER)):
        if os.path.isdir(os.path.join(candidate, "train")) and os.path.isdir(os.path.join(candidate, "val", "images")):
            return candidate
    raise DataPathError(f"data path '{path}' is not a Tiny-ImageNet folder: expected {LAYOUT}")


def class_ids(root: str) -> list[str]:
    """Sorted class ids (their order defines labels), from ``wnids.txt`` or else the train folder names."""
    train_dir = os.path.join(root, "train")
    train_folders = {entry.name for entry in os.scandir(train_dir) if entry.is_dir()}
    wnids_path = os.path.join(root, "wnids.txt")
    wnids = sorted(set(read_text_lines(wnids_path))) if os.path.exists(wnids_path) else sorted(train_folders)
    if not wnids:
        raise DataPathError(f"data path '{train_dir}' has no class folders: expected train/<wnid>/images/")
    missing = [wnid for wnid in wnids if not os.path.isdir(os.path.join(train_dir, wnid, "images"))]
    if missing:
        raise DataPathError(f"data path '{train_dir}' lacks {len(missing)} class folder(s) listed in wnids.txt, "
                            f"e.g. '{missing[0]}': expected train/<wnid>/images/ for every wnid")
    return wnids


def val_annotations_file(root: str) -> str:
    annotations_path = os.path.join(root, "val", "val_annotations.txt")
    if not os.path.isfile(annotations_path):
        raise DataPathError(f"data path '{root}' has no val/val_annotations.txt: expected one line per val image "
                            "'<file>\\t<wnid>\\t<x>\\t<y>\\t<w>\\t<h>'")
    return annotations_path


def _tiny_class_names(root: str, wnids: list[str]) -> list[str]:
    """Human-readable names from ``words.txt`` where present; the wnid otherwise."""
    words_path = os.path.join(root, "words.txt")
    names: dict[str, str] = {}
    if os.path.exists(words_path):
        for line in read_text_lines(words_path):
            wnid, _, words = line.partition("\t")
            names[wnid.strip()] = words.strip()
    return [names.get(wnid) or wnid for wnid in wnids]


def _tiny_train_samples(root: str, wnids: list[str]) -> list[tuple[str, int]]:
    samples = []
    for label, wnid in enumerate(wnids):
        images_dir = os.path.join(root, "train", wnid, "images")
        samples += [(os.path.join(images_dir, file_name), label)
                    for file_name in sorted(os.listdir(images_dir)) if is_image_file(file_name)]
    if not samples:
        raise DataPathError(f"data path '{root}' has no train images: expected train/<wnid>/images/*.JPEG")
    return samples


def _tiny_val_samples(root: str, wnids: list[str]) -> list[tuple[str, int]]:
    """Val images labelled by ``val_annotations.txt`` (the flat ``val/images`` folder carries no labels)."""
    annotations_path = val_annotations_file(root)
    images_dir = os.path.join(root, "val", "images")
    present = set(os.listdir(images_dir))
    label_of = {wnid: label for label, wnid in enumerate(wnids)}
    samples = []
    for line_number, line in enumerate(read_text_lines(annotations_path), start=1):
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in label_of or fields[0] not in present:
            raise DataPathError(f"data path file '{annotations_path}' line {line_number} is invalid: expected "
                                "'<file in val/images>\\t<wnid from wnids.txt>\\t...'")
        samples.append((os.path.join(images_dir, fields[0]), label_of[fields[1]]))
    if not samples:
        raise DataPathError(f"data path file '{annotations_path}' is empty: expected one line per val image")
    return sorted(samples)


def load(
    path: str, image_size: int, train_subset: int | None, test_subset: int | None, seed: int, augment: bool,
    uint8: bool = False,
) -> DatasetSplits:
    """Tiny-ImageNet-200 with its labelled ``val`` split as the test split (its test split has no labels)."""
    root = find_root(path)
    wnids = class_ids(root)
    train_samples, test_samples = _tiny_train_samples(root, wnids), _tiny_val_samples(root, wnids)
    augmentation = [transforms.RandomHorizontalFlip()] if augment else []
    train_tf, test_tf = image_transforms(image_size, _TINY_SIDE_PX, IMAGENET_MEAN, IMAGENET_STD, augmentation, uint8)
    train = maybe_subset(FileImageDataset(train_samples, train_tf), len(train_samples), train_subset, seed,
                          f"data path '{path}' (Tiny-ImageNet train)")
    test = maybe_subset(FileImageDataset(test_samples, test_tf), len(test_samples), test_subset, seed,
                         f"data path '{path}' (Tiny-ImageNet val)")
    return DatasetSplits(train, test, len(wnids), _tiny_class_names(root, wnids), "tinyimagenet",
                         (IMAGENET_MEAN, IMAGENET_STD) if uint8 else None)
