"""FLOPs of one training step per leaf module and phase, the backward credited to the layer it differentiates.

``FlopCounterMode.get_flop_counts()`` credits a backward op to the modules whose backward hooks are open
when it runs; on a residual network that credits a downsample branch with the main branch's backward (the
leaves summed to 1.2x the total on resnet18). Here each op is counted with the same formulas (torch's
registry and benchlib's grouped-convolution correction), and credited:

- in the forward, to the leaf module whose ``forward`` is running;
- in the backward, to the leaf that recorded the autograd node now running
  (``torch._C._current_autograd_node``): a leaf's nodes are the ones numbered while its ``forward`` ran,
  bracketed by two throwaway nodes made in its hooks.

What no leaf recorded (the loss, a residual add in a parent's ``forward``) is ``UNATTRIBUTED``, so the
layers and that row sum to the step's counted FLOPs.
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, shape_wrapper

from ..spec.vocab import UNATTRIBUTED_LAYER
from .counters import FLOP_FORMULA_OVERRIDES, counting_copy, leaf_modules, random_labels

UNATTRIBUTED = UNATTRIBUTED_LAYER
Key = tuple[str, str]  # (layer, phase)
# torch's formulas, with benchlib's corrections taking tensors' shapes as FlopCounterMode wraps them
_FORMULAS: dict[Any, Any] = {**flop_registry, **{op: shape_wrapper(f) for op, f in FLOP_FORMULA_OVERRIDES.items()}}


def _next_sequence_nr() -> int:
    """The number autograd gives the next node it records (a throwaway node takes it)."""
    grad_fn = torch.ones(1, requires_grad=True).view(1).grad_fn
    assert grad_fn is not None
    return int(grad_fn._sequence_nr())


class _Numbering:
    """Which leaf recorded a node: per leaf call, the node numbers taken while its ``forward`` ran."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.spans: list[tuple[int, int, str]] = []
        self.running: list[tuple[str, int]] = []

    def enter(self, name: str) -> None:
        self.running.append((name, _next_sequence_nr()))

    def leave(self) -> None:
        name, low = self.running.pop()
        high = _next_sequence_nr()
        i = bisect.bisect(self.starts, low)
        self.starts.insert(i, low)
        self.spans.insert(i, (low, high, name))

    def layer_of(self, sequence_nr: int) -> str:
        i = bisect.bisect_right(self.starts, sequence_nr) - 1
        if i >= 0 and self.spans[i][0] < sequence_nr < self.spans[i][1]:
            return self.spans[i][2]
        return UNATTRIBUTED

    @property
    def current(self) -> str:
        return self.running[-1][0] if self.running else UNATTRIBUTED


@contextmanager
def _numbered(leaves: Mapping[str, nn.Module]) -> Iterator[_Numbering]:
    numbering = _Numbering()
    handles = []
    for name, module in leaves.items():
        handles.append(module.register_forward_pre_hook(lambda m, a, _n=name: numbering.enter(_n)))
        handles.append(module.register_forward_hook(lambda m, a, o: numbering.leave()))
    try:
        yield numbering
    finally:
        for handle in handles:
            handle.remove()


class _LayerFlops(TorchDispatchMode):
    """Counts each op's FLOPs with its formula and credits them to (layer, phase)."""

    def __init__(self, numbering: _Numbering) -> None:
        super().__init__()
        self.numbering = numbering
        self.flops: dict[Key, int] = defaultdict(int)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        formula = _FORMULAS.get(packet)
        if formula is not None:
            node = torch._C._current_autograd_node()
            key = ((self.numbering.layer_of(int(node._sequence_nr())), "backward") if node is not None
                   else (self.numbering.current, "forward"))
            self.flops[key] += int(formula(*args, **kwargs, out_val=out))
        return out


def count_layer_flops(model: nn.Module, x: torch.Tensor, num_classes: int) -> dict[Key, int]:
    """FLOPs of one training step (forward and cross-entropy backward at the batch of ``x``) per
    (leaf module, phase), plus ``(UNATTRIBUTED, phase)`` for what no leaf recorded. Counted on a float32
    CPU copy with every parameter trainable, as ``counters.count_train_per_sample`` counts the whole step."""
    copy = counting_copy(model)
    copy.train()
    for p in copy.parameters():
        p.requires_grad_(True)
    labels = random_labels(x.shape[0], num_classes)
    with torch.random.fork_rng(devices=[]), _numbered(leaf_modules(copy)) as numbering:
        counting = _LayerFlops(numbering)
        with counting:
            logits = copy(x)
            loss = nn.functional.cross_entropy(logits.reshape(x.shape[0], -1), labels)
            loss.backward()
    return dict(counting.flops)
