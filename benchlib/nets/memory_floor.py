"""The least device memory a training step of a model can need: a floor a preflight can refuse on.

At the end of a training step's forward pass autograd holds every tensor the backward pass will read
(each layer's saved inputs or outputs, pooling indices, dropout masks), beside the weights and the
input batch. Counting them once, by storage, in a real forward pass on the CPU gives a floor under the
peak of any eager training step on any device: the real peak is higher (the optimizer's state, the
gradients as they arrive, cuDNN's workspaces and reserve space, the allocator's rounding). A
configuration whose floor exceeds a GPU's free memory cannot run there; one under it may still run out.

Saved bytes grow linearly with the batch (per-sample activations plus per-channel statistics), so they
are counted at two batch sizes and the line through them is used. Under autocast every saved byte is
scaled to the narrower dtype, which can only lower the floor. Compiled models are not covered: the
compiler may recompute tensors from smaller saved ones.
"""
from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn

from .counters import random_input, weight_numel
from .models import build_model, head_parameters
from .user_models import generation

WEIGHT_ITEMSIZE = 4  # parameters and buffers stay float32 under autocast
_COUNT_BATCHES = (2, 4)  # batch norm in train mode needs two samples; two points give the line


def saved_bytes(model: nn.Module, x: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd saves for the backward pass of ``model`` on ``x``.

    Parameters and buffers are left out (they are the weights, counted apart); the model is left in train mode.
    """
    weights = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    model.train()
    with torch.random.fork_rng(devices=[]), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    del out  # the graph and its saved tensors go with it
    return sum(storages.values())


def saved_bytes_line(model: str, image_size: int, num_classes: int, head_only: bool = False) -> tuple[float, float]:
    """(bytes per sample, bytes per batch) autograd saves in float32 (only the head's when the backbone is frozen)."""
    return _saved_bytes_line(model, image_size, num_classes, head_only, generation(model))


@lru_cache(maxsize=64)
def _saved_bytes_line(model: str, image_size: int, num_classes: int, head_only: bool,
                      _generation: int) -> tuple[float, float]:  # a model registered again is counted again
    with torch.random.fork_rng(devices=[]):
        net = build_model(model, num_classes)
    for p in net.parameters():
        p.requires_grad_(True)
    if head_only:
        head = {id(p) for p in head_parameters(net, model)}
        for p in net.parameters():
            p.requires_grad_(id(p) in head)
    (b1, s1), (b2, s2) = ((b, saved_bytes(net, random_input(b, image_size))) for b in _COUNT_BATCHES)
    per_sample = (s2 - s1) / (b2 - b1)
    return per_sample, max(0.0, s1 - b1 * per_sample)


def weight_bytes(model: str, num_classes: int) -> int:
    return _weight_bytes(model, num_classes, generation(model))


@lru_cache(maxsize=64)
def _weight_bytes(model: str, num_classes: int, _generation: int) -> int:
    with torch.random.fork_rng(devices=[]):
        return weight_numel(build_model(model, num_classes)) * WEIGHT_ITEMSIZE


def training_floor_bytes(model: str, image_size: int, num_classes: int, batch_size: int, activation_itemsize: int,
                         head_only: bool = False) -> float:
    """Bytes a training step of ``batch_size`` samples holds at least at the end of its forward pass."""
    per_sample, fixed = saved_bytes_line(model, image_size, num_classes, head_only)
    scale = min(1.0, activation_itemsize / WEIGHT_ITEMSIZE)
    return weight_bytes(model, num_classes) + (batch_size * per_sample + fixed) * scale


def largest_batch_within(model: str, image_size: int, num_classes: int, budget_bytes: float,
                         activation_itemsize: int, head_only: bool = False) -> int:
    """The largest batch whose floor fits ``budget_bytes`` (0 when the weights alone do not)."""
    per_sample, fixed = saved_bytes_line(model, image_size, num_classes, head_only)
    scale = min(1.0, activation_itemsize / WEIGHT_ITEMSIZE)
    room = budget_bytes - weight_bytes(model, num_classes) - fixed * scale
    return max(0, int(room // (per_sample * scale))) if per_sample > 0 else 0
