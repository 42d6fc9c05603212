"""torchvision models with a delay planted in their forward, for benchmarks that must see a real slowdown.

    benchlib run --model planted:resnet18 ...      (with benchmarks/ on PYTHONPATH; PLANTED_DELAY_MS=4 plants 4 ms)

The delay is a real change of the step (a sleep in every forward, in training and inference alike), not a
relabelled number; with ``PLANTED_DELAY_MS`` unset or 0 the model is the torchvision one, unchanged.
``PLANTED_LAYER`` (a submodule's name, e.g. ``layer3.0.conv1``) plants it in that layer's forward instead of the
model's, so a split layer by layer (``benchlib diff --explain``) must find it in that layer.
"""
from __future__ import annotations

import os
import time

import torch
import torchvision
from torch import nn


class Planted(nn.Module):
    """``net`` whose forward first sleeps ``delay_s``."""

    def __init__(self, net: nn.Module, delay_s: float) -> None:
        super().__init__()
        self.net, self.delay_s = net, delay_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        return self.net(x)


def _sleeping(layer: nn.Module, delay_s: float) -> None:
    """Make ``layer``'s own forward sleep ``delay_s`` first: its class swapped for a subclass of it (its name,
    parameters and hooks unchanged, and a tracer or FLOP counter still sees a module of its kind)."""
    base = type(layer)

    def forward(self: nn.Module, *args: object, **kwargs: object) -> object:
        time.sleep(delay_s)
        return base.forward(self, *args, **kwargs)

    layer.__class__ = type(base.__name__, (base,), {"forward": forward})


def _planted(name: str, num_classes: int) -> nn.Module:
    delay_ms = float(os.environ.get("PLANTED_DELAY_MS", "0") or 0)
    net = getattr(torchvision.models, name)(num_classes=num_classes)
    layer = os.environ.get("PLANTED_LAYER", "")
    if not layer:
        return Planted(net, delay_ms / 1e3)
    if delay_ms > 0:
        _sleeping(net.get_submodule(layer), delay_ms / 1e3)
    return Planted(net, 0.0)  # the same module tree either way: layer names match across the sides


def resnet18(num_classes: int = 10) -> nn.Module:
    return _planted("resnet18", num_classes)


def mobilenet_v2(num_classes: int = 10) -> nn.Module:
    return _planted("mobilenet_v2", num_classes)
