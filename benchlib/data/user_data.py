"""A user's own data from Python: a ``Dataset`` or ``DataLoader`` handed to ``benchlib.benchmark(data=...)``.

It is registered for the process as ``python:NAME`` (that name is the run setting ``dataset``, so rows of
two data sets never mix), and the loaders are built from it as from any data set: benchlib's own seeded
shuffling, batch size and ``drop_last``, so a configuration's steps are comparable with every other's. Of a
``DataLoader`` the dataset is used (its batch size and workers become the defaults of the call); its sampler
and collate function are not. Without a test set, a seeded fifth of the data is held out for evaluation.
Samples must be ``(image tensor [3, H, H], integer label)``, as every built-in data set yields.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sized
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset

from ..errors import ConfigError, DataPathError, one_line
from ..spec.vocab import NAME_PATTERN, PYTHON_DATA_PREFIX
from .common import DatasetSplits, maybe_subset

TEST_SHARE = 0.2  # held out for evaluation when no test set is given
SAMPLE_FORM = "samples (image tensor [3, H, H], integer label), as torchvision data sets with ToTensor() yield"


@dataclass(frozen=True)
class UserData:
    """A registered data set: its splits, what was read from its first sample, and loader defaults."""

    train: Dataset[Any]
    test: Dataset[Any]
    image_size: int
    num_classes: int | None  # None: not told by the data (the model's output width decides)
    batch_size: int | None  # a DataLoader's, as the default of the call
    num_workers: int | None


_REGISTERED: dict[str, UserData] = {}


def _dataset_of(data: Any, what: str) -> tuple[Dataset[Any], int | None, int | None]:
    if isinstance(data, DataLoader):
        return data.dataset, data.batch_size, data.num_workers
    if isinstance(data, Dataset) or (hasattr(data, "__getitem__") and hasattr(data, "__len__")):
        return cast(Dataset[Any], data), None, None
    raise ConfigError(f"{what}: {type(data).__name__}; allowed: a data set name, a torch Dataset (map-style, "
                      "with __len__ and __getitem__) or a DataLoader over one")


def _length(data: Dataset[Any], what: str) -> int:
    n = len(cast(Sized, data))
    if n < 2:
        raise ConfigError(f"{what} has {n} samples; allowed: at least 2")
    return n


def _image_size(data: Dataset[Any], what: str) -> int:
    """The square side of the first sample's image, in one line where the sample is not what training takes."""
    try:
        sample = data[0]
    except Exception as exc:  # the user's __getitem__: anything may go wrong in it
        raise ConfigError(f"{what}: reading sample 0 failed: {one_line(exc)}") from exc
    ok = isinstance(sample, (tuple, list)) and len(sample) == 2 and isinstance(sample[0], torch.Tensor)
    image = sample[0] if ok else None
    if image is None or image.ndim != 3 or image.shape[0] != 3 or image.shape[1] != image.shape[2]:
        got = tuple(image.shape) if image is not None else type(sample).__name__
        raise ConfigError(f"{what}: sample 0 is {got}; allowed: {SAMPLE_FORM} (resize or crop to a square "
                          "in the data set's transform)")
    label = sample[1]
    if not (isinstance(label, int) or isinstance(label, torch.Tensor) and label.numel() == 1):
        raise ConfigError(f"{what}: the label of sample 0 is {type(label).__name__}; allowed: {SAMPLE_FORM}")
    return int(image.shape[1])


def classes_told(data: Dataset[Any]) -> int | None:
    """The class count a data set states (torchvision's ``classes``, else ``targets``), else None."""
    base = data.dataset if isinstance(data, Subset) else data
    if isinstance(getattr(base, "classes", None), (list, tuple)) and base.classes:  # type: ignore[attr-defined]
        return len(base.classes)  # type: ignore[attr-defined]
    targets = getattr(base, "targets", None)
    if targets is not None and len(targets):
        return int(np.max(np.asarray(targets))) + 1
    return None


def register_data(name: str, data: Any, test: Any = None, num_classes: int | None = None,
                  seed: int = 0) -> str:
    """Make ``data`` (and ``test``, else a seeded fifth of ``data``) loadable as ``python:name``; returns that."""
    if not NAME_PATTERN.match(name) or "__" in name:
        raise ConfigError(f"data: name {name!r}; allowed: letters, digits, '.', '_' and '-' without '__'")
    train, batch_size, workers = _dataset_of(data, "data")
    size = _image_size(train, "data")
    n = _length(train, "data")
    test_set: Dataset[Any]
    if test is None:
        held = np.random.default_rng(seed).permutation(n)
        cut = max(1, round(n * TEST_SHARE))
        train, test_set = Subset(train, sorted(held[cut:].tolist())), Subset(train, sorted(held[:cut].tolist()))
    else:
        test_set = _dataset_of(test, "test data")[0]
        _length(test_set, "test data")
        if (test_size := _image_size(test_set, "test data")) != size:
            raise ConfigError(f"test data: images of {test_size} px, the training data's are {size} px; allowed: "
                              "one image size")
    classes = num_classes or classes_told(train)
    _REGISTERED[name] = UserData(train, test_set, size, classes, batch_size, workers)
    return PYTHON_DATA_PREFIX + name


def set_classes(ref: str, num_classes: int) -> None:
    """Fix the class count of data that did not state it (the model's output width, read by the caller)."""
    entry = user_data(ref)
    _REGISTERED[ref.removeprefix(PYTHON_DATA_PREFIX)] = dataclasses.replace(entry, num_classes=num_classes)


def user_data(ref: str) -> UserData:
    """The data registered as ``ref`` (``python:NAME``), or one line saying it is not in this process."""
    entry = _REGISTERED.get(ref.removeprefix(PYTHON_DATA_PREFIX))
    if entry is None:
        raise DataPathError(f"data set '{ref}' is not registered in this process; allowed: a Dataset or DataLoader "
                            "passed as benchlib.benchmark(data=...) (a study's kernels are other processes: name a "
                            "data set there)")
    return entry


def load_user_data(ref: str, image_size: int, train_subset: int | None, test_subset: int | None,
                   seed: int) -> DatasetSplits:
    """The registered splits, with the run's seeded subsets; the run's image size must be the data's."""
    entry = user_data(ref)
    if image_size != entry.image_size:
        raise ConfigError(f"data set '{ref}' holds images of {entry.image_size} px; image_size is {image_size}; "
                          f"allowed: image_size {entry.image_size}")
    n_train, n_test = len(cast(Sized, entry.train)), len(cast(Sized, entry.test))
    train = maybe_subset(entry.train, n_train, train_subset, seed, f"data set '{ref}' (training)")
    test = maybe_subset(entry.test, n_test, test_subset, seed + 1, f"data set '{ref}' (test)")
    classes = user_classes(ref)
    return DatasetSplits(train, test, classes, [str(i) for i in range(classes)], ref)


def user_facts(ref: str) -> tuple[int, int, int]:
    """(training samples, test samples, classes) of registered data, read from it as it is now."""
    entry = user_data(ref)
    return len(cast(Sized, entry.train)), len(cast(Sized, entry.test)), user_classes(ref)


def user_classes(ref: str) -> int:
    classes = user_data(ref).num_classes
    if classes is None:
        raise ConfigError(f"data set '{ref}' does not say its class count; allowed: pass num_classes=...")
    return classes
