"""CIFAR-10 in torchvision's python format, read with a restricted unpickler (a data file never runs code)."""
from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms

from ..errors import DataPathError, one_line
from .common import DatasetSplits, image_transforms, subset_indices

LAYOUT = "data_batch_1..5 and test_batch (python version) in it or in its cifar-10-batches-py/ folder"
_CIFAR_FOLDER = "cifar-10-batches-py"
_CIFAR_TRAIN_BATCHES: tuple[str, ...] = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR_TEST_BATCH = "test_batch"
_CIFAR_META = "batches.meta"
_CIFAR_SIDE_PX = 32
_CIFAR_CROP_PADDING_PX = 4
_CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
_CIFAR_STD = (0.2470, 0.2435, 0.2616)
CLASSES: tuple[str, ...] = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)


def _cifar_numpy_globals() -> dict[tuple[str, str], Any]:
    """The only globals a CIFAR pickle needs: numpy's array rebuilders, under numpy 1 and numpy 2 names."""
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy < 2
        from numpy.core import multiarray, numeric  # type: ignore[no-redef]
    import _codecs

    allowed: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _codecs.encode,
    }
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(module, "_reconstruct")] = multiarray._reconstruct
        allowed[(module, "scalar")] = multiarray.scalar
    for module in ("numpy.core.numeric", "numpy._core.numeric"):
        allowed[(module, "_frombuffer")] = numeric._frombuffer  # type: ignore[attr-defined]
    for builtin in (list, dict, tuple, set, frozenset, bytes, bytearray, str, int, float, bool, complex):
        allowed[("builtins", builtin.__name__)] = builtin
    return allowed


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that can rebuild numpy arrays and plain containers but cannot call anything else."""

    def __init__(self, file: Any, file_path: str):
        super().__init__(file, encoding="latin1")
        self._file_path = file_path
        self._allowed = _cifar_numpy_globals()

    def find_class(self, module: str, name: str) -> Any:
        found = self._allowed.get((module, name))
        if found is None:
            raise DataPathError(
                f"data path file '{self._file_path}' is not a plain CIFAR-10 pickle: "
                f"refusing to unpickle global {module}.{name}"
            )
        return found


def _restricted_load(file_path: str) -> Any:
    """Unpickle a data file that may come from anywhere, without running arbitrary code."""
    try:
        with open(file_path, "rb") as handle:
            return _RestrictedUnpickler(handle, file_path).load()
    except DataPathError:
        raise
    except Exception as error:  # corrupt pickles raise many types; all mean "not a CIFAR file"
        raise DataPathError(
            f"data path file '{file_path}' is not a readable CIFAR-10 pickle: {one_line(error)}"
        ) from None


def _str_keys(mapping: Any, file_path: str) -> dict[str, Any]:
    """Python-2 pickles give str keys, Python-3 ones bytes keys; accept both."""
    if not isinstance(mapping, dict):
        raise DataPathError(f"data path file '{file_path}' is not a CIFAR-10 batch: expected a dict, got "
                            f"{type(mapping).__name__}")
    return {key.decode("latin1") if isinstance(key, bytes) else str(key): value for key, value in mapping.items()}


def find_root(path: str) -> str:
    """The folder holding the batches: ``path`` itself or its ``cifar-10-batches-py/``."""
    for candidate in (path, os.path.join(path, _CIFAR_FOLDER)):
        names = set(os.listdir(candidate)) if os.path.isdir(candidate) else set()
        if all(batch in names for batch in (*_CIFAR_TRAIN_BATCHES, _CIFAR_TEST_BATCH)):
            return candidate
    raise DataPathError(f"data path '{path}' has no CIFAR-10 batches: expected {LAYOUT}")


def _cifar_batch(file_path: str) -> tuple[np.ndarray, np.ndarray]:
    """One batch file as HWC uint8 images ``[N,32,32,3]`` and int64 labels ``[N]``."""
    batch = _str_keys(_restricted_load(file_path), file_path)
    data, labels = batch.get("data"), batch.get("labels")
    expected = "expected 'data' (uint8 array N x 3072) and 'labels' (N ints)"
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise DataPathError(f"data path file '{file_path}' is not a CIFAR-10 batch: {expected}")
    try:
        label_array = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError):
        label_array = None
    if label_array is None or label_array.shape != (data.shape[0],):
        raise DataPathError(f"data path file '{file_path}' is not a CIFAR-10 batch: {expected}")
    images = data.reshape(-1, 3, _CIFAR_SIDE_PX, _CIFAR_SIDE_PX).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), label_array


def _cifar_split(root: str, batch_names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    parts = [_cifar_batch(os.path.join(root, batch_name)) for batch_name in batch_names]
    return np.concatenate([images for images, _ in parts]), np.concatenate([labels for _, labels in parts])


def _cifar_classes(root: str) -> list[str]:
    """Class names from ``batches.meta``, or the standard names when the meta file is absent."""
    meta_path = os.path.join(root, _CIFAR_META)
    if not os.path.exists(meta_path):
        return list(CLASSES)
    names = _str_keys(_restricted_load(meta_path), meta_path).get("label_names")
    if not isinstance(names, (list, tuple)) or not names:
        raise DataPathError(f"data path file '{meta_path}' is not CIFAR-10 metadata: expected 'label_names'")
    return [name.decode("latin1") if isinstance(name, bytes) else str(name) for name in names]


class _ArrayImageDataset(Dataset):
    """In-memory HWC uint8 images turned into PIL on access so torchvision's PIL transforms apply."""

    def __init__(self, images_hwc: np.ndarray, labels: np.ndarray, transform: Callable[[Image.Image], torch.Tensor]):
        self.images_hwc = images_hwc
        self.labels = labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(Image.fromarray(self.images_hwc[index])), int(self.labels[index])


def _cifar_dataset(
    images: np.ndarray, labels: np.ndarray, wanted: int | None, seed: int, what: str, transform: transforms.Compose
) -> _ArrayImageDataset:
    """Subset by slicing the arrays (same indices as a ``Subset``) so workers are not sent all 50000 images."""
    indices = subset_indices(len(labels), wanted, seed, what)
    if indices is not None:
        images, labels = images[indices], labels[indices]
    return _ArrayImageDataset(images, labels, transform)


def load(
    path: str, image_size: int, train_subset: int | None, test_subset: int | None, seed: int, augment: bool,
    uint8: bool = False,
) -> DatasetSplits:
    """CIFAR-10 python batches read with a restricted unpickler (torchvision's md5 check is bypassed)."""
    root = find_root(path)
    classes = _cifar_classes(root)
    train_images, train_labels = _cifar_split(root, _CIFAR_TRAIN_BATCHES)
    test_images, test_labels = _cifar_split(root, (_CIFAR_TEST_BATCH,))
    for labels, batch_names in ((train_labels, "data_batch_1..5"), (test_labels, _CIFAR_TEST_BATCH)):
        if labels.size and (labels.min() < 0 or labels.max() >= len(classes)):
            raise DataPathError(f"data path '{root}' has CIFAR-10 labels outside 0..{len(classes) - 1} "
                                f"in {batch_names}: expected one label per class name in batches.meta")
    augmentation = [transforms.RandomCrop(image_size, padding=_CIFAR_CROP_PADDING_PX),
                    transforms.RandomHorizontalFlip()] if augment else []
    train_tf, test_tf = image_transforms(image_size, _CIFAR_SIDE_PX, _CIFAR_MEAN, _CIFAR_STD, augmentation,
                                       uint8)
    train = _cifar_dataset(train_images, train_labels, train_subset, seed, f"data path '{path}' (CIFAR-10 train)",
                           train_tf)
    test = _cifar_dataset(test_images, test_labels, test_subset, seed, f"data path '{path}' (CIFAR-10 test)",
                          test_tf)
    return DatasetSplits(train, test, len(classes), classes, "cifar10",
                         (_CIFAR_MEAN, _CIFAR_STD) if uint8 else None)
