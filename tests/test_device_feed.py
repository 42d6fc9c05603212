"""Image files reach a GPU as uint8 and are normalised there (``data.device_feed``): the arithmetic, checked on
the CPU against torchvision's ``ToTensor`` and ``Normalize``, and the loaders a CUDA configuration gets."""
from __future__ import annotations

import pytest
import torch
from test_datasets import cifar_root  # noqa: F401  # the fixture writing CIFAR-10's real files
from torch.utils.data import DataLoader

from benchlib.data import datasets as ds
from benchlib.data.device_feed import DeviceFeed


def test_uint8_batches_normalised_where_they_land_equal_the_float_pipeline(cifar_root):  # noqa: F811
    float_splits = ds.load_dataset("cifar10", str(cifar_root), 32, augment=False)
    byte_splits = ds.load_dataset("cifar10", str(cifar_root), 32, augment=False, uint8=True)
    assert float_splits.normalize is None and byte_splits.normalize is not None
    x8, _ = byte_splits.test[0]
    assert x8.dtype == torch.uint8 and x8.shape == (3, 32, 32)
    expected = torch.stack([float_splits.test[i][0] for i in range(8)])
    feed = DeviceFeed(DataLoader(byte_splits.test, batch_size=8), torch.device("cpu"), byte_splits.normalize,
                      torch.channels_last)
    (x, y), *_ = list(feed)
    assert x.dtype == torch.float32 and x.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(x, expected, atol=1e-5, rtol=1e-5)
    assert y.tolist() == [byte_splits.test[i][1] for i in range(8)]
    assert feed.h2d_bytes_per_batch == 8 * 3 * 32 * 32 + 8 * 8  # uint8 images and int64 labels: 4x less than fp32
    assert len(feed) == len(list(feed)) == 3  # 20 test images in batches of 8, each batch yielded once, in order
    assert feed.batch_size == 8 and feed.drop_last is False and feed.dataset is byte_splits.test  # as a DataLoader


def test_the_digits_and_a_users_data_are_left_as_they_are():
    assert ds.load_dataset("digits", None, 16, uint8=True).normalize is None


def test_a_cuda_configuration_feeds_image_files_as_bytes_and_says_what_a_step_copies(monkeypatch, cifar_root):  # noqa: F811
    from fakes import A100_SXM, fake_cuda

    from benchlib.data.loaders import build_loaders
    from benchlib.spec.settings import RunSettings

    s = RunSettings(dataset="cifar10", data_path=str(cifar_root), image_size=32, num_workers=0)
    cpu = build_loaders(s, 8, torch.device("cpu"))
    assert not isinstance(cpu.train, DeviceFeed) and cpu.h2d_bytes_per_batch(torch.device("cpu")) is None
    assert cpu.h2d_bytes_per_batch(torch.device("mps")) == 8 * (3 * 32 * 32 * 4 + 8)  # a float batch's bytes
    fake_cuda(monkeypatch, A100_SXM)
    gpu = build_loaders(s, 8, torch.device("cuda", 0))
    assert isinstance(gpu.train, DeviceFeed) and isinstance(gpu.test, DeviceFeed)
    assert gpu.train.dataset[0][0].dtype == torch.uint8 and len(gpu.train) == 100 // 8
    synthetic = build_loaders(RunSettings(dataset="synthetic", image_size=32), 8, torch.device("cpu"))
    assert synthetic.h2d_bytes_per_batch(torch.device("cuda", 0)) == 0  # made on the device


@pytest.mark.parametrize("column", ["h2d_per_step_bytes"])
def test_the_row_has_the_host_to_device_bytes_column(column):
    from benchlib.store import schema

    assert column in schema.names(schema.TRAINING)
