"""Where one configuration's training step goes, layer by layer, against the roofline (``benchlib layers``).

Blocks of plain steps alternate with blocks of steps timed layer by layer, so the machine's drift reaches
both alike: the plain steps give the step time every share and the coverage are measured against; the
others give each layer's time and show what timing it costs. On a CPU the host runs the layers and its
clock in module and autograd-node hooks times them (``instruments.hook_times``: a few microseconds a layer,
where the profiler's per-operator cost would differ between the configurations a split compares); on a GPU
the profiler's device timeline does (``instruments.layer_times``: the kernels launched under a range per leaf
module for the forward, autograd's sequence numbers for the backward, no synchronize per layer). The work
of each layer is counted once (``nets.layer_work``) and placed under this machine's ceilings
(``roofline.layers``).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from ..engine.setup import build, check_runs, configuration, wrap
from ..engine.step import Trainer, in_memory_format, make_optimizer
from ..env.devices import resolve_hardware
from ..env.manifest import machine_name
from ..env.threads import last_level_cache_bytes
from ..errors import ConfigError
from ..instruments.hook_times import CallCost, probe_cost
from ..instruments.layer_times import (
    LAYER_PREFIX,
    layer_kernels,
    layer_ranges,
)
from ..instruments.profiler import StepSpans, event_interval, is_host_event, step_spans
from ..log import ProgressFn, progress_of
from ..nets.counters import count_train_per_sample, counting_copy, leaf_modules
from ..nets.layer_shapes import layer_shapes
from ..nets.layer_work import OPTIMIZER, UNATTRIBUTED, count_forward_work, count_layer_work
from ..nets.op_kinds import op_kinds
from ..nets.quantize import quantized_copy
from ..roofline.cache import ensure_ceilings
from ..roofline.layers import RoofOf, layer_roofline, median_per_step, predicted_step_s
from ..roofline.model import roof_dtype
from ..spec.settings import RunConfig
from ..spec.vocab import DATA_WAIT_LAYER, TIMING_LAYER
from ..store.atomic import atomic_write_json, json_ready
from ..store.layout import ResultsLayout
from ..store.schema import LAYERS_FORMAT_VERSION
from .layer_steps import Forwards, Steps, series, step_rows
from .profile import _cycle, _quiet_kineto

ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
OVERHEAD_LIMIT = 1.15  # a step timed by layer this much slower than a plain one: its shares are doubtful


@dataclass
class LayerReport:
    """The per-layer table of one configuration and the whole-step figures it is checked against."""

    run_id: str
    table: pd.DataFrame
    step_s: float  # median plain step
    instrumented_step_s: float  # median profiled step, timed the same way
    coverage: float  # the layers' time (optimizer included) over the plain step
    predicted_step_s: float
    flops_total: float  # the layers' and the unattributed row's FLOPs, the optimizer's left out
    model_flops: float  # the model's counted training FLOPs at this batch
    roof_dtype: str
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    element_bytes: int
    steps: int
    about: dict[str, Any] = field(default_factory=dict)  # study, model, hardware, batch size, image size, machine
    notes: list[str] = field(default_factory=list)
    # (layer, phase) -> the device kernels launched under it (on a GPU; empty on a CPU, whose layers run no
    # kernels the profiler names): what tells a Winograd convolution from a counting error or a TF32 leak
    kernels: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    plain_steps_s: list[float] = field(default_factory=list)  # every plain step, data wait left out (as step_s)
    plain_data_wait_s: list[float] = field(default_factory=list)  # the wait for each plain step's batch
    per_step: list[dict[str, Any]] = field(default_factory=list)  # {layer, phase, time_s: one per profiled step}
    inference: dict[str, Any] | None = None  # the batch-1 forward the same way (``_inference``)

    @property
    def efficiency(self) -> float:
        """The roofline's step over the measured one: 1.0 would be every layer on its roof."""
        return self.predicted_step_s / self.step_s if self.step_s > 0 else math.nan

    @property
    def overhead(self) -> float:
        return self.instrumented_step_s / self.step_s if self.step_s > 0 else math.nan

    def to_json(self) -> dict[str, Any]:
        """What the saved file holds: the rows under ``layers``, the checks beside them; NaN as null."""
        layers = json_ready(self.table.to_dict("records"))
        figures = {"coverage": self.coverage, "step_s": self.step_s,
                "instrumented_step_s": self.instrumented_step_s, "overhead": self.overhead,
                "predicted_step_s": self.predicted_step_s, "efficiency": self.efficiency,
                "flops_total": self.flops_total, "model_flops": self.model_flops, "roof_dtype": self.roof_dtype,
                "peak_flops_per_s": self.peak_flops_per_s, "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
                "element_bytes": self.element_bytes}
        return {"format_version": LAYERS_FORMAT_VERSION, "run_id": self.run_id, **self.about, "layers": layers,
                **json_ready(figures), "steps": self.steps, "notes": self.notes,
                "plain_steps_s": self.plain_steps_s, "plain_data_wait_s": self.plain_data_wait_s,
                "per_step": json_ready(self.per_step), "inference": json_ready(self.inference)}




def _layers_device(cfg: RunConfig, steps: int, block: int) -> torch.device:
    """The device ``cfg`` is profiled on, or a ``ConfigError`` naming what per-layer timing cannot do."""
    if steps < 1 or block < 1:
        raise ConfigError(f"layers: steps {steps} and block {block}; allowed: integers >= 1")
    if cfg.settings.knobs.compile != "off":
        raise ConfigError("layers: a compiled model runs fused kernels that no layer owns; allowed: compile: off")
    device = torch.device(resolve_hardware(cfg.hardware))
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"layers: {device.type} has no device timeline in torch.profiler to attribute kernels to "
                          "layers; allowed: --device cpu, cuda, cuda:N")
    check_runs(cfg.settings, str(device))
    return device


def _kernels(cycles: list[Any], on_gpu: bool) -> dict[tuple[str, str], list[str]]:
    """Per layer and phase, the names of the GPU kernels launched under it (none on a CPU)."""
    kernels: dict[tuple[str, str], set[str]] = {}
    for events in cycles if on_gpu else []:
        for key, names in layer_kernels(events, step_spans(events)).items():
            kernels.setdefault(key, set()).update(names)
    return {key: sorted(names) for key, names in kernels.items()}


def measure_layers(cfg: RunConfig, results_dir: str | Path, *, steps: int = 20, block: int = 5,
                   progress: ProgressFn | None = None) -> LayerReport:
    """Profile ``steps`` training steps of ``cfg`` in blocks of ``block``, interleaved with as many plain
    steps, and place each layer on the roofline of this machine's ceilings (measured into ``results_dir``
    when missing)."""
    s, device = cfg.settings, _layers_device(cfg, steps, block)
    on_gpu = device.type == "cuda"
    _quiet_kineto(device)
    say = progress_of(progress)
    ceilings = ensure_ceilings(results_dir, device, progress)
    dtype = roof_dtype(s.knobs.precision, device.type, bool(s.knobs.tf32))
    if dtype not in ceilings.peak_flops_per_s:
        why = ceilings.skipped_dtypes.get(dtype, "not measured")
        raise ConfigError(f"layers: no measured {dtype} roof on {device} ({why}); allowed: a precision whose roof "
                          f"was measured here: {', '.join(ceilings.peak_flops_per_s)}")
    with configuration(device, s):
        built = build(cfg, device, cfg.batch_size)
        net, _ = wrap(built.model, s, device)
        trainer = Trainer.of(net, built.model, s, device)
        net.train()
        batches = _cycle(built.loaders.train)
        runner = Steps(trainer, batches, device)
        for _ in range(max(1, s.warmup_steps)):
            runner.one()
        call_cost = CallCost() if on_gpu else probe_cost()  # the hooks' calls, before the steps they time
        timed = runner.measure(leaf_modules(built.model), steps, block, on_gpu, call_cost, say)
        plain, profiled, cycles = timed.plain, timed.profiled, timed.cycles
        x, _ = next(batches)
        served, served_net = built.model, net
        if s.knobs.quantization != "none":  # the variant serves an int8 copy of the trained model
            served = served_net = quantized_copy(built.model.eval(), s.knobs.quantization, built.loaders.train)
            built.model.train()
        forward = Forwards(served_net, in_memory_format(x[:1].to(device), s.knobs), device, s.knobs, call_cost)
        inference = forward.measure(served, steps, block, on_gpu)
        say("layers: batch-1 forwards profiled")
    per_step = timed.hooked + [step_rows(events, span, on_gpu) for events in cycles for span in step_spans(events)]
    times = median_per_step(per_step)
    element_bytes = ELEMENT_BYTES[dtype]
    classes = built.loaders.num_classes
    sample = x.detach().to("cpu", torch.float32)
    work = count_layer_work(built.model, sample, classes,
                            optimizer=lambda m: make_optimizer(m, s, torch.device("cpu")))
    model_flops = count_train_per_sample(counting_copy(built.model), sample, classes)[0] * sample.shape[0]
    kinds = {name: type(m).__name__ for name, m in leaf_modules(built.model).items()}
    kinds[OPTIMIZER] = type(trainer.optimizer).__name__
    step_s = statistics.median(plain)
    peak, bandwidth = ceilings.peak_flops_per_s[dtype], ceilings.bandwidth_bytes_per_s
    cache_bytes = gpu_l2_bytes(device) if on_gpu else last_level_cache_bytes()
    ops = op_kinds(leaf_modules(built.model))

    def roof_of(kind: str, resident: bool) -> tuple[float, float]:
        return ceilings.kind_roof(kind, dtype, resident)

    table = layer_roofline(times, work.flops, {k: v * element_bytes for k, v in work.elements.items()}, kinds,
                           step_s=step_s, peak_flops_per_s=peak, bandwidth_bytes_per_s=bandwidth,
                           cache_bytes=cache_bytes, op_kinds=ops, roof_of=roof_of)
    placed = table[~table["layer"].isin([UNATTRIBUTED, DATA_WAIT_LAYER, TIMING_LAYER])]
    report = LayerReport(
        run_id=cfg.run_id, table=table, step_s=step_s, instrumented_step_s=statistics.median(profiled),
        coverage=float(placed["time_s"].sum()) / step_s, predicted_step_s=predicted_step_s(table),
        flops_total=float(sum(f for (layer, _), f in work.flops.items() if layer != OPTIMIZER)),
        model_flops=float(model_flops), roof_dtype=dtype, peak_flops_per_s=peak, bandwidth_bytes_per_s=bandwidth,
        element_bytes=element_bytes, steps=len(per_step),
        about={"study": cfg.study, "model": cfg.model, "hardware": cfg.hardware, "device": str(device),
               "batch_size": cfg.batch_size, "image_size": s.image_size, "variant": s.variant,
               "machine": machine_name(), "cache_bytes": cache_bytes,
               "shapes": layer_shapes(built.model, in_memory_format(x.to(device), s.knobs)),
               **({} if on_gpu else {"hook_call_cost_s": call_cost.to_json()})},
        plain_steps_s=plain, plain_data_wait_s=timed.waits, per_step=series(per_step))
    if served is built.model:
        report.inference = _inference_figures(inference, count_forward_work(built.model, sample[:1]), kinds, peak,
                                              bandwidth, element_bytes, cache_bytes, ops, roof_of)
        report.inference["shapes"] = layer_shapes(built.model, in_memory_format(x[:1].to(device), s.knobs))
    else:
        report.inference = _int8_inference_figures(inference, served)
        report.notes.append(f"batch-1 forward: the {s.knobs.quantization} int8 copy the variant serves, timed "
                            "per layer but placed on no roof (no int8 roof is measured)")
    report.kernels = _kernels(cycles, on_gpu)
    report.notes += _notes(report)
    return report


def _inference_figures(measured: dict[str, Any], work: Any, kinds: dict[str, str], peak: float, bandwidth: float,
                       element_bytes: int, cache_bytes: int | None, ops: dict[str, str],
                       roof_of: RoofOf) -> dict[str, Any]:
    """The batch-1 forward's table under the same roof (``work``: counted at batch 1 in eval mode), its plain
    forwards and its per-step times, as the file keeps them."""
    plain, rows = measured["plain"], measured["per_step"]
    step_s = statistics.median(plain) if plain else math.nan
    table = layer_roofline(median_per_step(rows), work.flops, {k: v * element_bytes for k, v in work.elements.items()},
                           kinds, step_s=step_s, peak_flops_per_s=peak, bandwidth_bytes_per_s=bandwidth,
                           cache_bytes=cache_bytes, op_kinds=ops, roof_of=roof_of) if rows else pd.DataFrame()
    return {"batch_size": 1, "step_s": step_s, "steps": len(rows), "plain_steps_s": plain,
            "per_step": series(rows), "layers": table.to_dict("records")}


def _int8_inference_figures(measured: dict[str, Any], model: torch.nn.Module) -> dict[str, Any]:
    """A quantized copy's batch-1 forward: each layer's time and kind, no bound (no int8 roof is measured)."""
    plain, rows = measured["plain"], measured["per_step"]
    kinds = {name: type(m).__name__ for name, m in leaf_modules(model).items()}
    times = median_per_step(rows) if rows else pd.DataFrame(columns=["layer", "phase", "time_us"])
    table = [{"layer": r["layer"], "phase": r["phase"], "kind": kinds.get(r["layer"], ""),
              "time_s": float(r["time_us"]) * 1e-6, "bound": None, "roof_fraction": None}
             for r in times.to_dict("records")]
    return {"batch_size": 1, "step_s": statistics.median(plain) if plain else math.nan, "steps": len(rows),
            "plain_steps_s": plain, "per_step": series(rows), "layers": table}


def gpu_l2_bytes(device: torch.device) -> int | None:
    """The GPU's L2 cache, its last level before device memory (None where torch does not say)."""
    size = getattr(torch.cuda.get_device_properties(device.index or 0), "L2_cache_size", None)
    return int(size) if size else None


def record_layers(cfg: RunConfig, results_dir: str | Path, *, steps: int = 20, block: int = 5,
                  progress: ProgressFn | None = None) -> tuple[LayerReport, Path]:
    """``measure_layers`` and its table saved (atomically) under the results folder's ``layers/``."""
    report = measure_layers(cfg, results_dir, steps=steps, block=block, progress=progress)
    path = ResultsLayout.of(results_dir).layers_path(machine_name(), cfg.run_id)
    atomic_write_json(path, report.to_json())
    return report, path


def _notes(r: LayerReport) -> list[str]:
    notes = [f"times: median over {r.steps} steps timed layer by layer; shares and coverage over the median of "
             f"{r.steps} plain steps interleaved with them",
             "bytes: what every op reads (its tensor inputs) and writes (its results and the inputs it changes in "
             "place) once each, at the run's element size: the traffic of a cache that keeps nothing",
             "(timing): what timing layer by layer cost each step, the hooks' bodies timed in place and their "
             "calls at the cost a probe measured before the steps (CPU); no split counts it as work",
             "roofs: each layer meets the roof of its kind of operation (op_kind: a 3x3, 1x1 or depthwise "
             "convolution, a matrix product, or elementwise work), and the cache's bandwidth where a call's "
             "tensors fit in the last-level cache (cache_resident), DRAM's elsewhere"]
    if r.overhead > OVERHEAD_LIMIT:
        notes.append(f"a step timed layer by layer took {r.overhead:.2f}x a plain one (over {OVERHEAD_LIMIT}x): the "
                     "layers' times include the cost of timing them")
    if r.model_flops > 0 and abs(r.flops_total / r.model_flops - 1) > 0.01:
        notes.append(f"the layers' FLOPs are {r.flops_total / r.model_flops:.3f}x the model's counted training "
                     "FLOPs (expected within 1%)")
    if str(r.about.get("device", "")).startswith("cuda"):
        notes.append("on a GPU each layer's time is the device time of the kernels launched under its range (the "
                     "backward's under its autograd node); launch gaps, an idle device and host work between them "
                     "are in the unattributed row")
    return notes


def _outside_layers(events: list[Any], spans: list[StepSpans]) -> pd.DataFrame:
    """Self time per operator that ran outside every layer's range (per step), most first: what the
    unattributed row of an inference holds (a quantized model's quantize and dequantize, for one)."""
    ranges = [event_interval(e) for e in events if e.name.startswith(LAYER_PREFIX)]
    totals: dict[str, float] = {}
    for e in events:
        if not is_host_event(e) or e.name.startswith((LAYER_PREFIX, "ProfilerStep", "forward")):
            continue
        start, _ = event_interval(e)
        if any(s.start_us <= start < s.end_us for s in spans) and not any(a <= start <= b for a, b in ranges):
            totals[e.name] = totals.get(e.name, 0.0) + float(e.self_cpu_time_total)
    steps = max(len(spans), 1)
    rows = [{"operator": k, "self_us_per_call": v / steps} for k, v in totals.items()]
    return pd.DataFrame(rows, columns=["operator", "self_us_per_call"]).sort_values("self_us_per_call",
                                                                                   ascending=False)


@torch.inference_mode()
def profile_forward(model: torch.nn.Module, batch: torch.Tensor, *, calls: int = 20,
                    warmup: int = 5) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """Where one forward of ``model`` on ``batch`` goes on the CPU, layer by layer (fp32 or quantized alike):
    the median microseconds per call of each leaf module and of what no leaf holds, the operators outside
    every layer, and the median wall time of a forward in microseconds (profiled)."""
    for _ in range(warmup):
        model(batch)
    _quiet_kineto(batch.device)
    cycles: list[list[Any]] = []
    with layer_ranges(leaf_modules(model)), profile(
            activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=calls, repeat=1),
            on_trace_ready=lambda p: cycles.append(list(p.events()))) as prof:
        for _ in range(calls + 1):
            with record_function("forward"):
                model(batch)
            prof.step()
    events = cycles[0]
    spans = step_spans(events)
    per_step = [step_rows(events, span, optimizer=False) for span in spans]
    times = median_per_step(per_step).sort_values("time_us", ascending=False).reset_index(drop=True)
    kinds = {name: type(m).__name__ for name, m in leaf_modules(model).items()}
    times.insert(1, "kind", times["layer"].map(kinds).fillna(""))
    step_us = statistics.median(s.step_time_us for s in spans)
    return times, _outside_layers(events, spans), step_us
