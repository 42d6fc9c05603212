"""The one training step: every number benchlib reports about training comes from here.

Measuring, tuning and profiling all train through :func:`train_step` with the configuration's knobs
applied (autocast, gradient scaler, channels_last inputs), so a tuned or profiled ``amp_bf16`` variant
is the same computation as the measured one. Parts of the step run under ``region(name)`` labels so a
profiler can name where the time went; outside the profiler the labels cost nothing.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn

from ..spec.knobs import Knobs
from ..spec.settings import RunSettings
from .knobs import make_grad_scaler, precision_context

Region = Callable[[str], AbstractContextManager[object]]


def no_region(_name: str) -> AbstractContextManager[object]:
    return nullcontext()


def optimizer_impl(s: RunSettings, device: torch.device) -> str:
    """The optimizer kernels a configuration runs: ``s.optimizer_impl``, with ``auto`` resolved.

    ``auto`` on CUDA is ``fused`` for SGD and Adam: a fused kernel takes the gradient scaler's inf check on the
    device, so an fp16 row pays no per-step host read its fp32 and bf16 baselines do not (SGD's momentum
    buffers are zeroed before its first step: see :func:`make_optimizer`). Each optimizer runs the same
    kernels at every precision, so an fp16 row and its fp32 baseline differ by precision alone.
    Elsewhere it is torch's own choice (``default``).
    """
    if s.optimizer_impl != "auto":
        return s.optimizer_impl
    if device.type != "cuda":
        return "default"
    return "fused"


def make_optimizer(model: nn.Module, s: RunSettings, device: torch.device | None = None) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    impl = optimizer_impl(s, device or next(model.parameters()).device)
    kernels: dict[str, Any] = {"fused": {"fused": True}, "foreach": {"foreach": True},
                               "for_loop": {"foreach": False}, "default": {}}[impl]
    if s.optimizer == "adam":
        return torch.optim.Adam(params, lr=s.lr, weight_decay=s.weight_decay, **kernels)
    sgd = torch.optim.SGD(params, lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay, nesterov=s.nesterov,
                          **kernels)
    if impl == "fused" and s.momentum > 0:
        zero_momentum(sgd)
    return sgd


def zero_momentum(sgd: torch.optim.SGD) -> None:
    """Give every parameter a zero momentum buffer before the first step.

    torch's fused SGD makes the buffers with ``empty_like`` on its first step and fills them in the kernel;
    when the fp16 gradient scaler skips that step (usual: its scale starts at 2**16) the kernel writes
    nothing, the buffers keep whatever memory held (1e30 or inf on a CPU) and the next step diverges. From
    zero, the first step's buffer is 0 * momentum + grad = grad, exactly what plain SGD's first step keeps
    (dampening 0), and a skipped step leaves zeros: fused SGD stays bit-identical to the for-loop kernels.
    """
    for group in sgd.param_groups:
        for p in group["params"]:
            sgd.state[p]["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)


@dataclass
class Trainer:
    """What one training step needs: the network that runs, its optimizer and loss, the knobs and scaler."""

    net: nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    knobs: Knobs
    scaler: torch.amp.GradScaler | None = None
    criterion: nn.Module = field(default_factory=nn.CrossEntropyLoss)

    @classmethod
    def of(cls, net: nn.Module, model: nn.Module, s: RunSettings, device: torch.device) -> Trainer:
        """A trainer for ``net`` (the model, or its DDP/compiled wrapper) optimizing ``model``'s parameters."""
        scaler = make_grad_scaler(s.knobs, device) if s.grad_scaler else None  # false: fp16 unscaled, as timm's
        return cls(net, make_optimizer(model, s, device), device, s.knobs, scaler)


def in_memory_format(x: torch.Tensor, knobs: Knobs) -> torch.Tensor:
    """An input batch in the variant's memory format (channels_last for 4-D inputs when asked)."""
    if knobs.memory_format == "channels_last" and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x


def to_device(x: torch.Tensor, y: torch.Tensor, device: torch.device,
              knobs: Knobs) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch on the device (asynchronous where the memory is pinned), in the variant's memory format."""
    if x.device != device:
        x = x.to(device, non_blocking=True)
    if y.device != device:
        y = y.to(device, non_blocking=True)
    return in_memory_format(x, knobs), y


class StepOutput(NamedTuple):
    """What a step leaves on the device: its loss, the logits and the labels they are scored against."""

    loss: torch.Tensor
    logits: torch.Tensor
    target: torch.Tensor


def train_step(t: Trainer, x: torch.Tensor, y: torch.Tensor, region: Region = no_region) -> StepOutput:
    """One optimization step on a batch; what it returns stays on the device (no synchronize)."""
    with region("h2d_copy"):
        x, y = to_device(x, y, t.device, t.knobs)
    with region("optimizer_step"):
        t.optimizer.zero_grad(set_to_none=True)
    with region("forward"), precision_context(t.knobs, t.device):
        logits = t.net(x)
        loss = t.criterion(logits, y)
    with region("backward"):
        (t.scaler.scale(loss) if t.scaler is not None else loss).backward()
    with region("optimizer_step"):
        if t.scaler is not None:  # fp16: the loss was scaled so small gradients do not underflow
            t.scaler.step(t.optimizer)
            t.scaler.update()
        else:
            t.optimizer.step()
    return StepOutput(loss, logits, y)
