"""Training and evaluation loops that measure themselves as MEASUREMENT.md asks.

Warmup steps run and train but are left out of the statistics; step times come from
:class:`~benchlib.timing.StepTimer` (no synchronize per step on GPUs); the time each step waited for
its batch is kept apart; epoch time is a synchronized wall-clock region that includes the pipeline.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import psutil
import torch
from torch import nn

from .config import RunSettings
from .timing import RegionClock, StepTimer
from .variants import make_grad_scaler, precision_context, variant_of

ProgressFn = Callable[[str], None]


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite: the configuration is unstable (status ``unstable``)."""


class MemoryCeilingError(MemoryError):
    """The process RSS passed the configured CPU memory ceiling (status ``oom``)."""


def _global_losses(losses: list[torch.Tensor]) -> list[float]:
    """Per-step losses of the whole (global) batch: averaged over data-parallel ranks, once per epoch."""
    if not losses:
        return []
    stacked = torch.stack(losses).float()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(stacked)
        stacked /= torch.distributed.get_world_size()
    return [float(v) for v in stacked.cpu()]


def _check_step(loss: torch.Tensor, step: int, memory_limit_bytes: int | None) -> None:
    """Per-step guards, run after the step's end was recorded so they never count in its time."""
    if not bool(torch.isfinite(loss.detach())):
        raise NonFiniteLossError(f"non-finite training loss ({float(loss.detach())}) at step {step}")
    if memory_limit_bytes is not None:
        rss = psutil.Process().memory_info().rss
        if rss > memory_limit_bytes:
            raise MemoryCeilingError(f"RSS {rss} bytes passed memory_limit_bytes {memory_limit_bytes} at step {step}")


def make_optimizer(model: nn.Module, s: RunSettings) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if s.optimizer == "adam":
        return torch.optim.Adam(params, lr=s.lr, weight_decay=s.weight_decay)
    return torch.optim.SGD(params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay)


@dataclass
class TrainResult:
    step_s: list[float] = field(default_factory=list)
    warmup_step_s: list[float] = field(default_factory=list)
    data_wait_s: list[float] = field(default_factory=list)
    epoch_s: list[float] = field(default_factory=list)
    total_steps: int = 0
    timed_samples: int = 0
    total_samples: int = 0
    train_accuracy: float = math.nan
    final_loss: float = math.nan
    loss_per_step: list[float] = field(default_factory=list)
    sync_per_step: bool = False


def _to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    return x if x.device == device else x.to(device, non_blocking=True)


def train(
    model: nn.Module,
    loader: Iterable,
    device: torch.device,
    s: RunSettings,
    batches_per_epoch: int,
    *,
    progress: ProgressFn | None = None,
) -> TrainResult:
    """Train ``model`` for ``s.epochs`` epochs (or ``s.train_steps`` timed steps) and time every step.

    ``train_accuracy`` is the running top-1 accuracy over the last epoch's batches (augmented, as
    the model saw them).
    """
    criterion = nn.CrossEntropyLoss()
    optimizer = make_optimizer(model, s)
    variant = variant_of(s)
    scaler = make_grad_scaler(variant, device)
    channels_last = s.memory_format == "channels_last"
    model.train()
    result = TrainResult()
    total = s.warmup_steps + s.train_steps if s.train_steps else s.epochs * batches_per_epoch
    epochs = math.ceil(total / batches_per_epoch)
    timer = StepTimer(device)
    result.sync_per_step = timer.sync_per_step
    step = 0
    last_report = time.monotonic()
    for epoch in range(epochs):
        correct = torch.zeros((), dtype=torch.long, device=device)
        seen = 0
        loss_sum = torch.zeros((), device=device)
        steps_this_epoch = min(batches_per_epoch, total - step)
        batch_sizes: list[int] = []
        losses: list[torch.Tensor] = []
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):  # DistributedSampler: a new shuffle each epoch, the same on every rank
            sampler.set_epoch(epoch)
        with RegionClock(device) as clock:
            batches = iter(loader)
            for _ in range(steps_this_epoch):
                t_wait = time.perf_counter()
                x, y = next(batches)
                wait = time.perf_counter() - t_wait
                timer.start()
                x, y = _to_device(x, device), _to_device(y, device)
                if channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                optimizer.zero_grad(set_to_none=True)
                with precision_context(variant, device):
                    out = model(x)
                    loss = criterion(out, y)
                if scaler is not None:  # fp16: scale the loss so small gradients do not underflow
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    loss.backward()
                    optimizer.step()
                timer.stop()
                _check_step(loss, step, s.memory_limit_bytes)
                correct += (out.detach().argmax(1) == y).sum()
                loss_sum += loss.detach()
                losses.append(loss.detach())
                seen += int(y.shape[0])
                result.total_samples += int(y.shape[0])
                batch_sizes.append(int(y.shape[0]))
                if step >= s.warmup_steps:
                    result.data_wait_s.append(wait)
                step += 1
                if progress and time.monotonic() - last_report > 5:
                    progress(f"epoch {epoch + 1}/{epochs} step {step}/{total}")
                    last_report = time.monotonic()
            del batches
        times = timer.collect()
        first = step - len(times)
        for i, t in enumerate(times):
            if first + i < s.warmup_steps:
                result.warmup_step_s.append(t)
            else:
                result.step_s.append(t)
                result.timed_samples += batch_sizes[i]
        if steps_this_epoch == batches_per_epoch:
            result.epoch_s.append(clock.seconds)
        result.train_accuracy = float(correct.item()) / max(1, seen)
        result.final_loss = float(loss_sum.item()) / max(1, steps_this_epoch)
        result.loss_per_step += _global_losses(losses)
        if progress:
            progress(f"epoch {epoch + 1}/{epochs} done in {clock.seconds:.2f} s, loss {result.final_loss:.4f}, "
                     f"running accuracy {result.train_accuracy:.3f}")
    result.total_steps = step
    return result


@dataclass(frozen=True)
class EvalResult:
    accuracy: float
    seconds: float
    samples: int

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else math.nan


@torch.inference_mode()
def evaluate(model: nn.Module, loader: Iterable, device: torch.device, s: RunSettings | None = None) -> EvalResult:
    """Top-1 accuracy over a whole loader; the pass is timed with its data pipeline (val throughput).

    With settings, inputs follow the variant's memory format and precision (autocast).
    """
    model.eval()
    variant = variant_of(s) if s is not None else None
    correct = torch.zeros((), dtype=torch.long, device=device)
    samples = 0
    with RegionClock(device) as clock:
        for x, y in loader:
            x, y = _to_device(x, device), _to_device(y, device)
            if variant is not None and variant.memory_format == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            with precision_context(variant, device) if variant is not None else contextlib.nullcontext():
                logits = model(x)
            correct += (logits.argmax(1) == y).sum()
            samples += int(y.shape[0])
    return EvalResult(float(correct.item()) / max(1, samples), clock.seconds, samples)
