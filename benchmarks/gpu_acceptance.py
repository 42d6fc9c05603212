"""GPU acceptance run: does benchlib measure a real GPU correctly? One verdict per check, with its figure.

Every check names its figure, the range it must fall in and pass/fail; the JSON (``--out``) keeps them all
with the machine and the versions. The ceilings' ranges come from the datasheet of the GPU's family
(``benchlib.roofline.datasheet``: T4, L4, A10, A100 PCIe/SXM, H100 PCIe/SXM, H200, ...): a measured roof
between ``RANGE_LOW`` of its figure and 2% above it. They are judged only where the family is known; a MIG
slice has no datasheet and is not judged. What a GPU lacks (TF32 and bf16 below capability 8.0) is
skipped with the reason, not failed. Each judgement is a pure function (``judge_*``) that a test feeds
wrong figures.

    python benchmarks/gpu_acceptance.py [--device cuda:0] [--out FILE.json] [--timm-benchmark PATH]

``--timm-benchmark`` names timm's ``benchmark.py`` (from a checkout of pytorch-image-models; timm must be
installed) to run side by side with benchlib on resnet50, AMP, channels_last, the same batch.
Without CUDA the script says so in one line and exits 0; ``--allow-cpu --quick`` runs its plumbing on the
CPU with tiny sizes (what the test suite does), skipping what only a GPU can show.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from benchlib.engine.inference import measure_latency
from benchlib.engine.knobs import apply_memory_format, compile_report
from benchlib.engine.setup import configuration, fresh_state, wrap
from benchlib.engine.step import Trainer, train_step
from benchlib.env.devices import cuda_uuids, device_name, synchronize
from benchlib.env.gpu import gpu_facts, precision_problem
from benchlib.env.manifest import collect_manifest
from benchlib.instruments.energy import EnergyMeter
from benchlib.instruments.nvml import NvmlDevices, normal_uuid, pynvml
from benchlib.instruments.telemetry import TelemetrySampler
from benchlib.instruments.timing import Samples, StepTimer
from benchlib.nets.memory_floor import training_floor_bytes
from benchlib.nets.models import build_model
from benchlib.roofline.ceilings import measure_ceilings
from benchlib.roofline.datasheet import datasheet_for
from benchlib.run.columns import ACTIVATION_DTYPES
from benchlib.run.measure import measure
from benchlib.spec.settings import RunConfig, RunSettings

TERA = 1e12


@dataclass
class Check:
    name: str
    figure: float | None
    unit: str
    expected: str
    passed: bool | None  # None: not judged here (skipped, or informational on this GPU)
    detail: str = ""


@dataclass
class Sizes:
    """Work sizes: the issue's on a GPU, tiny ones for a plumbing run on the CPU."""

    model: str = "resnet50"
    batch: int = 128
    image_px: int = 224
    steps: int = 50
    warmup: int = 5
    matmul: int = 8192
    copy_bytes: int = 2 * 2**30
    telemetry_s: float = 15.0


QUICK = Sizes(model="resnet18", batch=8, image_px=32, steps=6, warmup=2, matmul=256, copy_bytes=8 * 2**20,
              telemetry_s=1.5)


@dataclass
class Context:
    device: torch.device
    sizes: Sizes
    sheet: dict[str, Any] | None  # the datasheet of the GPU's family (None: unknown part, a MIG slice, a CPU)
    timm_benchmark: Path | None
    notes: list[str] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def _settings(ctx: Context, **flat: Any) -> RunSettings:
    s = ctx.sizes
    return RunSettings.of(dataset="synthetic", image_size=s.image_px, synthetic_samples=s.batch * (s.steps + s.warmup),
                          synthetic_classes=1000, train_steps=s.steps, warmup_steps=s.warmup, latency_repeats=20,
                          infer_warmup_batches=5, telemetry=False, **flat)


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



# ---------------------------------------------------------------- judgements (pure: a test feeds them wrong figures)

# A measured roof's lowest share of its datasheet figure: cuBLAS reaches 65-100% of the fp32 figure on a
# large square product, 55-100% of the tensor-core ones, and a device copy 70-100% of the memory's.
RANGE_LOW = {"fp32": 0.65, "tf32": 0.55, "fp16": 0.55, "bf16": 0.55, "bandwidth": 0.70}
RANGE_HIGH = 1.02  # above the datasheet is a measuring error, not a fast part


def expected_range(sheet: dict[str, Any] | None, what: str) -> tuple[float, float] | None:
    """(low, high) in the sheet's units for ``what`` (a dtype or ``bandwidth``); None where the sheet has none."""
    if sheet is None:
        return None
    figure = sheet["bandwidth_bytes_per_s"] if what == "bandwidth" else sheet["peak_flops_per_s"].get(what)
    return (RANGE_LOW[what] * figure, RANGE_HIGH * figure) if figure else None


def judge_roof(what: str, measured: float, sheet: dict[str, Any] | None) -> Check:
    """A ceiling (FLOP/s of a dtype, or bandwidth in bytes/s) against its family's datasheet range."""
    unit, scale = ("TB/s", TERA) if what == "bandwidth" else ("TFLOP/s", TERA)
    name = "ceiling copy bandwidth" if what == "bandwidth" else f"ceiling {what}"
    span = expected_range(sheet, what)
    if span is None:
        why = "no datasheet for this part (or a MIG slice)" if sheet is None else f"its datasheet states no {what}"
        return Check(name, measured / scale, unit, "within its family's datasheet range", None, why)
    low, high = span
    return Check(name, measured / scale, unit, f"{low / scale:.3g}-{high / scale:.3g} ({sheet['name']})",
                 low <= measured <= high, f"datasheet {span[1] / RANGE_HIGH / scale:.3g}")


def judge_step_timer(event_s: float, host_s: float, device: str) -> Check:
    ratio = event_s / host_s if host_s > 0 else math.nan
    return Check(f"step timer on {device}: sum of step_s / host clock", ratio, "ratio", "0.95-1.05",
                 0.95 <= ratio <= 1.05, f"{event_s:.3f} s by events, {host_s:.3f} s by host clock")


NHWC = re.compile(r"nhwc|channels_?last", re.IGNORECASE)
# layout conversions name NHWC too (nchwToNhwc, nhwc_to_nchw, a transpose or copy kernel): they show the
# data was converted, not that a convolution ran in channels_last
CONVERSION = re.compile(r"nchw_?to_?nhwc|nhwc_?to_?nchw|transpose|convert|copy|permute", re.IGNORECASE)


def judge_nhwc(kernels: list[str]) -> Check:
    compute = [k for k in kernels if NHWC.search(k) and not CONVERSION.search(k)]
    return Check("NHWC compute kernels in the profile", float(len(compute)), "kernels", ">= 1", bool(compute),
                 compute[0][:100] if compute else f"{len(kernels)} kernels, none an NHWC convolution")


def judge_uuid(torch_uuid: str, nvml_uuid_same_bus: str | None) -> Check:
    """torch's UUID of the device against the UUID NVML gives the GPU on the same PCI bus: found independently
    of the UUID lookup benchlib uses, so a wrong mapping shows."""
    if nvml_uuid_same_bus is None:
        return Check("NVML UUID on torch's PCI bus == torch UUID", None, "bool", "1", None,
                     "torch reports no PCI bus here, or a MIG slice (its UUID is the slice's)")
    same = normal_uuid(nvml_uuid_same_bus) == normal_uuid(torch_uuid)
    return Check("NVML UUID on torch's PCI bus == torch UUID", float(same), "bool", "1", same,
                 f"torch {torch_uuid}, NVML {nvml_uuid_same_bus}")


def judge_scaler(scale: float, updated_steps: int, steps: int) -> Check:
    """fp16 training works when the scale is finite and positive and the optimizer stepped (a scaler that
    skips every step on inf gradients leaves the weights where they were)."""
    ok = math.isfinite(scale) and scale > 0 and updated_steps >= 1
    return Check("GradScaler: finite scale and weights updated", float(updated_steps), "steps",
                 f">= 1 of {steps} with a finite scale", ok, f"scale {scale:g}")


def judge_memory_floor(floor_bytes: float, peak_bytes: int) -> Check:
    """The preflight's training-memory floor is a floor: a real step's allocated peak is at or above it
    (below it, the preflight could refuse a batch that runs)."""
    ratio = peak_bytes / floor_bytes if floor_bytes > 0 else math.nan
    return Check("allocated training peak / preflight floor", ratio, "ratio", ">= 1", ratio >= 1,
                 f"peak {peak_bytes / 2**20:.0f} MiB, floor {floor_bytes / 2**20:.0f} MiB")


# ---------------------------------------------------------------- the checks

def check_step_timer(ctx: Context) -> list[Check]:
    """On the device asked for, and on the last GPU too (with cuda:0 current: events recorded on the wrong
    stream give launch times there, which cuda:0 alone would never show)."""
    devices = [ctx.device]
    if ctx.cuda and torch.cuda.device_count() > 1:
        devices.append(torch.device("cuda", torch.cuda.device_count() - 1))
    out = []
    for device in dict.fromkeys(devices):
        here = replace(ctx, device=device)
        with configuration(device, _settings(here)):
            t, x, y = _trainer(here)
            steps, host = _timed_steps(here, t, x, y)
        out.append(judge_step_timer(sum(steps), host, str(device)))
    return out


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
    out += [judge_roof(dtype, peak, ctx.sheet) for dtype, peak in c.peak_flops_per_s.items()]
    out.append(judge_roof("bandwidth", c.bandwidth_bytes_per_s, ctx.sheet))
    if "tf32" in c.peak_flops_per_s:
        ratio = c.peak_flops_per_s["fp32"] / c.peak_flops_per_s["tf32"]
        out.append(Check("strict fp32 / tf32", ratio, "ratio", "< 0.2", ratio < 0.2, "TF32 really off for fp32"))
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
        return [Check("memory isolation", None, "", "needs CUDA", None, "skipped")]
    big, small = (256, 16) if not ctx.sizes.batch < 64 else (64, 8)
    for batch in (big, small):
        cfg = RunConfig("acceptance", str(ctx.device), "resnet18", batch,
                        _settings(ctx, synthetic_samples=batch * 8, train_steps=3, warmup_steps=1, latency_repeats=3))
        measured = measure(cfg)
        assert measured is not None
        in_process = int(measured.row["peak_cuda_reserved_bytes"] or 0)
    fresh = _reserved_peak_fresh(ctx, small)
    ratio = in_process / fresh if fresh else math.nan
    return [Check(f"reserved peak of batch {small} after batch {big} / fresh process", ratio, "ratio", "0.9-1.1",
                  0.9 <= ratio <= 1.1, f"{in_process / 2**20:.0f} MiB in process, {fresh / 2**20:.0f} MiB fresh")]


def check_memory_floor(ctx: Context) -> list[Check]:
    """A few fp32 and fp16 training steps: the allocator's peak against ``nets/memory_floor.py``'s floor."""
    if not ctx.cuda:
        return [Check("allocated training peak / preflight floor", None, "", "needs CUDA", None, "skipped")]
    out = []
    for precision in ("fp32", "amp_fp16"):
        fresh_state(ctx.device)
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


def check_no_sync_in_steps(ctx: Context) -> list[Check]:
    if not ctx.cuda:
        return [Check("no synchronize inside timed steps", None, "", "needs CUDA", None, "skipped")]
    out = []
    gpu = gpu_facts(ctx.device.index or 0)
    for precision in ("fp32", "amp_fp16", "amp_bf16"):
        why = precision_problem(gpu, precision)
        if why:
            out.append(Check(f"synchronizations inside {precision} steps", None, "count", "0", None, why))
            continue
        with configuration(ctx.device, _settings(ctx, precision=precision)):
            t, x, y = _trainer(ctx, precision)
            for _ in range(2):
                train_step(t, x, y)
            synchronize(ctx.device)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    timer = StepTimer(ctx.device)
                    for _ in range(3):
                        timer.start()
                        train_step(t, x, y)
                        timer.stop()
                finally:
                    torch.cuda.set_sync_debug_mode(0)
            syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message).lower()]
            timer.collect()
        out.append(Check(f"synchronizations inside {precision} steps", float(len(syncs)), "count", "0", not syncs,
                         syncs[0][:120] if syncs else ""))
    return out


def check_amp(ctx: Context) -> list[Check]:
    if not ctx.cuda:
        return [Check("AMP speed-up", None, "", "needs CUDA", None, "skipped")]
    gpu = gpu_facts(ctx.device.index or 0)
    medians: dict[str, float] = {}
    out = []
    for precision in ("fp32", "amp_bf16", "amp_fp16"):
        why = precision_problem(gpu, precision)
        if why:
            out.append(Check(f"{precision} step / strict fp32 step", None, "ratio", "< 0.6", None, why))
            continue
        with configuration(ctx.device, _settings(ctx, precision=precision)):  # fp32: TF32 off, strict
            t, x, y = _trainer(ctx, precision)
            before = [p.detach().clone() for p in t.net.parameters()][-1]
            steps, _ = _timed_steps(ctx, t, x, y)
            medians[precision] = Samples.of(steps).median
            if t.scaler is not None:
                moved = int(not torch.equal(before, [p.detach() for p in t.net.parameters()][-1]))
                out.append(judge_scaler(float(t.scaler.get_scale()), moved, ctx.sizes.steps + ctx.sizes.warmup))
    out += [Check(f"{p} step / strict fp32 step", medians[p] / medians["fp32"], "ratio", "< 0.6",
                  medians[p] / medians["fp32"] < 0.6,
                  f"{medians[p] * 1e3:.1f} ms against {medians['fp32'] * 1e3:.1f} ms")
            for p in ("amp_bf16", "amp_fp16") if p in medians]
    return out


def check_channels_last(ctx: Context) -> list[Check]:
    with configuration(ctx.device, _settings(ctx, memory_format="channels_last")):
        t, x, y = _trainer(ctx, memory_format="channels_last")
        conv = next(m for m in t.net.modules() if isinstance(m, torch.nn.Conv2d))
        weights_cl = conv.weight.is_contiguous(memory_format=torch.channels_last)
        out = [Check("conv weights in channels_last", float(weights_cl), "bool", "1", weights_cl)]
        if not ctx.cuda:
            return out + [Check("NHWC kernels in the profile", None, "", "needs CUDA", None, "skipped")]
        train_step(t, x, y)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            train_step(t, x, y)
            synchronize(ctx.device)
        kernels = [e.key for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    return out + [judge_nhwc(kernels)]


def check_compile(ctx: Context) -> list[Check]:
    if not ctx.cuda:
        return [Check("compile", None, "", "needs CUDA", None, "skipped")]
    val = {}
    for mode in ("off", "default"):
        cfg = RunConfig("acceptance", str(ctx.device), "resnet18", ctx.sizes.batch,
                        _settings(ctx, compile=mode, train_steps=10))
        measured = measure(cfg)
        assert measured is not None
        val[mode] = measured.row["val_s"]
        if mode == "default":
            fell_back = bool(measured.row.get("compile_fell_back"))
    out = [Check("compiled val_s / eager val_s", val["default"] / val["off"], "ratio", "<= 1.2",
                 val["default"] / val["off"] <= 1.2, "shapes warmed before the timed pass"),
           Check("compiled row fell back to eager", float(fell_back), "bool", "0", not fell_back)]
    # no recompilation inside a timed region, and still compiled after ten configurations in one process
    from torch._dynamo.utils import counters

    still = []
    for _ in range(10):
        s = _settings(ctx, compile="default", train_steps=2)
        with configuration(ctx.device, s):
            net = build_model("resnet18", 1000).to(ctx.device)
            _, infer = wrap(net, s, ctx.device)
            x = torch.randn(ctx.sizes.batch, 3, ctx.sizes.image_px, ctx.sizes.image_px, device=ctx.device)
            lat = measure_latency(infer, x, warmup=3, repeats=1)
            graphs = counters["stats"].get("unique_graphs", 0)
            measure_latency(infer, x, warmup=0, repeats=10)
            still.append((counters["stats"].get("unique_graphs", 0) == graphs, compile_report().fell_back, lat.n))
    recompiled = sum(not same for same, _, _ in still)
    fell = sum(f for _, f, _ in still)
    return out + [Check("recompiles inside timed regions (10 configurations)", float(recompiled), "count", "0",
                        recompiled == 0),
                  Check("configurations that fell back to eager (of 10)", float(fell), "count", "0", fell == 0)]


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
        return str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByPciBusId_v2(address)))
    except pynvml.NVMLError:
        return None


def check_telemetry(ctx: Context) -> list[Check]:
    if not ctx.cuda or pynvml is None:
        return [Check("telemetry", None, "", "needs CUDA and NVML", None, "skipped")]
    uuid = cuda_uuids([ctx.device.index or 0])
    with NvmlDevices(uuids=uuid) as nv:
        handles = list(nv.handles.values())
        if not handles:
            return [Check("NVML handle of the torch device", None, "", "found by UUID", False, str(nv.missing))]
        tdp_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(handles[0]) / 1000.0
        out = [judge_uuid(uuid[0], _nvml_uuid_on_torchs_bus(ctx))]
    idle = TelemetrySampler(0.1, gpu_uuids=uuid).start()
    time.sleep(2.0)
    idle_power = idle.stop().summary()["gpu_power_w_mean"] or 0.0
    with configuration(ctx.device, _settings(ctx)):
        sampler = TelemetrySampler(0.1, gpu_uuids=uuid).start()
        with EnergyMeter(gpu_uuids=uuid) as meter:
            e0 = meter.read()
            _busy_training(ctx, ctx.sizes.telemetry_s)
            e1 = meter.read()
            telemetry = sampler.stop()
            energy = meter.between(e0, e1, telemetry=telemetry)
    summary = telemetry.summary()
    util, power = summary["gpu_util_pct_mean"] or 0.0, summary["gpu_power_w_mean"] or 0.0
    out.append(Check("GPU utilization while GPU-bound", util, "%", "> 80", util > 80))
    out.append(Check("mean power", power, "W", f"between idle ({idle_power:.0f} W) and TDP ({tdp_w:.0f} W)",
                     idle_power < power <= tdp_w * 1.02))
    expected_j = power * energy.seconds
    ratio = (energy.gpu_j or math.nan) / expected_j if expected_j else math.nan
    out.append(Check("counter energy / (mean power x window)", ratio, "ratio", "0.85-1.15", 0.85 <= ratio <= 1.15,
                     f"{energy.gpu_j} J over {energy.seconds:.1f} s by {energy.gpu_method}"))
    return out


def check_latency(ctx: Context) -> list[Check]:
    if not ctx.cuda:
        return [Check("batch-1 latency: host clock vs events", None, "", "needs CUDA", None, "skipped")]
    with configuration(ctx.device, _settings(ctx)):
        net = build_model(ctx.sizes.model, 1000).to(ctx.device).eval()
        x = torch.randn(1, 3, ctx.sizes.image_px, ctx.sizes.image_px, device=ctx.device)
        host = measure_latency(net, x, warmup=10, repeats=50).median
        events = []
        with torch.inference_mode():
            for _ in range(50):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(torch.cuda.current_stream(ctx.device))
                net(x)
                end.record(torch.cuda.current_stream(ctx.device))
                end.synchronize()
                events.append(start.elapsed_time(end) / 1000.0)
    ratio = host / Samples.of(events).median
    return [Check("batch-1 latency: host clock / CUDA events", ratio, "ratio", "0.9-1.1", 0.9 <= ratio <= 1.1,
                  f"{host * 1e3:.2f} ms by host clock")]


def _timm_results(ctx: Context) -> dict[str, float]:
    assert ctx.timm_benchmark is not None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "timm.csv"
        cmd = [sys.executable, str(ctx.timm_benchmark), "--model", ctx.sizes.model, "--bench", "both", "--amp",
               "--channels-last", "-b", str(ctx.sizes.batch), "--img-size", str(ctx.sizes.image_px),
               "--results-file", str(out)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        with out.open() as fh:
            row = next(csv.DictReader(fh))
    return {k: float(v) for k, v in row.items() if k.endswith("samples_per_sec") and v}


def check_timm(ctx: Context) -> list[Check]:
    if not ctx.cuda or ctx.timm_benchmark is None:
        return [Check("benchlib / timm benchmark.py", None, "", "pass --timm-benchmark on a GPU", None, "not run")]
    timm = _timm_results(ctx)
    cfg = RunConfig("acceptance", str(ctx.device), ctx.sizes.model, ctx.sizes.batch,
                    _settings(ctx, precision="amp_fp16", memory_format="channels_last", cudnn_benchmark=True))
    measured = measure(cfg)
    assert measured is not None
    row = measured.row
    out = []
    for ours, theirs, what in (("train_samples_per_s", "train_samples_per_sec", "training"),
                               ("infer_samples_per_s", "infer_samples_per_sec", "inference")):
        ratio = row[ours] / timm[theirs] if timm.get(theirs) else math.nan
        out.append(Check(f"{what} throughput benchlib / timm", ratio, "ratio", "0.7-1.5 (informational)",
                         0.7 <= ratio <= 1.5, f"benchlib {row[ours]:.0f}, timm {timm.get(theirs, math.nan):.0f} "
                         "samples/s (timm synchronizes every inference batch; benchlib runs them back to back)"))
    return out


CHECKS: list[Callable[[Context], list[Check]]] = [
    check_step_timer, check_ceilings, check_memory_isolation, check_memory_floor, check_no_sync_in_steps, check_amp,
    check_channels_last,
    check_compile, check_telemetry, check_latency, check_timm,
]


def run_checks(ctx: Context) -> list[Check]:
    results: list[Check] = []
    for check in CHECKS:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--out", type=Path, help="write the verdicts as JSON here")
    parser.add_argument("--timm-benchmark", type=Path, help="timm's benchmark.py, to compare with")
    parser.add_argument("--allow-cpu", action="store_true", help="run the plumbing on the CPU (checks that need "
                                                                 "CUDA are skipped)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (for the plumbing run)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not args.allow_cpu:
        print("gpu_acceptance: no CUDA device on this machine: nothing to check (exit 0)")
        return 0
    device = torch.device(args.device if torch.cuda.is_available() else "cpu")
    name = device_name(device)
    sizes = QUICK if args.quick else Sizes()
    if device.type == "cpu":
        sizes = replace(sizes, copy_bytes=min(sizes.copy_bytes, 64 * 2**20), matmul=min(sizes.matmul, 1024))
    ctx = Context(device, sizes, datasheet_for(name) if device.type == "cuda" else None, args.timm_benchmark)
    t0 = time.perf_counter()
    results = run_checks(ctx)
    print(table(results))
    failed = [c.name for c in results if c.passed is False]
    manifest = collect_manifest()
    report = {"device": str(device), "device_name": name, "seconds": time.perf_counter() - t0,
              "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "driver": manifest.get("driver_version"),
              "ranges_from": ctx.sheet["name"] if ctx.sheet else None,
              "sizes": asdict(sizes), "passed": not failed, "failed": failed, "checks": [asdict(c) for c in results],
              "argv": sys.argv, "cwd": os.getcwd()}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"{len(results) - len(failed)} of {len(results)} checks not failed in {report['seconds']:.0f} s on {name}"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
