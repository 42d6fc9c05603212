"""GPU acceptance run: does benchlib measure a real GPU correctly? One verdict per check, with its figure.

Every check names its figure, the range it must fall in and pass/fail; the JSON (``--out``) keeps them all
with the machine, the versions and the sizes chosen. Ranges come from the datasheet of the GPU's family and
board (``benchlib.roofline.datasheet``: T4, L4, A10, A10G, A100 40/80GB PCIe/SXM, H100 PCIe/SXM/NVL, H200,
...), a MIG slice's scaled from its parent's by its share of the part; a part with none is not judged, with
the reason. Work sizes shrink to the GPU's free memory (a MIG slice, a small or busy GPU) and the output
says which were chosen and why. What a GPU lacks (TF32 and bf16 below capability 8.0) is skipped with the
reason, not failed. Each judgement is a pure function in ``gpu_judges.py`` that a test feeds wrong figures.

    python benchmarks/gpu_acceptance.py [--device cuda:0] [--out FILE.json] [--timm-benchmark PATH]

``--timm-benchmark`` names timm's ``benchmark.py`` (from a checkout of pytorch-image-models; timm must be
installed) to run side by side with benchlib on resnet50, AMP, channels_last, the same batch.
Without CUDA the script says so in one line and exits 0; ``--allow-cpu --quick`` runs its plumbing on the
CPU with tiny sizes (what the test suite does), skipping what only a GPU can show.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from gpu_judges import (
    QUICK,
    AboveRoof,
    Check,
    Sizes,
    amp_limit,
    fit_sizes,
    judge_amp,
    judge_compile_fell_back,
    judge_compile_speed,
    judge_device_feed,
    judge_energy,
    judge_fallbacks,
    judge_latency,
    judge_layers,
    judge_memory_floor,
    judge_memory_isolation,
    judge_nhwc,
    judge_nvml_handle,
    judge_power,
    judge_recompiles,
    judge_roof,
    judge_scaler,
    judge_step_timer,
    judge_strict_fp32,
    judge_syncs,
    judge_timm,
    judge_utilization,
    judge_uuid,
    judge_weights_channels_last,
    not_run,
    scaler_skips,
    sheet_for,
    sync_messages,
    tf32_kernels,
)

from benchlib.engine.inference import measure_latency
from benchlib.engine.knobs import apply_memory_format, compile_report
from benchlib.engine.setup import configuration, fresh_state, wrap
from benchlib.engine.step import Trainer, optimizer_impl, train_step
from benchlib.env.devices import cuda_uuids, device_name, device_scope, synchronize
from benchlib.env.gpu import gpu_facts, precision_problem
from benchlib.env.manifest import collect_manifest
from benchlib.instruments.energy import EnergyMeter
from benchlib.instruments.nvml import NvmlDevices, pynvml
from benchlib.instruments.samples import Samples
from benchlib.instruments.telemetry import TelemetrySampler
from benchlib.instruments.timing import StepTimer
from benchlib.nets.memory_floor import training_floor_bytes
from benchlib.nets.models import build_model
from benchlib.roofline.ceilings import measure_ceilings
from benchlib.run.columns import ACTIVATION_DTYPES, measured_row
from benchlib.run.layers import measure_layers
from benchlib.run.measure import measure
from benchlib.spec.settings import RunConfig, RunSettings

OTHER_GPU_STEPS = 20  # timed steps of the step-timer check on GPUs other than the one asked for


def fp32_floor_bytes(model: str, image_px: int, batch: int) -> float:
    """The preflight's fp32 training floor of ``model`` (1000 classes): what ``fit_sizes`` sizes by."""
    return training_floor_bytes(model, image_px, 1000, batch, ACTIVATION_DTYPES["fp32"].itemsize)


@dataclass
class Context:
    device: torch.device
    sizes: Sizes
    sheet: dict[str, Any] | None  # the GPU's datasheet by family and board, a MIG slice's scaled (None: no range)
    sheet_why: str  # where the sheet came from, or why there is none
    timm_benchmark: Path | None
    notes: list[str] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def _settings(ctx: Context, **flat: Any) -> RunSettings:
    s = ctx.sizes
    base = dict(dataset="synthetic", image_size=s.image_px, synthetic_samples=s.batch * (s.steps + s.warmup),
                synthetic_classes=1000, train_steps=s.steps, warmup_steps=s.warmup, latency_repeats=20,
                infer_warmup_batches=5, telemetry=False)
    return RunSettings.of(**{**base, **flat})  # a check's own values replace the defaults


def _trainer(ctx: Context, precision: str = "fp32", memory_format: str = "nchw",
             model: str | None = None) -> tuple[Trainer, torch.Tensor, torch.Tensor]:
    s = _settings(ctx, precision=precision, memory_format=memory_format)
    net = apply_memory_format(build_model(model or ctx.sizes.model, 1000).to(ctx.device), s.knobs)
    x = torch.randn(ctx.sizes.batch, 3, ctx.sizes.image_px, ctx.sizes.image_px, device=ctx.device)
    y = torch.randint(0, 1000, (ctx.sizes.batch,), device=ctx.device)
    return Trainer.of(net, net, s, ctx.device), x, y


def _timed_steps(ctx: Context, t: Trainer, x: torch.Tensor, y: torch.Tensor) -> tuple[list[float], float]:
    """(per-step seconds from benchlib's StepTimer, host seconds around the same steps, one sync each end)."""
    for _ in range(ctx.sizes.warmup):
        train_step(t, x, y)
    timer = StepTimer(ctx.device)
    synchronize(ctx.device)
    t0 = time.perf_counter()
    for _ in range(ctx.sizes.steps):
        timer.start()
        train_step(t, x, y)
        timer.stop()
    synchronize(ctx.device)
    host_s = time.perf_counter() - t0
    return timer.collect(), host_s


# ---------------------------------------------------------------- the checks

def timer_plan(count: int) -> list[tuple[int, int]]:
    """(GPU timed, GPU current meanwhile) for ``count`` visible GPUs: each in turn, with the next one current
    where there are several."""
    return [(i, (i + 1) % count) for i in range(count)]


def _timer_on(ctx: Context, device: torch.device, current: torch.device) -> Check:
    sizes = ctx.sizes
    if device != ctx.device:  # another GPU: its own free memory, fewer steps
        sizes = replace(fit_sizes(sizes, gpu_facts(device.index or 0), fp32_floor_bytes)[0],
                        steps=min(sizes.steps, OTHER_GPU_STEPS))
    here = replace(ctx, device=device, sizes=sizes)
    with configuration(device, _settings(here)), device_scope(current):
        t, x, y = _trainer(here)
        steps, host = _timed_steps(here, t, x, y)
    return judge_step_timer(sum(steps), host, str(device) if current == device else f"{device} ({current} current)")


def check_step_timer(ctx: Context) -> list[Check]:
    """On every visible GPU in turn, each timed while another GPU is current where there are several: events
    recorded on the current device's stream instead of the timed one's give launch times, which timing a GPU
    with itself current would never show."""
    if not ctx.cuda:
        return [_timer_on(ctx, ctx.device, ctx.device)]
    return [_timer_on(ctx, torch.device("cuda", i), torch.device("cuda", j))
            for i, j in timer_plan(torch.cuda.device_count())]


def _dtypes(ctx: Context) -> tuple[list[str], list[Check]]:
    """The dtypes to measure on this device, and a skipped check for each it lacks (with the reason)."""
    if not ctx.cuda:
        return ["fp32"], []
    gpu = gpu_facts(ctx.device.index or 0)
    chosen, skipped = [], []
    for dtype in ("fp32", "tf32", "fp16", "bf16"):
        why = precision_problem(gpu, dtype)
        if why:
            skipped.append(Check(f"ceiling {dtype}", None, "TFLOP/s", "where the GPU has it", None, why))
        else:
            chosen.append(dtype)
    return chosen, skipped


def check_ceilings(ctx: Context) -> list[Check]:
    dtypes, out = _dtypes(ctx)
    c = measure_ceilings(ctx.device, dtypes=dtypes, matmul_size=ctx.sizes.matmul, copy_bytes=ctx.sizes.copy_bytes,
                         repeats=5, warmup=2)
    out += [judge_roof(dtype, peak, ctx.sheet, ctx.sheet_why) for dtype, peak in c.peak_flops_per_s.items()]
    out.append(judge_roof("bandwidth", c.bandwidth_bytes_per_s, ctx.sheet, ctx.sheet_why))
    if "tf32" in c.peak_flops_per_s:
        peaks = c.peak_flops_per_s
        out.append(judge_strict_fp32(peaks["fp32"], peaks["tf32"], ctx.sheet, ctx.sheet_why))
    return out


def _reserved_peak_fresh(ctx: Context, batch: int) -> int:
    """peak_cuda_reserved_bytes of one configuration in a fresh process."""
    cmd = [sys.executable, "-m", "benchlib", "run", "--model", "resnet18", "--data", "synthetic", "--device",
           str(ctx.device), "--batch-size", str(batch), "--steps", "3", "--image-size", str(ctx.sizes.image_px),
           "--set", f"synthetic_samples={batch * 8}", "--set", "latency_repeats=3", "--set", "warmup_steps=1",
           "--set", "telemetry=false", "--no-save", "--json"]
    row = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    return int(row["peak_cuda_reserved_bytes"] or 0)


def check_memory_isolation(ctx: Context) -> list[Check]:
    if not ctx.cuda:
        return [not_run("memory isolation")]
    big, small = ctx.sizes.isolation_batches
    for batch in (big, small):
        cfg = RunConfig("acceptance", str(ctx.device), "resnet18", batch,
                        _settings(ctx, synthetic_samples=batch * 8, train_steps=3, warmup_steps=1, latency_repeats=3))
        m = measure(cfg)
        assert m is not None
        measured = measured_row(m)
        in_process = int(measured["peak_cuda_reserved_bytes"] or 0)
    return [judge_memory_isolation(in_process, _reserved_peak_fresh(ctx, small), big, small)]


def check_memory_floor(ctx: Context) -> list[Check]:
    """A few fp32 and fp16 training steps: the allocator's peak against ``nets/memory_floor.py``'s floor."""
    if not ctx.cuda:
        return [not_run("allocated training peak / preflight floor")]
    out = []
    for precision in ("fp32", "amp_fp16"):
        fresh_state(ctx.device)
        # under the backend flags a study's step runs with (cuDNN's autotuner, TF32 off for strict fp32): its
        # workspaces are part of the peak the floor must stay under
        with configuration(ctx.device, _settings(ctx, precision=precision)):
            t, x, y = _trainer(ctx, precision=precision)
            torch.cuda.reset_peak_memory_stats(ctx.device)
            for _ in range(3):
                train_step(t, x, y)
            synchronize(ctx.device)
            peak = torch.cuda.max_memory_allocated(ctx.device)
        floor = training_floor_bytes(ctx.sizes.model, ctx.sizes.image_px, 1000, ctx.sizes.batch,
                                     ACTIVATION_DTYPES[precision].itemsize)
        check = judge_memory_floor(floor, peak)
        out.append(replace(check, name=f"{check.name} ({precision})"))
        del t, x, y
    return out


SYNC_STEPS = 3  # timed steps under CUDA's sync debug mode


def _sync_warnings(ctx: Context, precision: str) -> list[str]:
    """Warnings raised by CUDA's sync debug mode over three timed steps of ``precision`` (after two untimed)."""
    with configuration(ctx.device, _settings(ctx, precision=precision)):
        t, x, y = _trainer(ctx, precision)
        for _ in range(2):
            train_step(t, x, y)
        synchronize(ctx.device)
        timer = StepTimer(ctx.device)

        def timed_step() -> None:
            timer.start()
            train_step(t, x, y)
            timer.stop()

        caught = sync_messages(timed_step, SYNC_STEPS, torch.cuda.set_sync_debug_mode)
        timer.collect()
    return caught


def _allowed_syncs(ctx: Context, precision: str) -> tuple[int, str]:
    """Syncs a timed step may hold by design: the fp16 scaler's inf read, once per step, where the optimizer is
    not fused (auto runs SGD as foreach: its fused kernel mishandles skipped steps)."""
    impl = optimizer_impl(_settings(ctx, precision=precision), ctx.device)
    if precision == "amp_fp16" and impl != "fused":
        return SYNC_STEPS, f"the scaler's inf read with {impl} kernels, one per step"
    return 0, ""


def check_no_sync_in_steps(ctx: Context) -> list[Check]:
    if not ctx.cuda:
        return [not_run("no synchronize inside timed steps")]
    gpu = gpu_facts(ctx.device.index or 0)
    out = []
    for precision in ("fp32", "amp_fp16", "amp_bf16"):
        why = precision_problem(gpu, precision)
        out.append(Check(f"synchronizations inside {precision} steps", None, "count", "0", None, why) if why
                   else judge_syncs(precision, _sync_warnings(ctx, precision), *_allowed_syncs(ctx, precision)))
    return out


def check_amp(ctx: Context) -> list[Check]:
    if not ctx.cuda:
        return [not_run("AMP speed-up")]
    gpu = gpu_facts(ctx.device.index or 0)
    medians: dict[str, float] = {}
    out = []
    for precision in ("fp32", "amp_bf16", "amp_fp16"):
        why = precision_problem(gpu, precision)
        if why:
            out.append(Check(f"{precision} step / strict fp32 step", None, "ratio", f"< {amp_limit(ctx.sheet)}",
                             None, why))
            continue
        with configuration(ctx.device, _settings(ctx, precision=precision)):  # fp32: TF32 off, strict
            t, x, y = _trainer(ctx, precision)
            start_scale = float(t.scaler.get_scale()) if t.scaler is not None else math.nan
            steps, _ = _timed_steps(ctx, t, x, y)
            medians[precision] = Samples.of(steps).median
            if t.scaler is not None:
                ran, end_scale = ctx.sizes.steps + ctx.sizes.warmup, float(t.scaler.get_scale())
                finite = all(bool(torch.isfinite(p).all()) for p in t.net.parameters())
                skipped = scaler_skips(start_scale, end_scale, t.scaler.get_growth_interval(), ran)
                out.append(judge_scaler(end_scale, skipped, ran, finite))
    return out + [judge_amp(p, medians[p], medians["fp32"], ctx.sheet) for p in ("amp_bf16", "amp_fp16")
                  if p in medians]


def check_channels_last(ctx: Context) -> list[Check]:
    with configuration(ctx.device, _settings(ctx, memory_format="channels_last")):
        t, x, y = _trainer(ctx, memory_format="channels_last")
        conv = next(m for m in t.net.modules() if isinstance(m, torch.nn.Conv2d))
        weights_cl = conv.weight.is_contiguous(memory_format=torch.channels_last)
        out = [judge_weights_channels_last(weights_cl)]
        if not ctx.cuda:
            return out + [not_run("NHWC kernels in the profile")]
        train_step(t, x, y)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            train_step(t, x, y)
            synchronize(ctx.device)
        kernels = [e.key for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    return out + [judge_nhwc(kernels)]


def _compiled_configurations(ctx: Context, count: int) -> tuple[int, int]:
    """(recompiles inside a timed region, configurations that fell back to eager) over ``count`` compiled
    configurations in one process."""
    from torch._dynamo.utils import counters

    recompiled = fell_back = 0
    for _ in range(count):
        s = _settings(ctx, compile="default", train_steps=2)
        with configuration(ctx.device, s):
            net = build_model("resnet18", 1000).to(ctx.device)
            _, infer = wrap(net, s, ctx.device)
            x = torch.randn(ctx.sizes.batch, 3, ctx.sizes.image_px, ctx.sizes.image_px, device=ctx.device)
            measure_latency(infer, x, warmup=3, repeats=1)
            graphs = counters["stats"].get("unique_graphs", 0)
            measure_latency(infer, x, warmup=0, repeats=10)
            recompiled += counters["stats"].get("unique_graphs", 0) != graphs
            fell_back += compile_report().fell_back
    return recompiled, fell_back


def check_compile(ctx: Context) -> list[Check]:
    if not ctx.cuda:
        return [not_run("compile")]
    val, fell_back = {}, False
    for mode in ("off", "default"):
        cfg = RunConfig("acceptance", str(ctx.device), "resnet18", ctx.sizes.batch,
                        _settings(ctx, compile=mode, train_steps=10))
        m = measure(cfg)
        assert m is not None
        measured = measured_row(m)
        val[mode] = measured["val_s"]
        fell_back = fell_back or (mode == "default" and bool(measured.get("compile_fell_back")))
    recompiled, fell = _compiled_configurations(ctx, 10)
    return [judge_compile_speed(val["default"], val["off"]), judge_compile_fell_back(fell_back),
            judge_recompiles(recompiled, 10), judge_fallbacks(fell, 10)]


def _busy_training(ctx: Context, seconds: float) -> None:
    t, x, y = _trainer(ctx)
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        for _ in range(5):
            train_step(t, x, y)
        synchronize(ctx.device)


def _nvml_uuid_on_torchs_bus(ctx: Context) -> str | None:
    """The UUID NVML gives the GPU on the PCI bus torch reports for the device (None: no bus reported, or a
    MIG slice, whose UUID is not its board's)."""
    props = torch.cuda.get_device_properties(ctx.device.index or 0)
    bus = getattr(props, "pci_bus_id", None)
    if bus is None or gpu_facts(ctx.device.index or 0).mig:
        return None
    address = f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
    try:
        return str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByPciBusId(address)))
    except pynvml.NVMLError:
        return None


def _power_limit_w(handle: object) -> float | None:
    try:
        return float(pynvml.nvmlDeviceGetEnforcedPowerLimit(handle)) / 1000.0
    except pynvml.NVMLError:  # a MIG slice, some vGPUs
        return None


def _idle_power_w(uuid: list[str]) -> float | None:
    idle = TelemetrySampler(0.1, gpu_uuids=uuid).start()
    time.sleep(2.0)
    return idle.stop().summary()["gpu_power_w_mean"]


def check_telemetry(ctx: Context) -> list[Check]:
    if not ctx.cuda or pynvml is None:
        return [not_run("telemetry", expected="needs CUDA and NVML")]
    uuid = cuda_uuids([ctx.device.index or 0])
    with NvmlDevices(uuids=uuid) as nv:
        handles = list(nv.handles.values())
        if not handles:
            return [judge_nvml_handle(0, nv.missing)]
        tdp_w = _power_limit_w(handles[0])
        out = [judge_nvml_handle(len(handles), nv.missing), judge_uuid(uuid[0], _nvml_uuid_on_torchs_bus(ctx))]
    idle_w = _idle_power_w(uuid)
    with configuration(ctx.device, _settings(ctx)):
        sampler = TelemetrySampler(0.1, gpu_uuids=uuid).start()
        with EnergyMeter(gpu_uuids=uuid) as meter:
            e0 = meter.read()
            _busy_training(ctx, ctx.sizes.telemetry_s)
            e1 = meter.read()
            telemetry = sampler.stop()
            energy = meter.between(e0, e1, telemetry=telemetry)
    summary = telemetry.summary()
    power_w = summary["gpu_power_w_mean"]
    return out + [judge_utilization(summary["gpu_util_pct_mean"]), judge_power(power_w, idle_w, tdp_w),
                  judge_energy(energy.gpu_j, power_w, energy.seconds, energy.gpu_method)]


class _PassEvents:
    """A ``measure_latency`` call context that records CUDA events around each pass: the events then time
    the very passes the host clock timed, so clock ramps or a cold cache cannot tell the two apart."""

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.current_stream(device)
        self.pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(self.stream)
        yield
        end.record(self.stream)
        self.pairs.append((start, end))

    def seconds(self, skip: int) -> list[float]:
        self.stream.synchronize()
        return [s.elapsed_time(e) / 1000.0 for s, e in self.pairs[skip:]]


def check_latency(ctx: Context) -> list[Check]:
    if not ctx.cuda:
        return [not_run("batch-1 latency: host clock vs events")]
    with configuration(ctx.device, _settings(ctx)):
        net = build_model(ctx.sizes.model, 1000).to(ctx.device).eval()
        x = torch.randn(1, 3, ctx.sizes.image_px, ctx.sizes.image_px, device=ctx.device)
        events = _PassEvents(ctx.device)
        warmup = 10
        host = measure_latency(net, x, warmup=warmup, repeats=50, context=events).median
    return [judge_latency(host, Samples.of(events.seconds(skip=warmup)).median)]


TIMM_PRECISIONS = {"amp_bf16": "bfloat16", "amp_fp16": "float16"}
TIMM_ROUNDS = 2  # fresh processes a side, interleaved timm, benchlib, timm, benchlib


# What timm's benchmark.py trains with, read from its code: ``create_optimizer_v2(model, opt=args.opt,
# lr=args.lr)`` and nothing else (its --momentum and --weight-decay are parsed, never passed), so timm's
# defaults hold: SGD with Nesterov momentum 0.9 and no weight decay, torch's own kernels (foreach=None, which
# torch runs as foreach on CUDA tensors); AMP without a loss
# scaler; the model from timm's create_model (its last batch norms zero-initialised); 10 warm-up and 40 timed
# steps. benchlib's side is set to the same (tests/test_gpu_acceptance.py reads both sides' effective settings).
TIMM_TRAINS = {"optimizer": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 0.0, "lr": 1e-4,
               "optimizer_impl": "foreach", "grad_scaler": False, "warmup_steps": 10}
TIMM_TIMED_STEPS = 40


def timm_command(benchmark_py: Path, model: str, batch: int, image_px: int, precision: str,
                 out: Path) -> list[str]:
    """timm's ``benchmark.py`` on ``model``: AMP in ``precision``'s dtype, channels_last, its own optimizer
    (``TIMM_TRAINS``: what it trains with whatever flags it is given), training and inference."""
    return [sys.executable, str(benchmark_py), "--model", model, "--bench", "both", "--amp", "--amp-dtype",
            TIMM_PRECISIONS[precision], "--channels-last", "-b", str(batch), "--img-size", str(image_px),
            "--num-classes", "1000", "--opt", "sgd", "--num-warm-iter", str(TIMM_TRAINS["warmup_steps"]),
            "--num-bench-iter", str(TIMM_TIMED_STEPS), "--results-file", str(out)]


def benchlib_command(model: str, device: torch.device, batch: int, image_px: int, precision: str,
                     steps: int = TIMM_TIMED_STEPS) -> list[str]:
    """benchlib's own CLI on timm's very model (``timm:NAME``, built by timm's create_model as benchmark.py builds
    it, its zero-initialised last batch norms included) trained as timm trains it (``TIMM_TRAINS``), in a fresh
    process as timm's runs."""
    trains = [arg for k, v in TIMM_TRAINS.items() for arg in ("--set", f"{k}={str(v).lower()}")]
    return [sys.executable, "-m", "benchlib", "run", "--model", f"timm:{model}", "--data", "synthetic",
            "--device", str(device), "--batch-size", str(batch), "--image-size", str(image_px), "--steps",
            str(steps), "--no-save", "--json", "--set", f"precision={precision}", "--set",
            "memory_format=channels_last", "--set", "cudnn_benchmark=true", "--set", "synthetic_classes=1000",
            *trains]


def interleaved(rounds: int) -> list[str]:
    """The order of the sides' fresh processes: A B A B, so drift and heat reach both alike."""
    return ["timm", "benchlib"] * rounds


def _timm_side(cmd: list[str], out: Path) -> dict[str, float]:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"timm benchmark.py exit {done.returncode}: {done.stderr.strip()[-240:]}")
    with out.open() as fh:
        row = next(csv.DictReader(fh))
    return {"train": float(row["train_samples_per_sec"]), "infer": float(row["infer_samples_per_sec"])}


def _benchlib_side(cmd: list[str]) -> dict[str, float]:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"benchlib run exit {done.returncode}: {done.stderr.strip()[-240:]}")
    row = json.loads(done.stdout)
    return {"train": float(row["train_samples_per_s"]), "infer": float(row["infer_samples_per_s"])}


def check_timm(ctx: Context) -> list[Check]:
    """benchlib against timm's benchmark.py on the same timm model, batch, image size and precision (bf16 and
    fp16), each side in fresh processes, interleaved; judged at 0.97 or better, training and inference."""
    if not ctx.cuda or ctx.timm_benchmark is None:
        return [not_run("benchlib / timm benchmark.py", "not run", "pass --timm-benchmark on a GPU")]
    gpu, out = gpu_facts(ctx.device.index or 0), []
    for precision in TIMM_PRECISIONS:
        if why := precision_problem(gpu, precision):
            out.append(not_run(f"benchlib / timm ({precision})", why, ">= 0.97"))
            continue
        sides: dict[str, list[dict[str, float]]] = {"timm": [], "benchlib": []}
        with tempfile.TemporaryDirectory() as tmp:
            for i, side in enumerate(interleaved(TIMM_ROUNDS)):
                csv_out = Path(tmp) / f"timm-{i}.csv"
                sides[side].append(
                    _timm_side(timm_command(ctx.timm_benchmark, ctx.sizes.model, ctx.sizes.batch, ctx.sizes.image_px,
                                            precision, csv_out), csv_out) if side == "timm" else
                    _benchlib_side(benchlib_command(ctx.sizes.model, ctx.device, ctx.sizes.batch, ctx.sizes.image_px,
                                                    precision)))
        for what in ("train", "infer"):
            ours = statistics.median(r[what] for r in sides["benchlib"])
            theirs = statistics.median(r[what] for r in sides["timm"])
            out.append(judge_timm(f"{what} ({precision})", ours, theirs))
    return out


def check_layers(ctx: Context) -> list[Check]:
    """``benchlib layers`` on this GPU, strict fp32: the kernels under each layer's range against the step and
    the roof, each layer above its roof judged by its own kernels' names."""
    if not ctx.cuda:
        return [not_run("per-layer table: layers' kernel time / step")]
    cfg = RunConfig("acceptance", str(ctx.device), "resnet18", min(ctx.sizes.batch, 32), _settings(ctx))
    with tempfile.TemporaryDirectory() as tmp:
        report = measure_layers(cfg, tmp, steps=10, block=5)
    table = report.table
    flagged = table[(table["bound"] == "compute") & table["above_roof"].fillna(False).astype(bool)]
    above = [AboveRoof(str(r.layer), str(r.phase), float(r.roof_fraction),
                       tuple(report.kernels.get((str(r.layer), str(r.phase)), ()))) for r in flagged.itertuples()]
    strict = not _settings(ctx).knobs.tf32 and report.roof_dtype == "fp32"
    return [judge_layers(report.coverage, report.flops_total / report.model_flops, above,
                         tf32_kernels(report.kernels) if strict else ())]


FEED_BATCHES = 6  # uint8 batches through the side stream, each checked against the CPU's arithmetic


def check_device_feed(ctx: Context) -> list[Check]:
    """uint8 batches copied on benchlib's side stream and normalised on the GPU (``data.device_feed``) against
    the same batches normalised on the CPU, each read on the compute stream while the next one is copied and
    after a kernel on the compute stream has scribbled on fresh memory: a stream ordering that let the compute
    stream read a batch before its copy ended, or reuse its memory early, shows as a difference."""
    if not ctx.cuda:
        return [not_run("side-stream feed against CPU normalisation")]
    from benchlib.data.device_feed import DeviceFeed

    stats = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 256, (16, 3, 64, 64), dtype=torch.uint8, generator=gen).pin_memory(),
                torch.arange(16)) for _ in range(FEED_BATCHES)]
    mean = torch.tensor([255.0 * m for m in stats[0]]).view(1, 3, 1, 1)
    std = torch.tensor([255.0 * v for v in stats[1]]).view(1, 3, 1, 1)
    worst, seen = 0.0, 0
    for (x, y), (expected_x, expected_y) in zip(DeviceFeed(batches, ctx.device, stats,
                                                           torch.channels_last), batches):
        torch.empty(64 << 20, dtype=torch.uint8, device=ctx.device).fill_(255)  # fresh memory, scribbled on
        cpu = (expected_x.float() - mean) / std
        worst = max(worst, float((x.cpu() - cpu).abs().max()))
        worst = max(worst, float((y.cpu() != expected_y).sum()))
        seen += 1
    return [judge_device_feed(worst, seen, FEED_BATCHES)]


CHECKS: list[Callable[[Context], list[Check]]] = [
    check_step_timer, check_ceilings, check_memory_isolation, check_memory_floor, check_no_sync_in_steps, check_amp,
    check_channels_last,
    check_compile, check_telemetry, check_latency, check_layers, check_timm, check_device_feed,
]


def run_checks(ctx: Context, only: set[str] | None = None) -> list[Check]:
    results: list[Check] = []
    for check in CHECKS:
        if only and check.__name__ not in only:
            continue
        t0 = time.perf_counter()
        try:
            found = check(ctx)
        except Exception as exc:  # a check that breaks is a failed check, and the run goes on
            found = [Check(check.__name__, None, "", "runs", False, f"{type(exc).__name__}: {exc}"[:300])]
        for c in found:
            c.detail = (c.detail + f" [{time.perf_counter() - t0:.0f} s]").strip()
        results += found
        print(f"[acceptance] {check.__name__}: " + ", ".join(_verdict(c) for c in found), file=sys.stderr, flush=True)
        fresh_state(ctx.device)
    return results


def _verdict(c: Check) -> str:
    return "pass" if c.passed else "FAIL" if c.passed is False else "-"


def table(results: list[Check]) -> str:
    lines = [f"{'check':<58} {'figure':>12} {'unit':<8} {'expected':<36} verdict"]
    for c in results:
        figure = f"{c.figure:.4g}" if c.figure is not None and math.isfinite(c.figure) else "-"
        lines.append(f"{c.name[:58]:<58} {figure:>12} {c.unit:<8} {c.expected[:36]:<36} {_verdict(c)}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", type=Path, help="write the verdicts as JSON here")
    parser.add_argument("--timm-benchmark", type=Path, help="timm's benchmark.py, to compare with")
    parser.add_argument("--allow-cpu", action="store_true", help="run the plumbing on the CPU (checks that need "
                                                                 "CUDA are skipped)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (for the plumbing run)")
    parser.add_argument("--only", help="comma-separated checks to run (e.g. check_layers,check_timm): a rerun "
                                       "of the ones that failed; default all")
    return parser


def _context(device: torch.device, quick: bool, timm_benchmark: Path | None) -> Context:
    """The run's context: on a GPU its datasheet by family and board, and sizes fitted to its free memory,
    each choice in ``notes``."""
    sizes = QUICK if quick else Sizes()
    if device.type == "cpu":
        sizes = replace(sizes, copy_bytes=min(sizes.copy_bytes, 64 * 2**20), matmul=min(sizes.matmul, 1024))
        return Context(device, sizes, None, "a CPU: no datasheet range", timm_benchmark)
    gpu = gpu_facts(device.index or 0)
    sheet, why = sheet_for(gpu)
    sizes, notes = fit_sizes(sizes, gpu, fp32_floor_bytes)
    return Context(device, sizes, sheet, why, timm_benchmark, [f"ranges: {why}", *notes])


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not torch.cuda.is_available() and not args.allow_cpu:
        print("gpu_acceptance: no CUDA device on this machine: nothing to check (exit 0)")
        return 0
    device = torch.device(args.device if torch.cuda.is_available() else "cpu")
    name = device_name(device)
    ctx = _context(device, args.quick, args.timm_benchmark)
    for note in ctx.notes:
        print(f"[acceptance] {note}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    only = set(args.only.split(",")) if args.only else None
    unknown = sorted((only or set()) - {c.__name__ for c in CHECKS})
    if unknown:
        print(f"gpu_acceptance: unknown check {', '.join(unknown)}; allowed: {', '.join(c.__name__ for c in CHECKS)}",
              file=sys.stderr)
        return 2
    results = run_checks(ctx, only)
    print(table(results))
    failed = [c.name for c in results if c.passed is False]
    report = {"device": str(device), "device_name": name, "seconds": time.perf_counter() - t0,
              "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "driver": collect_manifest().get("driver_version"), "ranges_from": ctx.sheet_why,
              "sizes": asdict(ctx.sizes), "sizes_why": ctx.notes, "passed": not failed, "failed": failed,
              "checks": [asdict(c) for c in results], "argv": sys.argv, "cwd": os.getcwd()}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"{len(results) - len(failed)} of {len(results)} checks not failed in {report['seconds']:.0f} s on {name}"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
