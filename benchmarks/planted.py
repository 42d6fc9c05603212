"""torchvision models with a delay planted in their forward, for benchmarks that must see a real slowdown.

    benchlib run --model planted:resnet18 ...      (with benchmarks/ on PYTHONPATH; PLANTED_DELAY_MS=4 plants 4 ms)

The delay is a real change of the step (a sleep in every forward, in training and inference alike), not a
relabelled number; with ``PLANTED_DELAY_MS`` unset or 0 the model is the torchvision one, unchanged.
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


def _planted(name: str, num_classes: int) -> nn.Module:
    delay_ms = float(os.environ.get("PLANTED_DELAY_MS", "0") or 0)
    return Planted(getattr(torchvision.models, name)(num_classes=num_classes), delay_ms / 1e3)


def resnet18(num_classes: int = 10) -> nn.Module:
    return _planted("resnet18", num_classes)


def mobilenet_v2(num_classes: int = 10) -> nn.Module:
    return _planted("mobilenet_v2", num_classes)
