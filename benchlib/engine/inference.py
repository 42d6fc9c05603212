"""Inference timing: latency of one forward pass, and throughput of back-to-back passes.

Latency: each repeat is its own timed region, synchronized at both ends, on inputs already on the
device; p50/p90/p99 come from the repeats. A series times at least its ``repeats`` and then goes on
until it holds ``target`` samples (enough for an honest p99) or its time budget is spent, so a fast
call gets its p99 and a slow one stays bounded in time. Throughput: batches run back to back with one
synchronize at the end of each repeat, so the host queues the next batch while the device works, as a
serving loop does; samples over the summed repeat times, the same definition as training throughput. A
throughput series times at least ``THROUGHPUT_MIN_REPEATS`` repeats and goes on to its ``repeats`` only
within its budget: at 5 batches a repeat, 50 repeats of a slow working batch took 13 minutes on a busy host.
Autocast is entered and left around every call, so each call pays its weight casts. A pass over the
test set with its DataLoader is evaluation throughput, not latency (see ``train.evaluate``).

Every series says how far it got through ``tick`` (a progress line), at most once a second: what it times, the
samples it has of the ones it needs, and for how long it has run.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from ..env.devices import synchronize
from ..instruments.samples import Samples
from ..log import ProgressFn
from ..store.schema import BATCHES_PER_THROUGHPUT_REPEAT
from .hooks import step_starts

CallContext = Callable[[], AbstractContextManager[object]]
# Samples a latency series goes on to within its time budget: p99 needs 299 for an interval at all, and at
# 1000 its 95% interval runs between the 984th and the 997th sample, clear of the few slowest calls.
LATENCY_TARGET_SAMPLES = 1000
# Throughput repeats timed however long they take (a median and an IQR of them); past them a series goes on to its
# repeats only within its time budget.
THROUGHPUT_MIN_REPEATS = 5
TICK_S = 1.0  # the least time between two progress reports of one series


def _plain() -> AbstractContextManager[object]:
    return nullcontext()


@dataclass(frozen=True)
class Series:
    """How long one timing series runs, and how far it got in words.

    At least ``minimum`` samples, however long they take; then on to ``goal`` while less than ``budget_s``
    went by since the first timed sample.
    """

    label: str  # what it times: "latency at batch 1"
    unit: str  # what one sample is: "passes", "repeats of 5 batches"
    minimum: int
    goal: int
    budget_s: float = 0.0

    def more(self, n: int, elapsed_s: float) -> bool:
        return n < self.minimum or (n < self.goal and elapsed_s < self.budget_s)

    def status(self, n: int, elapsed_s: float) -> str:
        """'latency at batch 1: 120/1000 passes, 1.4 s of up to 2 s' while it goes on past its minimum within its
        budget; else what it stops at: 'latency at batch 64: 12/50 passes, 31.0 s'."""
        if n >= self.minimum and self.goal > self.minimum and elapsed_s < self.budget_s:
            return f"{self.label}: {n}/{self.goal} {self.unit}, {elapsed_s:.1f} s of up to {self.budget_s:g} s"
        return f"{self.label}: {n}/{max(n, self.minimum)} {self.unit}, {elapsed_s:.1f} s"

    def plan(self) -> str:
        """'at least 50 passes, up to 1000 within 2 s'."""
        if self.goal <= self.minimum or self.budget_s <= 0:
            return f"{self.minimum} {self.unit}"
        return f"at least {self.minimum} {self.unit}, up to {self.goal} within {self.budget_s:g} s"


def latency_series(batch_size: int, repeats: int, budget_s: float, target: int = LATENCY_TARGET_SAMPLES) -> Series:
    """A latency series: ``repeats`` passes, then on to ``target`` within ``budget_s``."""
    return Series(f"latency at batch {batch_size}", "passes", repeats, max(repeats, target), budget_s)


def throughput_series(batch_size: int, repeats: int, budget_s: float,
                      batches_per_repeat: int = BATCHES_PER_THROUGHPUT_REPEAT) -> Series:
    """The throughput series: ``THROUGHPUT_MIN_REPEATS`` repeats (``repeats`` where fewer), then on to ``repeats``
    within ``budget_s``."""
    return Series(f"throughput at batch {batch_size}", f"repeats of {batches_per_repeat} batches",
                  min(repeats, THROUGHPUT_MIN_REPEATS), repeats, budget_s)


def _ticking(tick: ProgressFn | None) -> Callable[[Callable[[], str]], None]:
    """``tick`` at most every ``TICK_S`` (the text made only when it is said)."""
    last = time.monotonic()

    def maybe(text: Callable[[], str]) -> None:
        nonlocal last
        if tick is not None and time.monotonic() - last >= TICK_S:
            last = time.monotonic()
            tick(text())
    return maybe


def _timed_passes(model: nn.Module, batch: torch.Tensor, *, warmup: int, passes: int, context: CallContext,
                  series: Series, tick: ProgressFn | None = None) -> Samples:
    """Warm up, then time samples of ``passes`` back-to-back forward passes, one synchronize each, for as long as
    ``series`` says: the one timing loop behind latency and throughput. ``tick`` hears how far it got."""
    model.eval()
    device = batch.device
    say = _ticking(tick)
    t_warm = time.perf_counter()

    def warming(done: int) -> str:
        return f"warmup at batch {batch.shape[0]}: {done}/{warmup} passes, {time.perf_counter() - t_warm:.1f} s"

    for done in range(1, warmup + 1):
        with context():
            model(batch)
        say(functools.partial(warming, done))
    synchronize(device)
    times: list[float] = []
    start = time.perf_counter()
    while series.more(len(times), time.perf_counter() - start):
        step_starts("forward")
        t0 = time.perf_counter()
        for _ in range(passes):
            with context():
                model(batch)
        synchronize(device)
        times.append(time.perf_counter() - t0)
        say(lambda: series.status(len(times), time.perf_counter() - start))
    return Samples.of(times)


@torch.inference_mode()
def measure_latency(model: nn.Module, batch: torch.Tensor, *, warmup: int, repeats: int,
                    context: CallContext = _plain, budget_s: float = 0.0, target: int = 0,
                    tick: ProgressFn | None = None) -> Samples:
    """Seconds per forward pass of ``batch`` (already on the model's device), each pass synchronized.

    ``repeats`` passes are always timed; after them timing goes on while fewer than ``target`` passes
    were timed and less than ``budget_s`` seconds went by since the first timed pass. ``tick`` hears how far
    it got (``latency at batch 1: 120/1000 passes, 1.4 s of up to 2 s``).
    """
    return _timed_passes(model, batch, warmup=warmup, passes=1, context=context,
                         series=latency_series(batch.shape[0], repeats, budget_s, target), tick=tick)


@torch.inference_mode()
def measure_throughput(model: nn.Module, batch: torch.Tensor, *, warmup: int, repeats: int,
                       batches_per_repeat: int = BATCHES_PER_THROUGHPUT_REPEAT,
                       context: CallContext = _plain, budget_s: float | None = None,
                       tick: ProgressFn | None = None) -> Samples:
    """Seconds of each repeat of ``batches_per_repeat`` back-to-back passes, one synchronize per repeat.

    Throughput is ``batch * batches_per_repeat * repeats / total`` of the returned samples. Without ``budget_s``
    exactly ``repeats`` repeats; with it ``THROUGHPUT_MIN_REPEATS`` (``repeats`` where fewer), then on to
    ``repeats`` while less than ``budget_s`` went by. ``tick`` hears how far it got.
    """
    series = (Series(f"throughput at batch {batch.shape[0]}", f"repeats of {batches_per_repeat} batches", repeats,
                     repeats) if budget_s is None
              else throughput_series(batch.shape[0], repeats, budget_s, batches_per_repeat))
    return _timed_passes(model, batch, warmup=warmup, passes=batches_per_repeat, context=context, series=series,
                         tick=tick)


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
