"""Setting up one configuration: seeds, data, the model in the variant's memory format, its wrappers.

Measuring, tuning and profiling all set a configuration up here, so they train the same model on the
same data the same way; only what they observe differs.
"""
from __future__ import annotations

import dataclasses
import gc
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..data.datasets import num_classes_of
from ..data.loaders import Loaders, batches_per_epoch, build_loaders
from ..env.devices import device_scope, synchronize
from ..env.distributed import DistInfo
from ..errors import SkippedConfiguration
from ..nets.models import build_model
from ..spec.settings import RunConfig, RunSettings
from .knobs import apply_memory_format, backend_flags, compile_model, reset_compiler, unsupported_reason


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def fresh_state(device: torch.device) -> None:
    """Leave nothing of an earlier configuration behind: garbage, cached device memory, compiled graphs.

    Without emptying the cache a configuration's reserved-memory peak is at least what earlier ones left
    cached; without resetting dynamo, compiled graphs pile up until dynamo gives up and runs eager. The
    compiler goes first: its graphs (and a CUDA graph's private memory pool) hold device memory that only
    becomes garbage once they are dropped, and emptying the cache before that would leave it reserved.
    """
    reset_compiler()
    gc.collect()
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.empty_cache()


@contextmanager
def configuration(device: torch.device, s: RunSettings) -> Iterator[None]:
    """What one configuration runs inside: a clean slate, its device current, its backend flags."""
    fresh_state(device)
    with device_scope(device), backend_flags(s.knobs):
        yield


def check_runs(s: RunSettings, device: str) -> None:
    """Raise SkippedConfiguration (one line saying why) when the variant cannot run on ``device`` (cuda:N: that
    GPU's own capability decides)."""
    knobs = s.knobs
    reason = unsupported_reason(dataclasses.replace(knobs, quantization="none"), device, training=True)
    if reason is None and not knobs.trains:
        reason = unsupported_reason(knobs, device, training=False)
    if reason is not None:
        raise SkippedConfiguration(reason)


def num_classes(s: RunSettings) -> int:
    return s.synthetic_classes if s.dataset == "synthetic" else num_classes_of(s.dataset, s.data_path)


@dataclass
class Built:
    """A configuration's data and model, on its device and in its memory format, not yet wrapped."""

    loaders: Loaders
    model: nn.Module
    per_epoch: int


def build(cfg: RunConfig, device: torch.device, local_batch: int, shard: tuple[int, int] = (0, 1)) -> Built:
    """Seed, build the loaders and the model, move it to ``device`` in the variant's memory format."""
    s = cfg.settings
    seed_everything(s.seed)
    loaders = build_loaders(s, local_batch, device, shard)
    model = build_model(cfg.model, loaders.num_classes, pretrained=s.pretrained, freeze_backbone=s.freeze_backbone,
                        weights_path=s.weights_path).to(device)
    model = apply_memory_format(model, s.knobs)
    per_epoch = batches_per_epoch(loaders.train, s.max_train_batches)
    if per_epoch < 1:
        raise ValueError(
            f"batch size {cfg.batch_size} leaves no full training batch in {loaders.train_samples} samples"
        )
    return Built(loaders, model, per_epoch)


def wrap(model: nn.Module, s: RunSettings, device: torch.device,
         dist_info: DistInfo | None = None) -> tuple[nn.Module, nn.Module]:
    """(the network that trains, the network that infers): DDP across ranks and torch.compile as the variant asks.

    Under DDP the inference network is the model compiled on its own: the compiled DDP wrapper's
    ``module`` would be the eager model.
    """
    if dist_info is None:
        net, _ = compile_model(model, s.knobs)  # compiles lazily, inside the warmup steps (compile_s)
        return net, net
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    train_net, _ = compile_model(ddp, s.knobs)
    infer_net, _ = compile_model(model, s.knobs)
    return train_net, infer_net
