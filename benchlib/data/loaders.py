"""DataLoaders for a configuration: the real input pipeline, or synthetic batches already on the device.

Synthetic batches measure the model alone; real loaders measure the system (docs/measurement.md).
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler

from ..spec.settings import RunSettings
from .datasets import load_dataset
from .device_feed import DeviceFeed

_SYNTHETIC_DISTINCT_BATCHES = 4


def seed_worker(worker_id: int) -> None:
    """DataLoader worker init: derive numpy/random seeds from torch's per-worker seed."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


class SyntheticBatches:
    """Random images and labels generated once on the target device, in the variant's memory format, and cycled.

    Re-iterable like a DataLoader; ``len`` is the number of batches per epoch. Made channels_last once here,
    a step's own conversion (``engine.step.in_memory_format``) finds them so and copies nothing.
    """

    def __init__(self, samples: int, batch_size: int, image_size: int, num_classes: int,
                 device: torch.device, seed: int, shard: tuple[int, int] = (0, 1),
                 memory_format: torch.memory_format = torch.contiguous_format):
        rank, world = shard
        global_batch = batch_size * world
        gen = torch.Generator().manual_seed(seed)
        distinct = min(_SYNTHETIC_DISTINCT_BATCHES, max(1, samples // global_batch))
        part = slice(rank * batch_size, (rank + 1) * batch_size)  # each rank's share of the same global batch
        self._batches = [
            (torch.randn(global_batch, 3, image_size, image_size, generator=gen)[part].to(device)
             .contiguous(memory_format=memory_format),
             torch.randint(0, num_classes, (global_batch,), generator=gen)[part].to(device))
            for _ in range(distinct)
        ]
        self._len = max(1, samples // global_batch)
        self.batch_size = batch_size

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i in range(self._len):
            yield self._batches[i % len(self._batches)]


@dataclass
class Loaders:
    train: DataLoader[Any] | SyntheticBatches | DeviceFeed
    test: DataLoader[Any] | SyntheticBatches | DeviceFeed
    num_classes: int
    train_samples: int
    test_samples: int
    synthetic: bool

    def h2d_bytes_per_batch(self, device: torch.device) -> int | None:
        """What one training batch moves from host to ``device`` (images and labels): 0 where the batches are
        made on it (synthetic), the uint8 bytes a ``DeviceFeed`` copied, a float batch's otherwise; None on a
        CPU (no copy to a device)."""
        if device.type == "cpu":
            return None
        if self.synthetic:
            return 0
        if isinstance(self.train, DeviceFeed):
            return self.train.h2d_bytes_per_batch
        assert isinstance(self.train, DataLoader)  # not synthetic, not fed: a DataLoader of a map-style data set
        x, _ = self.train.dataset[0]
        batch = int(self.train.batch_size or 1)
        return batch * (int(x.numel()) * int(x.element_size()) + 8)  # int64 labels


def build_loaders(s: RunSettings, batch_size: int, device: torch.device, shard: tuple[int, int] = (0, 1)) -> Loaders:
    """Train and test loaders for the settings; training drops the last partial batch.

    Dropping it keeps step times comparable and avoids BatchNorm's failure on a batch of one. With
    ``shard=(rank, world_size)`` the training data is split across data-parallel ranks (``batch_size``
    is then the per-rank batch); the test loader stays whole (rank 0 evaluates).
    """
    rank, world = shard
    if s.dataset == "synthetic":
        layout = torch.channels_last if s.knobs.memory_format == "channels_last" else torch.contiguous_format
        train = SyntheticBatches(s.synthetic_samples, batch_size, s.image_size, s.synthetic_classes, device, s.seed,
                                 shard, layout)
        test_samples = max(batch_size, s.synthetic_samples // 4)
        test = SyntheticBatches(test_samples, batch_size, s.image_size, s.synthetic_classes, device, s.seed + 1,
                                memory_format=layout)
        return Loaders(train, test, s.synthetic_classes, len(train) * batch_size, len(test) * batch_size, True)
    # on a GPU, image files travel as their bytes and are normalised there (data.device_feed)
    splits = load_dataset(s.dataset, s.data_path, s.image_size, train_subset=s.train_subset,
                          test_subset=s.test_subset, seed=s.seed, augment=s.augment, uint8=device.type == "cuda")
    pin = (s.pin_memory if s.pin_memory is not None else True) and device.type == "cuda"
    common: dict[str, Any] = dict(num_workers=s.num_workers, pin_memory=pin,
                                  persistent_workers=s.persistent_workers and s.num_workers > 0,
                                  worker_init_fn=seed_worker if s.num_workers > 0 else None)
    train_loader: DataLoader[Any]
    if world > 1:
        sampler: DistributedSampler[Any] = DistributedSampler(
            splits.train, num_replicas=world, rank=rank, shuffle=True, seed=s.seed, drop_last=True
        )
        train_loader = DataLoader(splits.train, batch_size=batch_size, sampler=sampler, drop_last=True, **common)
    else:
        train_loader = DataLoader(splits.train, batch_size=batch_size, shuffle=True, drop_last=True,
                                  generator=torch.Generator().manual_seed(s.seed), **common)
    test_loader: DataLoader[Any] = DataLoader(splits.test, batch_size=batch_size, shuffle=False, drop_last=False,
                                              **common)
    test_samples = len(test_loader.dataset)  # type: ignore[arg-type]  # map-style: sized
    train_samples = len(train_loader) * batch_size
    if splits.normalize is None:
        return Loaders(train_loader, test_loader, splits.num_classes, train_samples, test_samples, False)
    layout = torch.channels_last if s.knobs.memory_format == "channels_last" else torch.contiguous_format
    return Loaders(DeviceFeed(train_loader, device, splits.normalize, layout),
                   DeviceFeed(test_loader, device, splits.normalize, layout), splits.num_classes, train_samples,
                   test_samples, False)


def batches_per_epoch(loader: DataLoader[Any] | SyntheticBatches | DeviceFeed, max_train_batches: int | None) -> int:
    n = len(loader)
    return min(n, max_train_batches) if max_train_batches else n


