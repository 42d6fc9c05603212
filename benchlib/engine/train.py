"""Training and evaluation loops that measure themselves as benchlib's method asks.

Warmup steps run and train but are left out of the statistics; step times come from
:class:`~benchlib.instruments.timing.StepTimer` (no synchronize per step on GPUs); the time each step
waited for its batch is kept apart; epoch time is a synchronized wall-clock region that includes the
input pipeline. Every step is :func:`benchlib.engine.step.train_step`.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil
import torch
from torch import nn

from ..env.devices import synchronize
from ..errors import MemoryCeilingError, NonFiniteLossError
from ..instruments.timing import RegionClock, StepTimer
from ..log import ProgressFn
from ..spec.knobs import Knobs
from ..spec.settings import RunSettings, compile_warm_calls
from .hooks import step_starts
from .knobs import precision_context
from .step import Trainer, in_memory_format, to_device, train_step

HEARTBEAT_S = 1.0  # the least time between two heartbeat lines


@dataclass
class TrainResult:
    """Raw samples of one training run (seconds), and what it reached."""

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
    # host wall time from the first timed step (device drained) to the end, synchronized: the timeline the
    # data waits are on (step times on a GPU are the device's own, which overlaps the host's waiting)
    timed_wall_s: float = math.nan

    @property
    def samples_per_s(self) -> float:
        """Training throughput so far: samples over the summed timed step times (NaN while all were warmup)."""
        total = sum(self.step_s)
        return self.timed_samples / total if total > 0 else math.nan


AfterEpoch = Callable[[int, TrainResult], None]


def _global_losses(losses: list[torch.Tensor]) -> list[float]:
    """Per-step losses of the whole (global) batch: averaged over data-parallel ranks, once per epoch."""
    if not losses:
        return []
    stacked = torch.stack(losses).float()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(stacked)
        stacked /= torch.distributed.get_world_size()
    return [float(v) for v in stacked.cpu()]


def check_step(loss: torch.Tensor, step: int, memory_limit_bytes: int | None) -> None:
    """Per-step guard on the host, after the step's end was recorded so it never counts in its time.

    It never reads the loss: that would copy it to the host and synchronize every step, so the host
    could no longer queue work ahead of the device. The loss is checked at the epoch's end
    (:func:`check_losses`).
    """
    if memory_limit_bytes is not None:
        rss = psutil.Process().memory_info().rss
        if rss > memory_limit_bytes:
            raise MemoryCeilingError(f"RSS {rss} bytes passed memory_limit_bytes {memory_limit_bytes} at step {step}")


def check_losses(losses: list[float], first_step: int) -> None:
    """Raise NonFiniteLossError naming the first step whose loss was NaN or infinite (read once per epoch)."""
    for i, value in enumerate(losses):
        if not math.isfinite(value):
            raise NonFiniteLossError(f"non-finite training loss ({value}) at step {first_step + i}")


def _new_shuffle(loader: Iterable, epoch: int) -> None:
    """A DistributedSampler's new shuffle for ``epoch``, the same on every rank (nothing for other loaders)."""
    set_epoch = getattr(getattr(loader, "sampler", None), "set_epoch", None)
    if set_epoch is not None:
        set_epoch(epoch)


def _keep_step_times(result: TrainResult, times: list[float], step: int, warmup_steps: int,
                     batch_sizes: list[int]) -> None:
    """An epoch's step times (its last ``len(times)`` steps, ending before ``step``) into the warmup's or the
    timed steps', with the samples the timed ones trained."""
    first = step - len(times)
    for i, seconds in enumerate(times):
        if first + i < warmup_steps:
            result.warmup_step_s.append(seconds)
        else:
            result.step_s.append(seconds)
            result.timed_samples += batch_sizes[i]


def train(t: Trainer, loader: Iterable, s: RunSettings, batches_per_epoch: int, *,
          progress: ProgressFn | None = None, heartbeat: ProgressFn | None = None,
          after_epoch: AfterEpoch | None = None, at_timed_start: Callable[[], None] | None = None) -> TrainResult:
    """Train for ``s.epochs`` epochs (or ``s.train_steps`` timed steps) and time every step.

    ``progress`` gets one line per epoch; ``heartbeat`` (a terminal's status line) the step reached, at
    most once a second, read from host counters only (nothing is synchronized for it).

    ``train_accuracy`` is the running top-1 accuracy over the last epoch's batches (augmented, as the
    model saw them). ``after_epoch`` sees each epoch's figures so far (and may raise to stop, as
    pruning does). ``at_timed_start`` is called once, with the device drained, just before the first timed
    step: an energy window opened there leaves the warmup and compilation out, as the step times do.
    """
    t.net.train()
    result = TrainResult()
    total = s.warmup_steps + s.train_steps if s.train_steps else s.epochs * batches_per_epoch
    epochs = math.ceil(total / batches_per_epoch)
    timer = StepTimer(t.device)
    result.sync_per_step = timer.sync_per_step
    step = 0
    timed_t0: float | None = None
    last_report = time.monotonic()
    for epoch in range(epochs):
        correct = torch.zeros((), dtype=torch.long, device=t.device)
        seen = 0
        loss_sum = torch.zeros((), device=t.device)
        steps_this_epoch = min(batches_per_epoch, total - step)
        batch_sizes: list[int] = []
        losses: list[torch.Tensor] = []
        _new_shuffle(loader, epoch)
        t.net.train()
        with RegionClock(t.device) as clock:
            batches = iter(loader)
            for _ in range(steps_this_epoch):
                step_starts("train")  # a tool's moment before the step (engine.hooks), outside every timer
                t_wait = time.perf_counter()
                x, y = next(batches)
                wait = time.perf_counter() - t_wait
                if step == s.warmup_steps:
                    synchronize(t.device)  # once a run: the warmup's queued work is not the timed window's
                    if at_timed_start is not None:
                        at_timed_start()
                    timed_t0 = time.perf_counter()
                timer.start()
                loss, logits, y = train_step(t, x, y)
                timer.stop()
                check_step(loss, step, s.memory_limit_bytes)
                correct += (logits.detach().argmax(1) == y).sum()
                loss_sum += loss.detach()
                losses.append(loss.detach())
                seen += int(y.shape[0])
                result.total_samples += int(y.shape[0])
                batch_sizes.append(int(y.shape[0]))
                if step >= s.warmup_steps:
                    result.data_wait_s.append(wait)
                step += 1
                if heartbeat and time.monotonic() - last_report > HEARTBEAT_S:
                    heartbeat(f"epoch {epoch + 1}/{epochs} step {step}/{total}")
                    last_report = time.monotonic()
            del batches
        _keep_step_times(result, timer.collect(), step, s.warmup_steps, batch_sizes)
        compiles_here = epoch == 0 and t.knobs.compile != "off"  # compile time is compile_s, not epoch time
        if steps_this_epoch == batches_per_epoch and not compiles_here:
            result.epoch_s.append(clock.seconds)
        epoch_losses = _global_losses(losses)
        check_losses(epoch_losses, step - len(epoch_losses))
        result.train_accuracy = float(correct.item()) / max(1, seen)
        result.final_loss = float(loss_sum.item()) / max(1, steps_this_epoch)
        result.loss_per_step += epoch_losses
        result.total_steps = step
        if progress:
            progress(f"epoch {epoch + 1}/{epochs} done in {clock.seconds:.1f} s, loss {result.final_loss:.3f}, "
                     f"running accuracy {result.train_accuracy:.1%}")
        if after_epoch is not None:
            after_epoch(epoch, result)
    if timed_t0 is not None:  # the last epoch's clock synchronized at its end: the device's work is in
        result.timed_wall_s = time.perf_counter() - timed_t0
    return result


@dataclass(frozen=True)
class EvalResult:
    accuracy: float
    seconds: float
    samples: int

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else math.nan


def _batch_sizes_of(loader: Iterable, first: int) -> list[int]:
    """The batch sizes a loader yields: its full batch and, where the data does not divide, its last one."""
    dataset, batch_size = getattr(loader, "dataset", None), getattr(loader, "batch_size", None)
    sizes = [first]
    if dataset is not None and batch_size and not getattr(loader, "drop_last", False):
        last = len(dataset) % batch_size
        if last and last != first:
            sizes.append(last)
    return sizes


def warm_input_shapes(model: nn.Module, loader: Iterable, device: torch.device, knobs: Knobs) -> None:
    """Run the untimed forward passes each input shape the loader will yield needs before it runs at pace.

    The first pass of each shape is where a compiled model compiles and cuDNN autotunes; a compile mode with
    CUDA graphs (``reduce-overhead``, ``max-autotune``) records its graph on the second
    (``compile_warm_calls``). Timing either would put them inside an evaluation figure.
    """
    x, _ = next(iter(loader))
    for size in _batch_sizes_of(loader, int(x.shape[0])):
        inputs = in_memory_format(x[:size].to(device, non_blocking=True), knobs)
        for _ in range(compile_warm_calls(knobs.compile)):
            with precision_context(knobs, device):
                model(inputs)


@torch.inference_mode()
def evaluate(model: nn.Module, loader: Iterable, device: torch.device, knobs: Knobs | None = None) -> EvalResult:
    """Top-1 accuracy over a whole loader; the pass is timed with its data pipeline (val throughput).

    Each input shape is warmed untimed first (compilation, autotuning). With knobs, inputs follow the
    variant's memory format and precision (autocast).
    """
    model.eval()
    knobs = knobs or Knobs()
    warm_input_shapes(model, loader, device, knobs)
    correct = torch.zeros((), dtype=torch.long, device=device)
    samples = 0
    with RegionClock(device) as clock:
        for x, y in loader:
            x, y = to_device(x, y, device, knobs)
            with precision_context(knobs, device):
                logits = model(x)
            correct += (logits.argmax(1) == y).sum()
            samples += int(y.shape[0])
    return EvalResult(float(correct.item()) / max(1, samples), clock.seconds, samples)
