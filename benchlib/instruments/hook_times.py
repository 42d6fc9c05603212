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

The hooks' own cost is a row of its own (``TIMING_LAYER``), not part of what no leaf holds: it is the same
per step at any batch size, so left in the rest it would tilt every per-sample split towards the small batch.
Their bodies (the walk to a forward's nodes, setting the nodes' hooks) are timed in place, where the step's
work has left the caches cold (about twice what a hot loop shows); the call into each hook, which no clock
inside it sees, is measured once on a probe (``probe_cost``) and counted per call.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from ..spec.vocab import TIMING_LAYER, UNATTRIBUTED_LAYER
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


@dataclass(frozen=True)
class CallCost:
    """The cost of calling into the hooks, per call, that no clock inside a hook sees (the module's slow path
    to its hooks, the autograd engine taking the interpreter for a node's hook): from ``probe_cost``."""

    forward_s: float = 0.0  # a leaf's forward with grad: its two hooks' calls
    backward_s: float = 0.0  # an autograd node run with its two hooks
    inference_s: float = 0.0  # a leaf's forward without grad

    def to_json(self) -> dict[str, float]:
        return {"forward_s": self.forward_s, "backward_s": self.backward_s, "inference_s": self.inference_s}


class HookTimer:
    """Per step, each leaf's forward and backward seconds and calls, and named regions timed by the caller.

    A hook does as little as it can (read the clock, append to a list: the module call's slow path with hooks
    costs about 3.5 us on its own, the timing about as much again); the times are paired up in ``step_rows``.
    """

    def __init__(self, leaves: Mapping[str, torch.nn.Module], clock: Callable[[], float] = time.perf_counter,
                 call_cost: CallCost | None = None):
        self.leaves, self.clock, self.call_cost = dict(leaves), clock, call_cost or CallCost()
        self._marks: list[tuple[float, str, str]] = []  # (clock, layer, phase) at a start and at its end, in turn
        self._inputs: dict[str, set[Any]] = {}
        self._own = [0.0]  # seconds the hooks' bodies took outside the layers' marks this step
        marks = self._marks
        # each layer's two node hooks made once, not per node and step: a backward mark is all they do
        self._node_hooks = {name: (lambda grad_outputs, name=name: marks.append((clock(), name, "backward")),
                                   lambda grad_inputs, grad_outputs, name=name: marks.append((clock(), name,
                                                                                               "backward")))
                            for name in self.leaves}

    def _before(self, name: str) -> Callable[..., None]:
        marks, clock, inputs, own = self._marks, self.clock, self._inputs, self._own

        def hook(module: torch.nn.Module, args: Any) -> None:
            entered = clock()
            if torch.is_grad_enabled():
                if len(args) == 1 and isinstance(args[0], torch.Tensor):  # a leaf's usual call: one tensor
                    node = args[0].grad_fn
                    inputs[name] = {node} if node is not None else set()
                else:
                    inputs[name] = {t.grad_fn for t in _tensors(args) if t.grad_fn is not None}
            at = clock()
            marks.append((at, name, "forward"))
            own[0] += at - entered
        return hook

    def _after(self, name: str) -> Callable[..., None]:
        marks, clock, inputs, own = self._marks, self.clock, self._inputs, self._own
        pre, post = self._node_hooks[name]

        def hook(module: torch.nn.Module, args: Any, out: Any) -> None:
            at = clock()
            marks.append((at, name, "forward"))
            if torch.is_grad_enabled():
                for node in recorded_nodes(out, inputs.pop(name, set())):
                    node.register_prehook(pre)
                    node.register_hook(post)
            own[0] += clock() - at
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
        """The step just timed in ``LAYER_TIME_COLUMNS``, with the hooks' own cost as ``TIMING_LAYER`` (their
        bodies timed in place, their calls counted at ``call_cost``) and what no row holds (``whole_s`` less
        the rows) as ``(unattributed)``; then clear for the next step. Leaves do not nest, so each row's marks
        alternate start and end."""
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
        forward = sum(n for (layer, phase), n in calls.items() if phase == "forward" and layer in self.leaves)
        backward = sum(n for (layer, phase), n in calls.items() if phase == "backward")
        cost = self.call_cost
        calls_s = forward * (cost.forward_s if backward else cost.inference_s) + backward * cost.backward_s
        rest = whole_s - sum(seconds.values())
        timing = min(max(0.0, rest), self._own[0] + calls_s)  # never more than the step holds beside the rows
        self._own[0] = 0.0
        rows = [{"layer": k[0], "phase": k[1], "calls": calls[k], "time_us": s * 1e6} for k, s in seconds.items()]
        rows.append({"layer": TIMING_LAYER, "phase": "other", "calls": forward + backward, "time_us": timing * 1e6})
        rows.append({"layer": UNATTRIBUTED_LAYER, "phase": "other", "calls": 1,
                     "time_us": max(0.0, rest - timing) * 1e6})
        return pd.DataFrame(rows, columns=list(LAYER_TIME_COLUMNS))


def probe_cost(leaves: int = 32, calls: int = 20, rounds: int = 9,
               clock: Callable[[], float] = time.perf_counter) -> CallCost:
    """What calling the hooks costs per call beyond their bodies, on a chain of ``leaves`` one-element ReLUs run
    ``calls`` times a round, with and without the hooks in alternating rounds: the median rounds' difference
    less the bodies' own time, per call. A fraction of a second; on a CPU, before timing layer by layer."""
    chain = torch.nn.Sequential(*[torch.nn.ReLU() for _ in range(leaves)])
    timer = HookTimer({str(i): m for i, m in enumerate(chain)}, clock=clock)
    x, x1 = torch.ones(1, requires_grad=True), torch.ones(1)

    def one_round() -> tuple[float, float, float, float, float]:
        forward = backward = inference = own_grad = own_inference = 0.0
        for _ in range(calls):
            timer._own[0] = 0.0
            t0 = clock()
            out = chain(x)
            t1 = clock()
            out.backward()
            t2 = clock()
            own_grad += timer._own[0]
            timer._own[0] = 0.0
            with torch.no_grad():
                chain(x1)
            t3 = clock()
            own_inference += timer._own[0]
            timer._marks.clear()
            forward, backward, inference = forward + t1 - t0, backward + t2 - t1, inference + t3 - t2
        return forward, backward, inference, own_grad, own_inference

    one_round()
    bare, hooked = [], []
    for _ in range(rounds):
        bare.append(one_round())
        with timer.attached():
            hooked.append(one_round())
    timer._own[0] = 0.0

    def median(rounds_: Sequence[tuple[float, ...]], i: int) -> float:
        return statistics.median(r[i] for r in rounds_)

    per = leaves * calls
    return CallCost(forward_s=max(0.0, (median(hooked, 0) - median(bare, 0) - median(hooked, 3)) / per),
                    backward_s=max(0.0, (median(hooked, 1) - median(bare, 1)) / per),
                    inference_s=max(0.0, (median(hooked, 2) - median(bare, 2) - median(hooked, 4)) / per))
