"""Inference timing: latency of one forward pass, and throughput of back-to-back passes.

Latency: each repeat is its own timed region, synchronized at both ends, on inputs already on the
device; p50/p90/p99 come from the repeats. A series times at least its ``repeats`` and then goes on
until it holds ``target`` samples (enough for an honest p99) or its time budget is spent, so a fast
call gets its p99 and a slow one stays bounded in time. Throughput: batches run back to back with one
synchronize at the end of each repeat, so the host queues the next batch while the device works, as a
serving loop does; samples over the summed repeat times, the same definition as training throughput.
Autocast is entered and left around every call, so each call pays its weight casts. A pass over the
test set with its DataLoader is evaluation throughput, not latency (see ``train.evaluate``).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

from ..env.devices import synchronize
from ..instruments.samples import Samples
from ..store.schema import BATCHES_PER_THROUGHPUT_REPEAT

CallContext = Callable[[], AbstractContextManager[object]]
# Samples a latency series goes on to within its time budget: p99 needs 299 for an interval at all, and at
# 1000 its 95% interval runs between the 984th and the 997th sample, clear of the few slowest calls.
LATENCY_TARGET_SAMPLES = 1000


def _plain() -> AbstractContextManager[object]:
    return nullcontext()


def _timed_passes(model: nn.Module, batch: torch.Tensor, *, warmup: int, passes: int, context: CallContext,
                  more: Callable[[list[float], float], bool]) -> Samples:
    """Warm up, then time samples of ``passes`` back-to-back forward passes, one synchronize each, while
    ``more(times so far, start)``: the one timing loop behind latency and throughput."""
    model.eval()
    device = batch.device
    for _ in range(warmup):
        with context():
            model(batch)
    synchronize(device)
    times: list[float] = []
    start = time.perf_counter()
    while more(times, start):
        t0 = time.perf_counter()
        for _ in range(passes):
            with context():
                model(batch)
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return Samples.of(times)


@torch.inference_mode()
def measure_latency(model: nn.Module, batch: torch.Tensor, *, warmup: int, repeats: int,
                    context: CallContext = _plain, budget_s: float = 0.0, target: int = 0) -> Samples:
    """Seconds per forward pass of ``batch`` (already on the model's device), each pass synchronized.

    ``repeats`` passes are always timed; after them timing goes on while fewer than ``target`` passes
    were timed and less than ``budget_s`` seconds went by since the first timed pass.
    """
    def more(times: list[float], start: float) -> bool:
        return len(times) < repeats or (len(times) < target and time.perf_counter() - start < budget_s)

    return _timed_passes(model, batch, warmup=warmup, passes=1, context=context, more=more)


@torch.inference_mode()
def measure_throughput(model: nn.Module, batch: torch.Tensor, *, warmup: int, repeats: int,
                       batches_per_repeat: int = BATCHES_PER_THROUGHPUT_REPEAT,
                       context: CallContext = _plain) -> Samples:
    """Seconds of each repeat of ``batches_per_repeat`` back-to-back passes, one synchronize per repeat.

    Throughput is ``batch * batches_per_repeat * repeats / total`` of the returned samples.
    """
    return _timed_passes(model, batch, warmup=warmup, passes=batches_per_repeat, context=context,
                         more=lambda times, _start: len(times) < repeats)


def example_batch(loader: Iterable[tuple[torch.Tensor, torch.Tensor]], batch_size: int,
                  device: torch.device) -> torch.Tensor:
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
