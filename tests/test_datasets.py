"""Tests for benchlib.datasets against small files written in each real on-disk format."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from benchlib.data import datasets as ds
from benchlib.errors import DataPathError

CIFAR_IMAGES_PER_BATCH = 20
CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
TINY_WNIDS_FILE_ORDER = ["n03000003", "n01000001", "n02000002"]  # deliberately unsorted
TINY_COLORS = {"n01000001": (220, 20, 20), "n02000002": (20, 220, 20), "n03000003": (20, 20, 220)}
TINY_TRAIN_PER_CLASS = 4
TINY_VAL_PER_CLASS = 2


# ----------------------------------------------------------------------------------------------------------
# Fixtures writing real on-disk formats
# ----------------------------------------------------------------------------------------------------------


def _cifar_batch(batch_index: int, count: int) -> dict[bytes, object]:
    """A batch like the real python-version files: bytes keys, uint8 N x 3072 in CHW order, list labels.

    Image k has constant channel planes R=(3k) G=(3k+1) B=(3k+2) (offset per batch), so CHW->HWC mistakes show.
    """
    base = 60 * batch_index
    data = np.zeros((count, 3072), dtype=np.uint8)
    for k in range(count):
        for channel in range(3):
            data[k, channel * 1024:(channel + 1) * 1024] = (base + 3 * k + channel) % 256
    labels = [(batch_index + k) % 10 for k in range(count)]
    names = [f"img_{batch_index}_{k}.png".encode() for k in range(count)]
    return {b"batch_label": f"batch {batch_index}".encode(), b"labels": labels, b"data": data, b"filenames": names}


def _write_pickle(file_path: Path, obj: object) -> None:
    with open(file_path, "wb") as handle:
        pickle.dump(obj, handle, protocol=2)


@pytest.fixture()
def cifar_root(tmp_path: Path) -> Path:
    """``tmp/cifar`` holding ``cifar-10-batches-py/`` with 5 x 20 train and 20 test images."""
    batches = tmp_path / "cifar" / "cifar-10-batches-py"
    batches.mkdir(parents=True)
    for i in range(1, 6):
        _write_pickle(batches / f"data_batch_{i}", _cifar_batch(i, CIFAR_IMAGES_PER_BATCH))
    _write_pickle(batches / "test_batch", _cifar_batch(0, CIFAR_IMAGES_PER_BATCH))
    label_names = [name.encode() for name in ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                              "horse", "ship", "truck")]
    _write_pickle(batches / "batches.meta", {b"num_cases_per_batch": CIFAR_IMAGES_PER_BATCH,
                                             b"label_names": label_names, b"num_vis": 3072})
    return tmp_path / "cifar"


def _save_solid_image(file_path: Path, size_wh: tuple[int, int], rgb: tuple[int, int, int], mode: str = "RGB") -> None:
    file_path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", size_wh, rgb)
    if mode == "L":
        image = image.convert("L")
    image.save(file_path)


@pytest.fixture()
def tiny_root(tmp_path: Path) -> Path:
    """A Tiny-ImageNet tree with 3 wnids; images are solid colours so labels can be read back from pixels."""
    root = tmp_path / "tiny"
    (root / "val" / "images").mkdir(parents=True)
    (root / "wnids.txt").write_text("\n".join(TINY_WNIDS_FILE_ORDER) + "\n")
    (root / "words.txt").write_text("n01000001\tgoldfish, Carassius auratus\nn02000002\tkoala\n"
                                    "n09999999\tunused class\n")
    annotations = []
    for wnid, rgb in TINY_COLORS.items():
        for k in range(TINY_TRAIN_PER_CLASS):
            mode = "L" if (wnid == "n01000001" and k == 0) else "RGB"  # one grayscale JPEG, like the real set
            _save_solid_image(root / "train" / wnid / "images" / f"{wnid}_{k}.JPEG", (64, 64), rgb, mode)
        (root / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
        for k in range(TINY_VAL_PER_CLASS):
            file_name = f"val_{wnid}_{k}.JPEG"
            _save_solid_image(root / "val" / "images" / file_name, (64, 64), rgb)
            annotations.append(f"{file_name}\t{wnid}\t0\t0\t63\t63")
    (root / "val" / "val_annotations.txt").write_text("\n".join(reversed(annotations)) + "\n")
    return root


CATS_DOGS_COLORS = {"cats": (200, 40, 40), "dogs": (40, 40, 200)}


def _write_cats_dogs(split_dir: Path, per_class: int, extension: str) -> None:
    sizes = [(37, 23), (50, 41), (19, 60), (33, 33)]
    for class_name, rgb in CATS_DOGS_COLORS.items():
        for k in range(per_class):
            _save_solid_image(split_dir / class_name / f"{class_name}.{k}.{extension}", sizes[k % len(sizes)], rgb)


@pytest.fixture()
def folder_root(tmp_path: Path) -> Path:
    """``train/{cats,dogs}`` and ``test/{cats,dogs}`` with odd-sized PNGs."""
    root = tmp_path / "catsdogs"
    _write_cats_dogs(root / "train", 4, "png")
    _write_cats_dogs(root / "test", 2, "png")
    return root


@pytest.fixture()
def kaggle_root(tmp_path: Path) -> Path:
    """Kaggle cats-vs-dogs nesting: ``training_set/training_set/<class>`` and ``test_set/test_set/<class>``."""
    root = tmp_path / "kaggle"
    _write_cats_dogs(root / "training_set" / "training_set", 3, "jpg")
    _write_cats_dogs(root / "test_set" / "test_set", 2, "jpg")
    (root / "training_set" / "training_set" / "cats" / "_DS_Store").write_bytes(b"\x00junk")
    return root


@pytest.fixture(scope="module")
def digits16() -> ds.DatasetSplits:
    return ds.load_dataset("digits", None, 16)


def _unnormalize(image: torch.Tensor, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Undo Normalize (back to [0,1] values, CHW) so tests can read pixel facts."""
    return image.numpy() * std[:, None, None] + mean[:, None, None]


def _assert_sample(sample: tuple[torch.Tensor, int], size_px: int, num_classes: int) -> None:
    image, label = sample
    assert isinstance(image, torch.Tensor)
    assert image.shape == (3, size_px, size_px)
    assert image.dtype == torch.float32
    assert isinstance(label, int)
    assert 0 <= label < num_classes


# ----------------------------------------------------------------------------------------------------------
# Names and constants
# ----------------------------------------------------------------------------------------------------------


def test_dataset_name_tuples() -> None:
    assert ds.DATASETS == ("digits", "synthetic", "cifar10", "tinyimagenet", "imagefolder")
    assert ds.DATASETS_NEEDING_PATH == ("cifar10", "tinyimagenet", "imagefolder")


def test_unknown_and_synthetic_names_raise_value_error() -> None:
    with pytest.raises(ValueError, match="unknown data set 'mnist'"):
        ds.load_dataset("mnist", None, 32)
    with pytest.raises(ValueError, match="mnist"):
        ds.check_data_path("mnist", None)
    with pytest.raises(ValueError, match="synthetic"):
        ds.load_dataset("synthetic", None, 32)
    with pytest.raises(ValueError, match="synthetic"):
        ds.num_classes_of("synthetic", None)


def test_bad_sizes_raise_value_error() -> None:
    with pytest.raises(ValueError, match="image_size"):
        ds.load_dataset("digits", None, 0)
    with pytest.raises(ValueError, match="train_subset"):
        ds.load_dataset("digits", None, 8, train_subset=0)


# ----------------------------------------------------------------------------------------------------------
# digits
# ----------------------------------------------------------------------------------------------------------


def test_digits_split_sizes_shapes_and_classes(digits16: ds.DatasetSplits) -> None:
    assert (len(digits16.train), len(digits16.test)) == (1437, 360)
    assert digits16.num_classes == 10 and digits16.classes == [str(i) for i in range(10)]
    assert digits16.name == "digits"
    _assert_sample(digits16.train[0], 16, 10)
    _assert_sample(digits16.test[359], 16, 10)
    image, _ = digits16.train[5]
    assert torch.equal(image[0], image[1]) and torch.equal(image[1], image[2])


def test_digits_split_is_stratified(digits16: ds.DatasetSplits) -> None:
    train_counts = np.bincount(digits16.train.tensors[1].numpy(), minlength=10)
    test_counts = np.bincount(digits16.test.tensors[1].numpy(), minlength=10)
    totals = train_counts + test_counts
    assert np.all(np.abs(test_counts - 0.2 * totals) <= 1.0)
    assert test_counts.min() >= 35  # every class is in the test split


def test_digits_train_is_normalized_with_train_statistics(digits16: ds.DatasetSplits) -> None:
    train_images = digits16.train.tensors[0]
    assert abs(float(train_images.mean())) < 1e-4
    assert abs(float(train_images.std()) - 1.0) < 1e-3
    assert abs(float(digits16.test.tensors[0].mean())) < 0.1  # same statistics, not refit on test


def test_digits_values_match_sklearn_at_native_size() -> None:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(bunch.data, bunch.target, test_size=0.2,
                                                        stratify=bunch.target, random_state=0)
    splits = ds.load_dataset("digits", None, 8, seed=123)
    mean, std = x_train.mean() / 16.0, (x_train / 16.0).std(ddof=1)
    image, label = splits.test[7]
    assert label == y_test[7]
    np.testing.assert_allclose(image[0].numpy() * std + mean, x_test[7].reshape(8, 8) / 16.0, atol=1e-5)
    assert [splits.train[i][1] for i in range(20)] == list(y_train[:20])


def test_digits_split_does_not_depend_on_seed(digits16: ds.DatasetSplits) -> None:
    other = ds.load_dataset("digits", None, 16, seed=7)
    assert torch.equal(other.test.tensors[0], digits16.test.tensors[0])
    assert torch.equal(other.train.tensors[1], digits16.train.tensors[1])


def test_digits_subsets_are_seeded() -> None:
    a = ds.load_dataset("digits", None, 8, train_subset=100, test_subset=50, seed=1)
    b = ds.load_dataset("digits", None, 8, train_subset=100, test_subset=50, seed=1)
    c = ds.load_dataset("digits", None, 8, train_subset=100, test_subset=50, seed=2)
    assert (len(a.train), len(a.test)) == (100, 50)
    assert torch.equal(a.train.tensors[0], b.train.tensors[0])
    assert not torch.equal(a.train.tensors[0], c.train.tensors[0])
    with pytest.raises(DataPathError, match="1437.*5000"):
        ds.load_dataset("digits", None, 8, train_subset=5000)


# ----------------------------------------------------------------------------------------------------------
# cifar10
# ----------------------------------------------------------------------------------------------------------


def test_cifar_loads_real_format(cifar_root: Path) -> None:
    splits = ds.load_dataset("cifar10", str(cifar_root), 32, augment=False)
    assert (len(splits.train), len(splits.test)) == (100, 20)
    assert splits.num_classes == 10 and splits.classes[0] == "airplane" and splits.classes[9] == "truck"
    assert splits.name == "cifar10"
    _assert_sample(splits.train[0], 32, 10)
    image, label = splits.train[CIFAR_IMAGES_PER_BATCH + 3]  # batch 2, image 3
    assert label == (2 + 3) % 10
    values = _unnormalize(image, CIFAR_MEAN, CIFAR_STD)
    expected_rgb = np.array([60 * 2 + 9, 60 * 2 + 10, 60 * 2 + 11]) / 255.0
    np.testing.assert_allclose(values.mean(axis=(1, 2)), expected_rgb, atol=1e-5)
    np.testing.assert_allclose(values.std(axis=(1, 2)), 0.0, atol=1e-5)  # each plane constant: CHW order right


def test_cifar_accepts_batches_folder_itself_and_resizes(cifar_root: Path) -> None:
    splits = ds.load_dataset("cifar10", str(cifar_root / "cifar-10-batches-py"), 40)
    _assert_sample(splits.train[0], 40, 10)
    _assert_sample(splits.test[0], 40, 10)


def test_cifar_augmentation_changes_images(cifar_root: Path) -> None:
    batches = cifar_root / "cifar-10-batches-py"
    batch = _cifar_batch(1, CIFAR_IMAGES_PER_BATCH)
    batch[b"data"] = np.random.default_rng(0).integers(0, 256, batch[b"data"].shape, dtype=np.uint8)
    _write_pickle(batches / "data_batch_1", batch)
    torch.manual_seed(0)
    splits = ds.load_dataset("cifar10", str(cifar_root), 32, augment=True)
    views = [splits.train[0][0] for _ in range(6)]
    assert any(not torch.equal(views[0], view) for view in views[1:])
    plain = ds.load_dataset("cifar10", str(cifar_root), 32, augment=False)
    assert torch.equal(plain.train[0][0], plain.train[0][0])


def test_cifar_meta_with_str_keys_and_missing_meta(cifar_root: Path) -> None:
    batches = cifar_root / "cifar-10-batches-py"
    _write_pickle(batches / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    assert ds.load_dataset("cifar10", str(cifar_root), 32).classes[3] == "c3"
    (batches / "batches.meta").unlink()
    assert ds.load_dataset("cifar10", str(cifar_root), 32).classes[3] == "cat"


def test_cifar_subsets_are_seeded_and_deterministic(cifar_root: Path) -> None:
    def labels_and_pixels(seed: int) -> list[tuple[int, float]]:
        splits = ds.load_dataset("cifar10", str(cifar_root), 32, train_subset=30, test_subset=10, seed=seed,
                                 augment=False)
        assert (len(splits.train), len(splits.test)) == (30, 10)
        return [(label, float(image[0, 0, 0])) for image, label in (splits.train[i] for i in range(30))]

    assert labels_and_pixels(3) == labels_and_pixels(3)
    assert labels_and_pixels(3) != labels_and_pixels(4)


def test_cifar_subset_too_large_names_path(cifar_root: Path) -> None:
    with pytest.raises(DataPathError, match=f"{cifar_root}.*100.*5000"):
        ds.load_dataset("cifar10", str(cifar_root), 32, train_subset=5000)
    with pytest.raises(DataPathError, match=f"{cifar_root}.*20.*1000"):
        ds.load_dataset("cifar10", str(cifar_root), 32, test_subset=1000)


def test_restricted_unpickler_refuses_os_system(cifar_root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    batch_path = cifar_root / "cifar-10-batches-py" / "data_batch_3"
    batch_path.write_bytes(b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")
    with pytest.raises(DataPathError, match="refusing to unpickle global os.system") as raised:
        ds.load_dataset("cifar10", str(cifar_root), 32)
    assert str(batch_path) in str(raised.value)
    assert not marker.exists()


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("true",))


def test_restricted_unpickler_refuses_reduce_inside_batch(cifar_root: Path) -> None:
    batch = _cifar_batch(1, CIFAR_IMAGES_PER_BATCH)
    batch[b"evil"] = _Evil()
    _write_pickle(cifar_root / "cifar-10-batches-py" / "data_batch_1", batch)
    with pytest.raises(DataPathError, match="refusing to unpickle global .*system"):
        ds.load_dataset("cifar10", str(cifar_root), 32)


def test_cifar_corrupt_or_malformed_batches(cifar_root: Path) -> None:
    batch_path = cifar_root / "cifar-10-batches-py" / "test_batch"
    batch_path.write_bytes(b"this is not a pickle")
    with pytest.raises(DataPathError, match=f"'{batch_path}' is not a readable CIFAR-10 pickle"):
        ds.load_dataset("cifar10", str(cifar_root), 32)
    _write_pickle(batch_path, {b"data": np.zeros((4, 100), np.uint8), b"labels": [0, 1, 2, 3]})
    with pytest.raises(DataPathError, match=f"'{batch_path}' is not a CIFAR-10 batch"):
        ds.load_dataset("cifar10", str(cifar_root), 32)
    _write_pickle(batch_path, {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]})
    with pytest.raises(DataPathError, match="labels outside 0..9"):
        ds.load_dataset("cifar10", str(cifar_root), 32)


def test_cifar_layout_errors_name_the_path(tmp_path: Path, cifar_root: Path) -> None:
    with pytest.raises(DataPathError, match="'cifar10' needs a data path"):
        ds.check_data_path("cifar10", None)
    missing = tmp_path / "nowhere"
    with pytest.raises(DataPathError, match=f"'{missing}' does not exist"):
        ds.load_dataset("cifar10", str(missing), 32)
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(DataPathError, match=f"'{a_file}' is not a folder"):
        ds.check_data_path("cifar10", str(a_file))
    (cifar_root / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(DataPathError, match=f"'{cifar_root}' has no CIFAR-10 batches: expected data_batch_1..5"):
        ds.check_data_path("cifar10", str(cifar_root))


# ----------------------------------------------------------------------------------------------------------
# tinyimagenet
# ----------------------------------------------------------------------------------------------------------


def _label_from_color(image: torch.Tensor) -> int:
    """The solid test colours put almost all intensity in the channel of the sorted wnid's index."""
    return int(np.argmax(_unnormalize(image, IMAGENET_MEAN, IMAGENET_STD).mean(axis=(1, 2))))


def test_tinyimagenet_loads_with_sorted_wnids_and_val_labels(tiny_root: Path) -> None:
    splits = ds.load_dataset("tinyimagenet", str(tiny_root), 64, augment=False)
    assert splits.num_classes == 3 and splits.name == "tinyimagenet"
    assert splits.classes == ["goldfish, Carassius auratus", "koala", "n03000003"]
    assert len(splits.train) == 3 * TINY_TRAIN_PER_CLASS and len(splits.test) == 3 * TINY_VAL_PER_CLASS
    for dataset in (splits.train, splits.test):
        for i in range(len(dataset)):
            image, label = dataset[i]
            _assert_sample((image, label), 64, 3)
            assert label == _label_from_color(image)  # label follows sorted-wnid order and the annotation
    assert sorted(label for _, label in (splits.test[i] for i in range(len(splits.test)))) == [0, 0, 1, 1, 2, 2]


def test_tinyimagenet_resizes_and_counts_classes(tiny_root: Path, tmp_path: Path) -> None:
    splits = ds.load_dataset("tinyimagenet", str(tiny_root), 32)
    _assert_sample(splits.train[0], 32, 3)
    _assert_sample(splits.test[0], 32, 3)
    assert ds.num_classes_of("tinyimagenet", str(tiny_root)) == 3
    with pytest.raises(DataPathError, match=f"'{tmp_path}' is not a Tiny-ImageNet folder"):
        ds.num_classes_of("tinyimagenet", str(tmp_path))  # its folder is named tiny/, not tiny-imagenet-200/


def test_tinyimagenet_without_wnids_txt_and_nested_folder(tmp_path: Path, tiny_root: Path) -> None:
    (tiny_root / "wnids.txt").unlink()
    nested_parent = tmp_path / "downloads"
    nested_parent.mkdir()
    tiny_root.rename(nested_parent / "tiny-imagenet-200")
    assert ds.num_classes_of("tinyimagenet", str(nested_parent)) == 3
    splits = ds.load_dataset("tinyimagenet", str(nested_parent), 64, augment=False)
    assert splits.test[0][1] == _label_from_color(splits.test[0][0])


def test_tinyimagenet_subsets(tiny_root: Path) -> None:
    a = ds.load_dataset("tinyimagenet", str(tiny_root), 64, train_subset=5, test_subset=4, seed=0)
    b = ds.load_dataset("tinyimagenet", str(tiny_root), 64, train_subset=5, test_subset=4, seed=0)
    assert (len(a.train), len(a.test)) == (5, 4)
    assert a.train.indices == b.train.indices and a.test.indices == b.test.indices
    seeds_differ = any(ds.load_dataset("tinyimagenet", str(tiny_root), 64, train_subset=5, seed=s).train.indices
                       != a.train.indices for s in (1, 2, 3))
    assert seeds_differ
    with pytest.raises(DataPathError, match=f"{tiny_root}.*6.*7"):
        ds.load_dataset("tinyimagenet", str(tiny_root), 64, test_subset=7)


def test_tinyimagenet_layout_errors_name_the_path(tiny_root: Path) -> None:
    annotations = tiny_root / "val" / "val_annotations.txt"
    text = annotations.read_text()
    annotations.write_text(text + "val_extra.JPEG\tn07777777\t0\t0\t1\t1\n")
    with pytest.raises(DataPathError, match=f"'{annotations}' line 7 is invalid"):
        ds.load_dataset("tinyimagenet", str(tiny_root), 64)
    annotations.unlink()
    with pytest.raises(DataPathError, match=f"'{tiny_root}' has no val/val_annotations.txt"):
        ds.check_data_path("tinyimagenet", str(tiny_root))
    with pytest.raises(DataPathError, match=f"'{tiny_root}' has no val/val_annotations.txt"):
        ds.load_dataset("tinyimagenet", str(tiny_root), 64)
    annotations.write_text(text)
    (tiny_root / "wnids.txt").write_text("n01000001\nn05555555\n")
    with pytest.raises(DataPathError, match=f"'{tiny_root / 'train'}' lacks 1 class folder.*n05555555"):
        ds.check_data_path("tinyimagenet", str(tiny_root))
    (tiny_root / "val" / "images").rename(tiny_root / "val" / "pictures")
    with pytest.raises(DataPathError, match=f"'{tiny_root}' is not a Tiny-ImageNet folder"):
        ds.num_classes_of("tinyimagenet", str(tiny_root))


# ----------------------------------------------------------------------------------------------------------
# imagefolder
# ----------------------------------------------------------------------------------------------------------


def test_imagefolder_loads_odd_sizes(folder_root: Path) -> None:
    splits = ds.load_dataset("imagefolder", str(folder_root), 24, augment=False)
    assert splits.classes == ["cats", "dogs"] and splits.num_classes == 2 and splits.name == "imagefolder"
    assert (len(splits.train), len(splits.test)) == (8, 4)
    for dataset in (splits.train, splits.test):
        for i in range(len(dataset)):
            image, label = dataset[i]
            _assert_sample((image, label), 24, 2)
            rgb = _unnormalize(image, IMAGENET_MEAN, IMAGENET_STD).mean(axis=(1, 2))
            assert (rgb[0] > rgb[2]) == (label == 0)  # cats are red, dogs blue
    assert ds.num_classes_of("imagefolder", str(folder_root)) == 2


def test_imagefolder_kaggle_nesting(kaggle_root: Path) -> None:
    ds.check_data_path("imagefolder", str(kaggle_root))
    assert ds.num_classes_of("imagefolder", str(kaggle_root)) == 2
    splits = ds.load_dataset("imagefolder", str(kaggle_root), 16, train_subset=4, test_subset=2, seed=5)
    assert splits.classes == ["cats", "dogs"]
    assert (len(splits.train), len(splits.test)) == (4, 2)
    _assert_sample(splits.train[0], 16, 2)


def test_imagefolder_val_split_name(folder_root: Path) -> None:
    (folder_root / "test").rename(folder_root / "validation")
    assert len(ds.load_dataset("imagefolder", str(folder_root), 16).test) == 4


def test_imagefolder_layout_errors_name_the_path(folder_root: Path) -> None:
    with pytest.raises(DataPathError, match="'imagefolder' needs a data path"):
        ds.load_dataset("imagefolder", None, 16)
    with pytest.raises(DataPathError, match=f"'{folder_root / 'train'}' has no train split folder"):
        ds.check_data_path("imagefolder", str(folder_root / "train"))  # pointed one level too deep
    ds.check_data_path("imagefolder", str(folder_root))
    with pytest.raises(DataPathError, match=f"'{folder_root / 'train'}' has 8 images.*9"):
        ds.load_dataset("imagefolder", str(folder_root), 16, train_subset=9)
    (folder_root / "test" / "dogs").rename(folder_root / "test" / "birds")
    with pytest.raises(DataPathError, match=f"'{folder_root / 'test'}' has class folders.*only in train: \\['dogs'\\]"):
        ds.load_dataset("imagefolder", str(folder_root), 16)
    (folder_root / "test" / "birds").rename(folder_root / "test" / "dogs")
    for image_file in (folder_root / "test" / "dogs").iterdir():
        image_file.unlink()
    with pytest.raises(DataPathError, match=f"'{folder_root / 'test'}' has a class folder without images"):
        ds.load_dataset("imagefolder", str(folder_root), 16)


def test_imagefolder_subsets_are_seeded(folder_root: Path) -> None:
    def indices(seed: int) -> list[int]:
        return ds.load_dataset("imagefolder", str(folder_root), 16, train_subset=4, seed=seed).train.indices

    assert indices(0) == indices(0)
    assert any(indices(s) != indices(0) for s in (1, 2, 3))


# ----------------------------------------------------------------------------------------------------------
# Cheap checks
# ----------------------------------------------------------------------------------------------------------


def test_num_classes_of_cheap_cases() -> None:
    assert ds.num_classes_of("digits", None) == 10
    assert ds.num_classes_of("cifar10", None) == 10


def test_check_data_path_is_noop_for_embedded_sets(tmp_path: Path) -> None:
    ds.check_data_path("digits", None)
    ds.check_data_path("synthetic", str(tmp_path / "ignored"))


# ----------------------------------------------------------------------------------------------------------
# Pickling and DataLoader workers
# ----------------------------------------------------------------------------------------------------------


def test_all_datasets_pickle_round_trip(digits16: ds.DatasetSplits, cifar_root: Path, tiny_root: Path,
                                        folder_root: Path) -> None:
    all_splits = [
        digits16,
        ds.load_dataset("cifar10", str(cifar_root), 32, augment=False, train_subset=10),
        ds.load_dataset("tinyimagenet", str(tiny_root), 64, augment=False, test_subset=3),
        ds.load_dataset("imagefolder", str(folder_root), 16, augment=False, train_subset=3),
    ]
    for splits in all_splits:
        for dataset in (splits.train, splits.test):
            copy = pickle.loads(pickle.dumps(dataset))
            assert len(copy) == len(dataset)
            assert torch.equal(copy[0][0], dataset[0][0]) and copy[0][1] == dataset[0][1]
        assert pickle.loads(pickle.dumps(splits)).classes == splits.classes


def test_dataloader_workers_cifar(cifar_root: Path) -> None:
    splits = ds.load_dataset("cifar10", str(cifar_root), 32, train_subset=40)
    images, labels = next(iter(DataLoader(splits.train, batch_size=8, shuffle=True, num_workers=2)))
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.float32
    assert labels.dtype == torch.int64 and int(labels.max()) < 10


def test_dataloader_workers_imagefolder(folder_root: Path) -> None:
    splits = ds.load_dataset("imagefolder", str(folder_root), 20)
    images, labels = next(iter(DataLoader(splits.train, batch_size=4, shuffle=True, num_workers=2)))
    assert images.shape == (4, 3, 20, 20) and set(labels.tolist()) <= {0, 1}


def test_dataloader_spawn_workers_receive_pickled_dataset(tiny_root: Path) -> None:
    """Spawned workers get the dataset by pickle (fork hides closures and lambdas); one spawned worker suffices."""
    splits = ds.load_dataset("tinyimagenet", str(tiny_root), 32, train_subset=6)
    loader = DataLoader(splits.train, batch_size=3, num_workers=1, multiprocessing_context="spawn")
    images, labels = next(iter(loader))
    assert images.shape == (3, 3, 32, 32) and int(labels.max()) < 3
