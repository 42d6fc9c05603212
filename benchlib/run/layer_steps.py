"""The steps and batch-1 forwards ``benchlib layers`` times: plain, and layer by layer (hooks on a CPU, the
profiler's device timeline on a GPU), each before its timer started by ``engine.hooks.step_starts``."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from ..engine.hooks import step_starts
from ..engine.knobs import precision_context
from ..engine.step import Trainer, train_step
from ..env.devices import synchronize
from ..instruments.hook_times import CallCost, HookTimer
from ..instruments.layer_times import (
    layer_ranges,
    layer_times,
    phase_time_us,
    region_device_us,
)
from ..instruments.profiler import StepSpans, step_spans
from ..log import ProgressFn
from ..nets.counters import leaf_modules
from ..nets.layer_work import OPTIMIZER, UNATTRIBUTED
from ..roofline.layers import times_per_step
from ..spec.vocab import DATA_WAIT_LAYER


def step_rows(events: list[Any], span: StepSpans, device: bool = False, optimizer: bool = True) -> pd.DataFrame:
    """One profiled step's rows: each layer and phase, the optimizer (a training step, ``optimizer``), the wait
    for the batch (host time of ``data_wait``, where the step has one) and the rest of the step (on a GPU,
    ``device``: the kernels' time under each range; the rest holds launch gaps and an idle device too). A
    forward-only step has no optimizer row."""
    layers = layer_times(events, [span], device=device)
    optimizer_us = 0.0
    extra = []
    if optimizer:
        optimizer_us = (region_device_us(events, [span], "optimizer_step") if device
                        else phase_time_us([span], "optimizer_step"))
        extra.append({"layer": OPTIMIZER, "phase": "optimizer", "calls": 1, "time_us": optimizer_us})
    wait_us = phase_time_us([span], "data_wait")
    if wait_us > 0:
        extra.append({"layer": DATA_WAIT_LAYER, "phase": "other", "calls": 1, "time_us": wait_us})
    rest_us = max(0.0, span.step_time_us - float(layers["time_us"].sum()) - optimizer_us - wait_us)
    extra.append({"layer": UNATTRIBUTED, "phase": "other", "calls": 1, "time_us": rest_us})
    return pd.concat([layers, pd.DataFrame(extra)], ignore_index=True)


@dataclass
class StepTimes:
    """What ``Steps.measure`` timed: plain steps' seconds and data waits, and the steps timed layer by layer
    (their seconds, and their rows: hooks' on a CPU, the profiler's event cycles on a GPU)."""

    plain: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    profiled: list[float] = field(default_factory=list)
    cycles: list[list[Any]] = field(default_factory=list)
    hooked: list[pd.DataFrame] = field(default_factory=list)


class Steps:
    """Training steps of one configuration, each timed by the host clock around a synchronize."""

    def __init__(self, trainer: Trainer, batches: Iterator[Any], device: torch.device) -> None:
        self.trainer, self.batches, self.device = trainer, batches, device

    def one(self) -> float:
        return self.timed()[0]

    def timed(self) -> tuple[float, float]:
        """One step: its time and, apart, the time it waited for its batch (both seconds)."""
        step_starts("train")
        waited = time.perf_counter()
        with record_function("data_wait"):
            x, y = next(self.batches)
        start = time.perf_counter()
        train_step(self.trainer, x, y, region=record_function)
        synchronize(self.device)
        return time.perf_counter() - start, start - waited

    def hooked(self, timer: HookTimer) -> tuple[float, pd.DataFrame]:
        """One step timed layer by layer by ``timer``'s hooks (a CPU's): its time and its rows."""
        step_starts("train")
        waited = time.perf_counter()
        with timer.region(DATA_WAIT_LAYER, "other"):
            x, y = next(self.batches)
        start = time.perf_counter()

        def region(name: str) -> Any:
            return timer.region(OPTIMIZER, "optimizer") if name == "optimizer_step" else contextlib.nullcontext()

        train_step(self.trainer, x, y, region=region)
        end = time.perf_counter()
        return end - start, timer.step_rows(end - waited)




    def measure(self, leaves: dict[str, torch.nn.Module], steps: int, block: int, on_gpu: bool,
                call_cost: CallCost, say: ProgressFn) -> StepTimes:
        """``steps`` steps timed layer by layer in blocks of ``block``, each block after as many plain steps: on a
        CPU by the host clock in hooks (a few microseconds a layer), on a GPU by the profiler's device timeline
        (the first step of each cycle warms it and is dropped)."""
        out = StepTimes()
        timer = HookTimer(leaves, call_cost=call_cost)
        while len(out.profiled) < steps:
            n = min(block, steps - len(out.profiled))
            for _ in range(n):
                took, waited = self.timed()
                out.plain.append(took)
                out.waits.append(waited)
            if not on_gpu:
                with timer.attached():
                    for _ in range(n):
                        took, rows = self.hooked(timer)
                        out.profiled.append(took)
                        out.hooked.append(rows)
                say(f"layers: {len(out.profiled)}/{steps} steps timed layer by layer")
                continue
            with layer_ranges(leaves), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                               schedule=schedule(wait=0, warmup=1, active=n, repeat=1),
                                               on_trace_ready=lambda p: out.cycles.append(list(p.events()))) as prof:
                for i in range(n + 1):
                    took = self.one()
                    if i:
                        out.profiled.append(took)
                    prof.step()
            say(f"layers: {len(out.profiled)}/{steps} profiled steps")
        return out


def series(per_step: list[pd.DataFrame]) -> list[dict[str, Any]]:
    """Every (layer, phase)'s seconds in each profiled step, as the file keeps them."""
    return [{"layer": layer, "phase": phase, "time_s": times}
            for (layer, phase), times in times_per_step(per_step).items()]


class Forwards:
    """Batch-1 forwards of the trained model in eval mode, as latency calls run (inference mode, the variant's
    autocast and memory format), timed plain and profiled in alternating blocks like the training steps."""

    def __init__(self, net: torch.nn.Module, x1: torch.Tensor, device: torch.device, knobs: Any,
                 call_cost: CallCost | None = None) -> None:
        self.net, self.x1, self.device, self.knobs = net, x1, device, knobs
        self.call_cost = call_cost

    def one(self) -> float:
        step_starts("forward")
        start = time.perf_counter()
        with torch.inference_mode(), precision_context(self.knobs, self.device), record_function("forward"):
            self.net(self.x1)
        synchronize(self.device)
        return time.perf_counter() - start

    def measure(self, model: torch.nn.Module, steps: int, block: int, on_gpu: bool) -> dict[str, Any]:
        """The plain forwards' seconds and each timed-by-layer forward's rows (``step_rows``' columns, no
        optimizer): on a GPU from the profiler's device timeline, on a CPU from the host clock in module hooks
        (``_hooked``: the profiler's cost per op, up to 1.5x a batch-1 forward, differs between an fp32 and an
        int8 model and would not let their split add up to their difference)."""
        self.net.eval()
        for _ in range(3):
            self.one()
        plain: list[float] = []
        cycles: list[list[Any]] = []
        rows: list[pd.DataFrame] = []
        done = 0
        while done < steps:
            n = min(block, steps - done)
            plain += [self.one() for _ in range(n)]
            if not on_gpu:
                rows += self._hooked(leaf_modules(model), n)
                done += n
                continue
            with layer_ranges(leaf_modules(model)), profile(
                    activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                    schedule=schedule(wait=0, warmup=1, active=n, repeat=1),
                    on_trace_ready=lambda p: cycles.append(list(p.events()))) as prof:
                for _ in range(n + 1):
                    self.one()
                    prof.step()
            done += n
        self.net.train()
        rows += [step_rows(events, span, on_gpu, optimizer=False) for events in cycles for span in step_spans(events)]
        return {"plain": plain, "per_step": rows}

    def _hooked(self, leaves: dict[str, torch.nn.Module], n: int) -> list[pd.DataFrame]:
        """``n`` forwards timed layer by layer by the host clock in hooks (``instruments.hook_times``)."""
        timer = HookTimer(leaves, call_cost=self.call_cost)
        with timer.attached():
            return [timer.step_rows(self.one()) for _ in range(n)]
