"""Where a training step's time goes layer by layer, from one profile, with no synchronize per layer.

Each leaf module's forward runs inside a profiler range ``layer::<qualified name>`` (``layer_ranges`` puts
it there with module hooks that only open and close the range). Its backward is found by sequence number:
autograd numbers each node it records in the forward; the profiler keeps that number on the forward op
that recorded the node and on the ``autograd::engine::evaluate_function`` event that runs the node's
backward. A backward event therefore belongs to the layer whose range held the forward op with its number
(and the forward op's thread, as numbers count per thread). What no leaf holds (the loss, a residual add
written in a parent's ``forward``, the optimizer, AccumulateGrad, waiting for data) stays unattributed:
a row of its own, never spread over the layers.

Times are microseconds. On a CPU the host runs the computation, so a layer's time is its range's host
wall time. On a GPU the same ranges hold only the launches: with ``device=True`` a layer's time is the
device time of the kernels launched under its range (the profiler credits each kernel to the host op that
launched it, and a range's ``device_time_total`` sums its children's), forward and backward alike.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pandas as pd
import torch

from ..spec.vocab import UNATTRIBUTED_LAYER
from .profiler import StepSpans, covered_us, event_interval, is_host_event

LAYER_PREFIX = "layer::"
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
LAYER_TIME_COLUMNS = ("layer", "phase", "calls", "time_us")
UNATTRIBUTED = UNATTRIBUTED_LAYER


@contextmanager
def layer_ranges(leaves: Mapping[str, torch.nn.Module]) -> Iterator[list[str]]:
    """While the block runs, the forward of each of ``leaves`` (the network's leaf modules by qualified name,
    ``nets.counters.leaf_modules``) is inside a profiler range ``layer::<name>``.

    Opening and closing a range records two host events and waits for nothing, so the step keeps its
    pace. A module called twice in one forward (a ReLU reused in a residual block) gets two ranges.
    """
    open_ranges: list[Any] = []
    handles = []

    def enter(name: str) -> Any:
        def hook(module: torch.nn.Module, args: Any) -> None:
            record = torch.autograd.profiler.record_function(LAYER_PREFIX + name)
            record.__enter__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
            open_ranges.append(record)
        return hook

    def leave(module: torch.nn.Module, args: Any, output: Any) -> None:
        if open_ranges:
            open_ranges.pop().__exit__(None, None, None)

    for name, module in leaves.items():
        handles += [module.register_forward_pre_hook(enter(name)), module.register_forward_hook(leave)]
    try:
        yield list(leaves)
    finally:
        for handle in handles:
            handle.remove()
        while open_ranges:  # a forward that raised inside a layer
            open_ranges.pop().__exit__(None, None, None)


def _in_steps(start: float, spans: Sequence[StepSpans]) -> bool:
    return any(s.start_us <= start < s.end_us for s in spans)


def device_time_us(event: Any) -> float:
    """The device time of the kernels an event (and what it called) launched: ``device_time_total``,
    ``cuda_time_total`` in the torch releases before the rename."""
    value = getattr(event, "device_time_total", None)
    return float(value if value is not None else getattr(event, "cuda_time_total", 0.0) or 0.0)


def layer_times(events: Sequence[Any], spans: Sequence[StepSpans], *, device: bool = False) -> pd.DataFrame:
    """Per leaf module and phase: calls and time (``LAYER_TIME_COLUMNS``), summed over the steps of
    ``spans``, from a profile's events (``prof.events()``) taken with ``layer_ranges`` open: host wall time,
    or with ``device`` the device time of the kernels each range launched."""
    totals: dict[tuple[str, str], list[float]] = {}
    for key, e in _attributed(events, spans):
        start, end = event_interval(e)
        calls_time = totals.setdefault(key, [0.0, 0.0])
        calls_time[0] += 1
        calls_time[1] += device_time_us(e) if device else end - start
    rows = [{"layer": layer, "phase": phase, "calls": int(ct[0]), "time_us": ct[1]}
            for (layer, phase), ct in totals.items()]
    return pd.DataFrame(rows, columns=list(LAYER_TIME_COLUMNS))


def layer_kernels(events: Sequence[Any], spans: Sequence[StepSpans]) -> dict[tuple[str, str], list[str]]:
    """Per (leaf module, phase): the names of the device kernels launched under it, sorted, each once.

    What a layer's time cannot say, its kernels can: a 3x3 convolution faster than its nominal FLOPs allow
    is a Winograd kernel only if one ran, and an fp32 configuration that ran a ``tf32`` kernel leaked TF32.
    """
    names: dict[tuple[str, str], set[str]] = {}
    for key, e in _attributed(events, spans):
        names.setdefault(key, set()).update(_kernel_names(e))
    return {key: sorted(found) for key, found in names.items()}


def _kernel_names(event: Any) -> set[str]:
    """The kernels an event and every op under it launched (the profiler keeps them on the launching op)."""
    found = {str(k.name) for k in getattr(event, "kernels", None) or []}
    for child in getattr(event, "cpu_children", None) or []:
        found |= _kernel_names(child)
    return found


def _attributed(events: Sequence[Any], spans: Sequence[StepSpans]) -> Iterator[tuple[tuple[str, str], Any]]:
    """Each layer range (forward) and each backward node a layer's forward recorded, with its (layer, phase):
    the one attribution both the times and the kernels follow."""
    host = [e for e in events if is_host_event(e) and _in_steps(event_interval(e)[0], spans)]
    ranges: dict[Any, list[tuple[float, float, str]]] = {}  # thread -> sorted (start, end, layer)
    for e in host:
        if e.name.startswith(LAYER_PREFIX):
            ranges.setdefault(e.thread, []).append((*event_interval(e), e.name.removeprefix(LAYER_PREFIX)))
    ranges = {t: sorted(rs) for t, rs in ranges.items()}
    starts = {t: [r[0] for r in rs] for t, rs in ranges.items()}

    def layer_at(thread: Any, time_us: float) -> str | None:
        i = bisect.bisect_right(starts.get(thread, []), time_us) - 1
        if i >= 0:
            start, end, layer = ranges[thread][i]
            if start <= time_us <= end:
                return layer
        return None

    owner: dict[tuple[Any, int], str] = {}  # (forward thread, sequence number) -> layer
    for e in host:
        seq = getattr(e, "sequence_nr", -1)
        if seq >= 0 and not e.name.startswith((LAYER_PREFIX, BACKWARD_PREFIX)):
            layer = layer_at(e.thread, event_interval(e)[0])
            if layer is not None:
                owner.setdefault((e.thread, seq), layer)
    for e in host:
        if e.name.startswith(LAYER_PREFIX):
            yield (e.name.removeprefix(LAYER_PREFIX), "forward"), e
        elif e.name.startswith(BACKWARD_PREFIX) and getattr(e, "sequence_nr", -1) >= 0:
            thread = getattr(e, "fwd_thread", None) or e.thread
            layer = owner.get((thread, e.sequence_nr))
            if layer is not None:
                yield (layer, "backward"), e


def with_unattributed(times: pd.DataFrame, spans: Sequence[StepSpans]) -> tuple[pd.DataFrame, float]:
    """``times`` plus one row for what no layer holds (the step's wall time less the layers'), each row's
    ``share`` of the profiled steps, and the layers' coverage (their time over the steps' time)."""
    step_us = float(sum(s.step_time_us for s in spans))
    layers_us = float(times["time_us"].sum()) if not times.empty else 0.0
    rest = pd.DataFrame([{"layer": UNATTRIBUTED, "phase": "other", "calls": len(spans),
                          "time_us": max(0.0, step_us - layers_us)}])
    table = pd.concat([times, rest], ignore_index=True) if not times.empty else rest
    table["share"] = table["time_us"] / step_us if step_us > 0 else float("nan")
    return table, (layers_us / step_us if step_us > 0 else float("nan"))


def phase_time_us(spans: Sequence[StepSpans], region: str) -> float:
    """The host time of one labelled region (``forward``, ``backward``) summed over the steps."""
    return float(sum(covered_us(s.regions[region]) for s in spans))


def region_device_us(events: Sequence[Any], spans: Sequence[StepSpans], region: str) -> float:
    """The device time of the kernels launched inside one labelled region, summed over the steps."""
    return float(sum(device_time_us(e) for e in events if is_host_event(e) and e.name == region
                     and _in_steps(event_interval(e)[0], spans)))
