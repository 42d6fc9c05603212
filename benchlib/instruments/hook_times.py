"""Where a CPU step's time goes layer by layer, from the host clock in module and autograd-node hooks.

On a CPU the host runs every layer, so its clock around a layer is the layer's time. ``torch.profiler``
records every operator besides, which costs the step 3-13% in training and up to 1.5x a batch-1 forward,
and costs an fp32 model more than its int8 copy or a small batch more per sample than a large one: the
split of two configurations' difference then does not add up to the difference of their plain steps. The
hooks here cost a few microseconds a layer.

A leaf module's forward is the time between its forward pre-hook and its forward hook. Its backward is the
time of the autograd nodes its forward recorded (found by walking from its outputs' nodes back to the nodes
its inputs came with, parameters' ``AccumulateGrad`` left out), each timed between the node's pre-hook and
its hook as the engine runs it. What no leaf holds (the loss, a residual add written in a parent's
``forward``, AccumulateGrad, the framework between layers) is the step less the layers, as with the
profiler (``layer_times``). Times are microseconds, in ``LAYER_TIME_COLUMNS``.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pandas as pd
import torch

from ..spec.vocab import UNATTRIBUTED_LAYER
from .layer_times import LAYER_TIME_COLUMNS


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def recorded_nodes(outputs: Any, before: set[Any]) -> list[Any]:
    """The autograd nodes a module's forward recorded: those reachable from its outputs' nodes, stopping at
    the nodes its inputs came with (``before``) and at parameters' ``AccumulateGrad``."""
    stack: list[Any] = [t.grad_fn for t in _tensors(outputs) if t.grad_fn is not None]
    seen: dict[int, Any] = {}
    while stack:
        node = stack.pop()
        if node is None or node in before or id(node) in seen or type(node).__name__ == "AccumulateGrad":
            continue
        seen[id(node)] = node
        stack.extend(next_node for next_node, _ in node.next_functions)
    return list(seen.values())


class HookTimer:
    """Per step, each leaf's forward and backward seconds and calls, and named regions timed by the caller.

    A hook does as little as it can (read the clock, append to a list: the module call's slow path with hooks
    costs about 3.5 us on its own, the timing about as much again); the times are paired up in ``step_rows``.
    """

    def __init__(self, leaves: Mapping[str, torch.nn.Module], clock: Callable[[], float] = time.perf_counter):
        self.leaves, self.clock = dict(leaves), clock
        self._marks: list[tuple[float, str, str]] = []  # (clock, layer, phase) at a start and at its end, in turn
        self._inputs: dict[str, set[Any]] = {}
        marks = self._marks
        # each layer's two node hooks made once, not per node and step: a backward mark is all they do
        self._node_hooks = {name: (lambda grad_outputs, name=name: marks.append((clock(), name, "backward")),
                                   lambda grad_inputs, grad_outputs, name=name: marks.append((clock(), name,
                                                                                               "backward")))
                            for name in self.leaves}

    def _before(self, name: str) -> Callable[..., None]:
        marks, clock, inputs = self._marks, self.clock, self._inputs

        def hook(module: torch.nn.Module, args: Any) -> None:
            if torch.is_grad_enabled():
                if len(args) == 1 and isinstance(args[0], torch.Tensor):  # a leaf's usual call: one tensor
                    node = args[0].grad_fn
                    inputs[name] = {node} if node is not None else set()
                else:
                    inputs[name] = {t.grad_fn for t in _tensors(args) if t.grad_fn is not None}
            marks.append((clock(), name, "forward"))
        return hook

    def _after(self, name: str) -> Callable[..., None]:
        marks, clock, inputs = self._marks, self.clock, self._inputs
        pre, post = self._node_hooks[name]

        def hook(module: torch.nn.Module, args: Any, out: Any) -> None:
            marks.append((clock(), name, "forward"))
            if torch.is_grad_enabled():
                for node in recorded_nodes(out, inputs.pop(name, set())):
                    node.register_prehook(pre)
                    node.register_hook(post)
        return hook

    @contextmanager
    def attached(self) -> Iterator[HookTimer]:
        """The hooks on every leaf while the block runs."""
        handles = [h for name, m in self.leaves.items()
                   for h in (m.register_forward_pre_hook(self._before(name)),
                             m.register_forward_hook(self._after(name)))]
        try:
            yield self
        finally:
            for h in handles:
                h.remove()

    @contextmanager
    def region(self, name: str, phase: str) -> Iterator[None]:
        """Time a block as a row of its own (the optimizer's step, the wait for the batch)."""
        self._marks.append((self.clock(), name, phase))
        try:
            yield
        finally:
            self._marks.append((self.clock(), name, phase))

    def step_rows(self, whole_s: float) -> pd.DataFrame:
        """The step just timed in ``LAYER_TIME_COLUMNS``, with what no row holds (``whole_s`` less the rows) as
        ``(unattributed)``; then clear for the next step. Leaves do not nest, so each row's marks alternate
        start and end."""
        seconds: dict[tuple[str, str], float] = {}
        calls: dict[tuple[str, str], int] = {}
        started: dict[tuple[str, str], float] = {}
        for at, layer, phase in self._marks:
            key = (layer, phase)
            if key in started:
                seconds[key] = seconds.get(key, 0.0) + at - started.pop(key)
                calls[key] = calls.get(key, 0) + 1
            else:
                started[key] = at
        self._marks.clear()
        rows = [{"layer": k[0], "phase": k[1], "calls": calls[k], "time_us": s * 1e6} for k, s in seconds.items()]
        rows.append({"layer": UNATTRIBUTED_LAYER, "phase": "other", "calls": 1,
                     "time_us": max(0.0, whole_s - sum(seconds.values())) * 1e6})
        return pd.DataFrame(rows, columns=list(LAYER_TIME_COLUMNS))
