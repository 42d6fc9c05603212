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
layers and that row sum to the step's counted FLOPs. The optimizer's step, counted when an optimizer is
given, is a row of its own (``OPTIMIZER``).

Memory traffic is counted the same way, as elements: each op reads its tensor inputs and writes its
outputs and the inputs it mutates, once each (a view moves nothing). That is the traffic of an op that
finds nothing in cache, the roofline's assumption; a layer whose tensors fit in the last-level cache
moves them faster (the table flags it). Elements, not bytes: the count runs in float32 and the run's
dtype sets the bytes.
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry, shape_wrapper

from ..spec.vocab import OPTIMIZER_LAYER, UNATTRIBUTED_LAYER
from .counters import FLOP_FORMULA_OVERRIDES, counting_copy, leaf_modules, random_labels

UNATTRIBUTED = UNATTRIBUTED_LAYER
OPTIMIZER = OPTIMIZER_LAYER
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


# Ops that allocate, alias or read a scalar back: no tensor data moves through them.
_NO_TRAFFIC = frozenset({"detach", "lift_fresh", "empty", "empty_like", "empty_strided", "new_empty",
                         "new_empty_strided", "_local_scalar_dense", "set_", "resize_", "alias"})


def _elements(tree: Any) -> int:
    return sum(t.numel() for t in tree_leaves(tree) if isinstance(t, torch.Tensor))


def _traffic(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> int:
    """Elements an op reads and writes: every tensor argument is read (an ``out=`` buffer is only written),
    a mutated one is written too, and each result written unless it is a mutated argument handed back
    (``add_`` returns its ``self``; ``_foreach_add_`` returns nothing)."""
    schema = func._schema
    positional = dict(zip((a.name for a in schema.arguments), args))
    moved = 0
    for argument in schema.arguments:
        value = positional.get(argument.name, kwargs.get(argument.name))
        n = _elements(value)
        mutated = argument.alias_info is not None and argument.alias_info.is_write
        moved += n * ((0 if argument.is_out else 1) + (1 if mutated else 0))
    results = out if isinstance(out, (tuple, list)) and len(schema.returns) > 1 else (out,)
    for returned, value in zip(schema.returns, results):
        if returned.alias_info is None:
            moved += _elements(value)
    return moved


class _LayerWork(TorchDispatchMode):
    """Counts each op's FLOPs with its formula and the elements it reads and writes, credited to
    (layer, phase)."""

    def __init__(self, numbering: _Numbering) -> None:
        super().__init__()
        self.numbering = numbering
        self.flops: dict[Key, int] = defaultdict(int)
        self.elements: dict[Key, int] = defaultdict(int)
        self.stepping = False  # inside the optimizer's step
        self.paused = False

    def _key(self) -> Key:
        if self.stepping:
            return (OPTIMIZER, "optimizer")
        node = torch._C._current_autograd_node()
        if node is not None:
            return (self.numbering.layer_of(int(node._sequence_nr())), "backward")
        return (self.numbering.current, "forward")

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused:
            return out
        packet = func._overloadpacket
        formula = _FORMULAS.get(packet)
        key = self._key()
        if formula is not None:
            self.flops[key] += int(formula(*args, **kwargs, out_val=out))
        if not func.is_view and packet.__name__ not in _NO_TRAFFIC:
            self.elements[key] += _traffic(func, args, kwargs, out)
        return out


@dataclass(frozen=True)
class LayerWork:
    """One training step's work per (layer, phase): FLOPs and the elements its ops read and write."""

    flops: dict[Key, int]
    elements: dict[Key, int]

    def keys(self) -> list[Key]:
        return sorted(set(self.flops) | set(self.elements))


def count_layer_work(model: nn.Module, x: torch.Tensor, num_classes: int,
                     optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None) -> LayerWork:
    """FLOPs and traffic of one training step (forward and cross-entropy backward at the batch of ``x``,
    then ``optimizer``'s step when given) per (leaf module, phase), plus ``(UNATTRIBUTED, phase)`` for what
    no leaf recorded and ``(OPTIMIZER, "optimizer")``. Counted on a float32 CPU copy with every parameter
    trainable, as ``counters.count_train_per_sample`` counts the whole step."""
    copy = counting_copy(model)
    copy.train()
    for p in copy.parameters():
        p.requires_grad_(True)
    labels = random_labels(x.shape[0], num_classes)
    step = optimizer(copy) if optimizer is not None else None
    with torch.random.fork_rng(devices=[]), _numbered(leaf_modules(copy)) as numbering:
        counting = _LayerWork(numbering)
        with counting:
            logits = copy(x)
            loss = nn.functional.cross_entropy(logits.reshape(x.shape[0], -1), labels)
            loss.backward()
            if step is not None:
                counting.stepping = True
                counting.paused = True  # the first step creates the optimizer's state: not a step's traffic
                step.step()
                counting.paused = False
                step.step()
    return LayerWork(flops=dict(counting.flops), elements=dict(counting.elements))


def count_layer_flops(model: nn.Module, x: torch.Tensor, num_classes: int) -> dict[Key, int]:
    """FLOPs of one training step per (leaf module, phase) (``count_layer_work`` without an optimizer)."""
    return count_layer_work(model, x, num_classes).flops


def count_forward_work(model: nn.Module, x: torch.Tensor) -> LayerWork:
    """FLOPs and traffic of one inference forward (eval mode, no backward) at the batch of ``x`` per leaf
    module, phase ``forward``: the work a batch-1 latency call does, counted like a training step's."""
    copy = counting_copy(model)
    copy.eval()
    with torch.random.fork_rng(devices=[]), _numbered(leaf_modules(copy)) as numbering:
        counting = _LayerWork(numbering)
        with counting:
            copy(x)
    return LayerWork(flops=dict(counting.flops), elements=dict(counting.elements))
