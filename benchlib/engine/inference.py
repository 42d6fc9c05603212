"""Inference latency: timed repeats of one forward pass at a fixed batch, with p50/p90/p99.

Each repeat is its own timed region, synchronized at both ends, on inputs already on the device.
A pass over the test set with its DataLoader is throughput, not latency (see ``train.evaluate``).
"""
from __future__ import annotations

import time

import torch
from torch import nn

from ..env.devices import synchronize
from ..instruments.timing import Samples


@torch.inference_mode()
def measure_latency(model: nn.Module, batch: torch.Tensor, *, warmup: int, repeats: int) -> Samples:
    """Seconds per forward pass of ``batch`` (already on the model's device), over ``repeats`` calls."""
    model.eval()
    device = batch.device
    for _ in range(warmup):
        model(batch)
    synchronize(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model(batch)
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return Samples.of(times)


def example_batch(loader, batch_size: int, device: torch.device) -> torch.Tensor:
    """``batch_size`` real inputs from ``loader`` (repeated if the loader's batches are smaller)."""
    parts: list[torch.Tensor] = []
    have = 0
    while have < batch_size:
        before = have
        for x, _ in loader:
            parts.append(x)
            have += x.shape[0]
            if have >= batch_size:
                break
        if have == before:
            raise ValueError("the loader yielded no batches: cannot build an example input")
    return torch.cat(parts)[:batch_size].to(device)
