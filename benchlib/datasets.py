"""Data sets benchlib trains and evaluates on, read from their usual on-disk formats without downloading.

Why this module exists: benchmarks must run offline and reproducibly, so every data set is either embedded
(``digits``) or read from a folder the user already has, with layout problems reported as one-line
``DataPathError`` messages before any training starts. Everything returned here is picklable so DataLoader
workers started with ``spawn`` or ``forkserver`` receive it intact.
"""
from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, Subset, TensorDataset
from torchvision import transforms
from torchvision.datasets import ImageFolder

from benchlib.errors import DataPathError

DATASETS: tuple[str, ...] = ("digits", "synthetic", "cifar10", "tinyimagenet", "imagefolder")
DATASETS_NEEDING_PATH: tuple[str, ...] = ("cifar10", "tinyimagenet", "imagefolder")

_DIGITS_NUM_CLASSES = 10
_DIGITS_MAX_VALUE = 16.0
_DIGITS_TEST_FRACTION = 0.2
_DIGITS_SPLIT_RANDOM_STATE = 0

_CIFAR_FOLDER = "cifar-10-batches-py"
_CIFAR_TRAIN_BATCHES: tuple[str, ...] = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR_TEST_BATCH = "test_batch"
_CIFAR_META = "batches.meta"
_CIFAR_SIDE_PX = 32
_CIFAR_CROP_PADDING_PX = 4
_CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
_CIFAR_STD = (0.2470, 0.2435, 0.2616)
_CIFAR_CLASSES: tuple[str, ...] = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)

_TINY_FOLDER = "tiny-imagenet-200"
_TINY_SIDE_PX = 64
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)
_IMAGE_EXTENSIONS: tuple[str, ...] = (".jpeg", ".jpg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")

_TRAIN_SPLIT_NAMES: tuple[str, ...] = ("train", "training_set")
_TEST_SPLIT_NAMES: tuple[str, ...] = ("test", "test_set", "val", "validation")


@dataclass(frozen=True)
class DatasetSplits:
    """A data set's train and test splits; each yields ``(float32 tensor [3,H,W], int label)``."""

    train: Dataset
    test: Dataset
    num_classes: int
    classes: list[str]
    name: str


# ----------------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------------


def num_classes_of(name: str, path: str | None) -> int:
    """Number of classes without decoding images, so models can be built before data is loaded."""
    _check_name(name)
    if name == "synthetic":
        raise ValueError("the 'synthetic' data set has no fixed number of classes: the caller chooses it")
    if name in ("digits", "cifar10"):
        return _DIGITS_NUM_CLASSES if name == "digits" else len(_CIFAR_CLASSES)
    check_data_path(name, path)
    assert path is not None
    if name == "tinyimagenet":
        return len(_tiny_wnids(_tiny_root(path)))
    train_dir, _ = _imagefolder_split_dirs(path)
    return len(_class_folders(train_dir))


def check_data_path(name: str, path: str | None) -> None:
    """Fail fast, with a fixable one-line message, before any slow loading; only lists folders."""
    _check_name(name)
    if name not in DATASETS_NEEDING_PATH:
        return
    if path is None or str(path) == "":
        raise DataPathError(f"data set '{name}' needs a data path but none was given: expected {_LAYOUTS[name]}")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise DataPathError(f"data path '{path}' does not exist: expected {_LAYOUTS[name]}")
    if not os.path.isdir(path):
        raise DataPathError(f"data path '{path}' is not a folder: expected {_LAYOUTS[name]}")
    if name == "cifar10":
        _cifar_root(path)
    elif name == "tinyimagenet":
        root = _tiny_root(path)
        _tiny_wnids(root)
        _tiny_val_annotations_file(root)
    else:
        train_dir, test_dir = _imagefolder_split_dirs(path)
        _matching_class_folders(train_dir, test_dir)


def load_dataset(
    name: str,
    path: str | None,
    image_size: int,
    *,
    train_subset: int | None = None,
    test_subset: int | None = None,
    seed: int = 0,
    augment: bool = True,
) -> DatasetSplits:
    """Build train/test datasets at ``image_size`` pixels square; subsets are seeded so runs are comparable."""
    _check_name(name)
    if name == "synthetic":
        raise ValueError("load_dataset does not build the 'synthetic' data set: the caller generates it")
    if image_size <= 0:
        raise ValueError(f"image_size must be a positive number of pixels, got {image_size}")
    for label, size in (("train_subset", train_subset), ("test_subset", test_subset)):
        if size is not None and size <= 0:
            raise ValueError(f"{label} must be a positive number of images, got {size}")
    check_data_path(name, path)
    if name == "digits":
        return _load_digits(image_size, train_subset, test_subset, seed)
    assert path is not None
    path = os.fspath(path)
    if name == "cifar10":
        return _load_cifar10(path, image_size, train_subset, test_subset, seed, augment)
    if name == "tinyimagenet":
        return _load_tinyimagenet(path, image_size, train_subset, test_subset, seed, augment)
    return _load_imagefolder(path, image_size, train_subset, test_subset, seed, augment)


# ----------------------------------------------------------------------------------------------------------
# Shared helpers
# ----------------------------------------------------------------------------------------------------------

_LAYOUTS: dict[str, str] = {
    "cifar10": "data_batch_1..5 and test_batch (python version) in it or in its cifar-10-batches-py/ folder",
    "tinyimagenet": "train/<wnid>/images/, val/images/ and val/val_annotations.txt in it or in its "
    "tiny-imagenet-200/ folder",
    "imagefolder": "a train split folder (train or training_set) and a test split folder "
    "(test, test_set, val or validation), each with one subfolder per class",
}


def _check_name(name: str) -> None:
    """Reject unknown names here so each caller need not repeat the allowed list."""
    if name not in DATASETS:
        raise ValueError(f"unknown data set '{name}': expected one of {', '.join(DATASETS)}")


def _subset_indices(total: int, wanted: int | None, seed: int, what: str) -> np.ndarray | None:
    """Sorted seeded random indices (None = keep all), so a seed always picks the same images."""
    if wanted is None:
        return None
    if wanted > total:
        raise DataPathError(f"{what} has {total} images but a subset of {wanted} was requested: "
                            f"expected a subset size of at most {total}")
    return np.sort(np.random.default_rng(seed).permutation(total)[:wanted])


def _maybe_subset(dataset: Dataset, total: int, wanted: int | None, seed: int, what: str) -> Dataset:
    """Wrap in a seeded ``Subset`` when a subset size is given."""
    indices = _subset_indices(total, wanted, seed, what)
    return dataset if indices is None else Subset(dataset, indices.tolist())


def _resize_steps(image_size: int, native_size_px: int | None) -> list[Any]:
    """A square resize, skipped when images already have the target size (resizing is lossy and slow)."""
    if native_size_px is not None and image_size == native_size_px:
        return []
    return [transforms.Resize((image_size, image_size))]


def _image_transforms(
    image_size: int,
    native_size_px: int | None,
    mean: tuple[float, float, float],
    std: tuple[float, float, float],
    train_steps: Sequence[Any],
) -> tuple[transforms.Compose, transforms.Compose]:
    """Train and test pipelines that differ only in the augmentation steps (picklable classes only)."""
    resize = _resize_steps(image_size, native_size_px)
    finish = [transforms.ToTensor(), transforms.Normalize(mean, std)]
    return transforms.Compose([*resize, *train_steps, *finish]), transforms.Compose([*resize, *finish])


def _is_image_file(file_name: str) -> bool:
    return file_name.lower().endswith(_IMAGE_EXTENSIONS) and not file_name.startswith(".")


def _read_text_lines(file_path: str) -> list[str]:
    """Non-empty stripped lines; undecodable text is a layout problem the user can fix."""
    try:
        with open(file_path, encoding="utf-8") as handle:
            return [line.strip() for line in handle if line.strip()]
    except (OSError, UnicodeDecodeError) as error:
        raise DataPathError(f"data path file '{file_path}' is unreadable: expected UTF-8 text ({error})") from None


class _FileImageDataset(Dataset):
    """Images listed by file path, decoded on access; a plain class so it pickles for spawned workers."""

    def __init__(self, samples: list[tuple[str, int]], transform: Callable[[Image.Image], torch.Tensor]):
        self.samples = samples
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        file_path, label = self.samples[index]
        with Image.open(file_path) as image:
            rgb = image.convert("RGB")  # a few Tiny-ImageNet images are grayscale
        return self.transform(rgb), label


# ----------------------------------------------------------------------------------------------------------
# digits
# ----------------------------------------------------------------------------------------------------------


class _DigitsDataset(TensorDataset):
    """Precomputed image/label tensors that yield an ``int`` label like the other data sets."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:  # type: ignore[override]
        images, labels = self.tensors
        return images[index], int(labels[index])


def _digits_images(pixels_8x8: np.ndarray, image_size: int) -> torch.Tensor:
    """Scale 0..16 to [0,1] and upscale bilinearly to one channel ``[N,1,S,S]``."""
    images = torch.from_numpy(pixels_8x8.astype(np.float32) / _DIGITS_MAX_VALUE).reshape(-1, 1, 8, 8)
    return torch.nn.functional.interpolate(images, size=(image_size, image_size), mode="bilinear", align_corners=False)


def _load_digits(image_size: int, train_subset: int | None, test_subset: int | None, seed: int) -> DatasetSplits:
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
        indices = _subset_indices(len(label_tensor), wanted, seed, what)
        if indices is not None:
            keep = torch.from_numpy(indices)
            images, label_tensor = images[keep], label_tensor[keep]
        splits.append(_DigitsDataset(((images - mean) / std).repeat(1, 3, 1, 1), label_tensor))
    classes = [str(digit) for digit in range(_DIGITS_NUM_CLASSES)]
    return DatasetSplits(splits[0], splits[1], _DIGITS_NUM_CLASSES, classes, "digits")


# ----------------------------------------------------------------------------------------------------------
# cifar10
# ----------------------------------------------------------------------------------------------------------


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
        allowed[(module, "_frombuffer")] = numeric._frombuffer
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
            f"data path file '{file_path}' is not a readable CIFAR-10 pickle: {type(error).__name__}: {error}"
        ) from None


def _str_keys(mapping: Any, file_path: str) -> dict[str, Any]:
    """Python-2 pickles give str keys, Python-3 ones bytes keys; accept both."""
    if not isinstance(mapping, dict):
        raise DataPathError(f"data path file '{file_path}' is not a CIFAR-10 batch: expected a dict, got "
                            f"{type(mapping).__name__}")
    return {key.decode("latin1") if isinstance(key, bytes) else str(key): value for key, value in mapping.items()}


def _cifar_root(path: str) -> str:
    """The folder holding the batches: ``path`` itself or its ``cifar-10-batches-py/``."""
    for candidate in (path, os.path.join(path, _CIFAR_FOLDER)):
        names = set(os.listdir(candidate)) if os.path.isdir(candidate) else set()
        if all(batch in names for batch in (*_CIFAR_TRAIN_BATCHES, _CIFAR_TEST_BATCH)):
            return candidate
    raise DataPathError(f"data path '{path}' has no CIFAR-10 batches: expected {_LAYOUTS['cifar10']}")


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
        return list(_CIFAR_CLASSES)
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
    indices = _subset_indices(len(labels), wanted, seed, what)
    if indices is not None:
        images, labels = images[indices], labels[indices]
    return _ArrayImageDataset(images, labels, transform)


def _load_cifar10(
    path: str, image_size: int, train_subset: int | None, test_subset: int | None, seed: int, augment: bool
) -> DatasetSplits:
    """CIFAR-10 python batches read with a restricted unpickler (torchvision's md5 check is bypassed)."""
    root = _cifar_root(path)
    classes = _cifar_classes(root)
    train_images, train_labels = _cifar_split(root, _CIFAR_TRAIN_BATCHES)
    test_images, test_labels = _cifar_split(root, (_CIFAR_TEST_BATCH,))
    for labels, batch_names in ((train_labels, "data_batch_1..5"), (test_labels, _CIFAR_TEST_BATCH)):
        if labels.size and (labels.min() < 0 or labels.max() >= len(classes)):
            raise DataPathError(f"data path '{root}' has CIFAR-10 labels outside 0..{len(classes) - 1} "
                                f"in {batch_names}: expected one label per class name in batches.meta")
    augmentation = [transforms.RandomCrop(image_size, padding=_CIFAR_CROP_PADDING_PX),
                    transforms.RandomHorizontalFlip()] if augment else []
    train_tf, test_tf = _image_transforms(image_size, _CIFAR_SIDE_PX, _CIFAR_MEAN, _CIFAR_STD, augmentation)
    train = _cifar_dataset(train_images, train_labels, train_subset, seed, f"data path '{path}' (CIFAR-10 train)",
                           train_tf)
    test = _cifar_dataset(test_images, test_labels, test_subset, seed, f"data path '{path}' (CIFAR-10 test)",
                          test_tf)
    return DatasetSplits(train, test, len(classes), classes, "cifar10")


# ----------------------------------------------------------------------------------------------------------
# tinyimagenet
# ----------------------------------------------------------------------------------------------------------


def _tiny_root(path: str) -> str:
    """The data set folder: ``path`` itself or its ``tiny-imagenet-200/`` (how the official zip unpacks)."""
    for candidate in (path, os.path.join(path, _TINY_FOLDER)):
        if os.path.isdir(os.path.join(candidate, "train")) and os.path.isdir(os.path.join(candidate, "val", "images")):
            return candidate
    raise DataPathError(f"data path '{path}' is not a Tiny-ImageNet folder: expected {_LAYOUTS['tinyimagenet']}")


def _tiny_wnids(root: str) -> list[str]:
    """Sorted class ids (their order defines labels), from ``wnids.txt`` or else the train folder names."""
    train_dir = os.path.join(root, "train")
    train_folders = {entry.name for entry in os.scandir(train_dir) if entry.is_dir()}
    wnids_path = os.path.join(root, "wnids.txt")
    wnids = sorted(set(_read_text_lines(wnids_path))) if os.path.exists(wnids_path) else sorted(train_folders)
    if not wnids:
        raise DataPathError(f"data path '{train_dir}' has no class folders: expected train/<wnid>/images/")
    missing = [wnid for wnid in wnids if not os.path.isdir(os.path.join(train_dir, wnid, "images"))]
    if missing:
        raise DataPathError(f"data path '{train_dir}' lacks {len(missing)} class folder(s) listed in wnids.txt, "
                            f"e.g. '{missing[0]}': expected train/<wnid>/images/ for every wnid")
    return wnids


def _tiny_val_annotations_file(root: str) -> str:
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
        for line in _read_text_lines(words_path):
            wnid, _, words = line.partition("\t")
            names[wnid.strip()] = words.strip()
    return [names.get(wnid) or wnid for wnid in wnids]


def _tiny_train_samples(root: str, wnids: list[str]) -> list[tuple[str, int]]:
    samples = []
    for label, wnid in enumerate(wnids):
        images_dir = os.path.join(root, "train", wnid, "images")
        samples += [(os.path.join(images_dir, file_name), label)
                    for file_name in sorted(os.listdir(images_dir)) if _is_image_file(file_name)]
    if not samples:
        raise DataPathError(f"data path '{root}' has no train images: expected train/<wnid>/images/*.JPEG")
    return samples


def _tiny_val_samples(root: str, wnids: list[str]) -> list[tuple[str, int]]:
    """Val images labelled by ``val_annotations.txt`` (the flat ``val/images`` folder carries no labels)."""
    annotations_path = _tiny_val_annotations_file(root)
    images_dir = os.path.join(root, "val", "images")
    present = set(os.listdir(images_dir))
    label_of = {wnid: label for label, wnid in enumerate(wnids)}
    samples = []
    for line_number, line in enumerate(_read_text_lines(annotations_path), start=1):
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in label_of or fields[0] not in present:
            raise DataPathError(f"data path file '{annotations_path}' line {line_number} is invalid: expected "
                                "'<file in val/images>\\t<wnid from wnids.txt>\\t...'")
        samples.append((os.path.join(images_dir, fields[0]), label_of[fields[1]]))
    if not samples:
        raise DataPathError(f"data path file '{annotations_path}' is empty: expected one line per val image")
    return sorted(samples)


def _load_tinyimagenet(
    path: str, image_size: int, train_subset: int | None, test_subset: int | None, seed: int, augment: bool
) -> DatasetSplits:
    """Tiny-ImageNet-200 with its labelled ``val`` split as the test split (its test split has no labels)."""
    root = _tiny_root(path)
    wnids = _tiny_wnids(root)
    train_samples, test_samples = _tiny_train_samples(root, wnids), _tiny_val_samples(root, wnids)
    augmentation = [transforms.RandomHorizontalFlip()] if augment else []
    train_tf, test_tf = _image_transforms(image_size, _TINY_SIDE_PX, _IMAGENET_MEAN, _IMAGENET_STD, augmentation)
    train = _maybe_subset(_FileImageDataset(train_samples, train_tf), len(train_samples), train_subset, seed,
                          f"data path '{path}' (Tiny-ImageNet train)")
    test = _maybe_subset(_FileImageDataset(test_samples, test_tf), len(test_samples), test_subset, seed,
                         f"data path '{path}' (Tiny-ImageNet val)")
    return DatasetSplits(train, test, len(wnids), _tiny_class_names(root, wnids), "tinyimagenet")


# ----------------------------------------------------------------------------------------------------------
# imagefolder
# ----------------------------------------------------------------------------------------------------------


def _class_folders(split_dir: str) -> list[str]:
    """Sorted sub-folder names, the same rule ``torchvision.datasets.ImageFolder`` uses for classes."""
    return sorted(entry.name for entry in os.scandir(split_dir) if entry.is_dir())


def _unnest_split(split_dir: str) -> str:
    """Follow Kaggle's ``training_set/training_set/<class>`` nesting: one same-named folder inside."""
    folders = _class_folders(split_dir)
    nested = os.path.join(split_dir, os.path.basename(os.path.normpath(split_dir)))
    if folders == [os.path.basename(os.path.normpath(split_dir))] and _class_folders(nested):
        return nested
    return split_dir


def _find_split(path: str, names: Sequence[str], role: str) -> str:
    for split_name in names:
        candidate = os.path.join(path, split_name)
        if os.path.isdir(candidate):
            return _unnest_split(candidate)
    raise DataPathError(f"data path '{path}' has no {role} split folder: expected one of {', '.join(names)} "
                        "with one subfolder per class")


def _imagefolder_split_dirs(path: str) -> tuple[str, str]:
    """The train and test split folders holding the class folders."""
    return _find_split(path, _TRAIN_SPLIT_NAMES, "train"), _find_split(path, _TEST_SPLIT_NAMES, "test")


def _matching_class_folders(train_dir: str, test_dir: str) -> list[str]:
    """Both splits must name the same classes, or labels would silently mean different things."""
    train_classes, test_classes = _class_folders(train_dir), _class_folders(test_dir)
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
        return ImageFolder(split_dir, transform=transform)
    except (FileNotFoundError, OSError) as error:  # e.g. a class folder without image files
        raise DataPathError(f"data path '{split_dir}' has a class folder without images: expected image files "
                            f"in every class folder ({error})") from None


def _load_imagefolder(
    path: str, image_size: int, train_subset: int | None, test_subset: int | None, seed: int, augment: bool
) -> DatasetSplits:
    """Any ``train``/``test`` tree of class folders (e.g. Kaggle cats vs dogs), resized to a square."""
    train_dir, test_dir = _imagefolder_split_dirs(path)
    classes = _matching_class_folders(train_dir, test_dir)
    augmentation = [transforms.RandomHorizontalFlip()] if augment else []
    train_tf, test_tf = _image_transforms(image_size, None, _IMAGENET_MEAN, _IMAGENET_STD, augmentation)
    train_folder, test_folder = _image_folder(train_dir, train_tf), _image_folder(test_dir, test_tf)
    train = _maybe_subset(train_folder, len(train_folder), train_subset, seed, f"data path '{train_dir}'")
    test = _maybe_subset(test_folder, len(test_folder), test_subset, seed, f"data path '{test_dir}'")
    return DatasetSplits(train, test, len(classes), classes, "imagefolder")
