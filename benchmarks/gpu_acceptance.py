"""GPU acceptance run: does benchlib measure a real GPU correctly? One verdict per check, with its figure.

Every check names its figure, the range it must fall in and pass/fail; the JSON (``--out``) keeps them all
with the machine and the versions. Ranges for H100/H200 (SXM) are the issue's; on other GPUs the checks
that hold for any recent GPU apply and the H100/H200 ranges are reported but not judged.

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
from benchlib.engine.knobs import apply_memory_format, compile_report, make_grad_scaler
from benchlib.engine.setup import configuration, fresh_state, wrap
from benchlib.engine.step import Trainer, train_step
from benchlib.env.devices import cuda_uuids, device_name, synchronize
from benchlib.env.manifest import collect_manifest
from benchlib.instruments.energy import EnergyMeter
from benchlib.instruments.nvml import NvmlDevices, normal_uuid, pynvml
from benchlib.instruments.telemetry import TelemetrySampler
from benchlib.instruments.timing import Samples, StepTimer
from benchlib.nets.models import build_model
from benchlib.roofline.ceilings import measure_ceilings
from benchlib.roofline.datasheet import datasheet_for
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
    hopper: bool  # H100 or H200: the ranges apply
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


# ---------------------------------------------------------------- the checks

def check_step_timer(ctx: Context) -> list[Check]:
    with configuration(ctx.device, _settings(ctx)):
        t, x, y = _trainer(ctx)
        steps, host = _timed_steps(ctx, t, x, y)
    ratio = sum(steps) / host
    return [Check("step timer: sum of step_s / host clock", ratio, "ratio", "0.95-1.05", 0.95 <= ratio <= 1.05,
                  f"{len(steps)} steps of {ctx.sizes.model} batch {ctx.sizes.batch}: {sum(steps):.3f} s by events, "
                  f"{host:.3f} s by host clock")]


def check_ceilings(ctx: Context) -> list[Check]:
    dtypes = ["fp32", "tf32", "fp16", "bf16"] if ctx.cuda else ["fp32"]
    c = measure_ceilings(ctx.device, dtypes=dtypes, matmul_size=ctx.sizes.matmul, copy_bytes=ctx.sizes.copy_bytes,
                         repeats=5, warmup=2)
    sheet = datasheet_for(c.device_name)
    ranges = {"fp32": (45, 70), "tf32": (300, 500), "fp16": (550, 1000), "bf16": (550, 1000)}
    out = []
    for dtype, peak in c.peak_flops_per_s.items():
        tflops = peak / TERA
        low, high = ranges[dtype]
        below_sheet = (
            sheet is None or dtype not in sheet["peak_flops_per_s"] or peak <= sheet["peak_flops_per_s"][dtype]
        )
        judged = (low <= tflops <= high) if ctx.hopper else None
        passed = below_sheet and (judged if judged is not None else True)
        out.append(
            Check(
                f"ceiling {dtype}",
                tflops,
                "TFLOP/s",
                f"{low}-{high} on H100/H200; <= datasheet",
                passed,
                f"datasheet {sheet['peak_flops_per_s'].get(dtype, 0) / TERA:.0f}" if sheet else "no datasheet",
            )
        )
    tbs = c.bandwidth_bytes_per_s / TERA
    below = sheet is None or c.bandwidth_bytes_per_s <= sheet["bandwidth_bytes_per_s"]
    out.append(Check("ceiling copy bandwidth", tbs, "TB/s", "2.4-4.9 on H100/H200; <= datasheet",
                     below and (2.4 <= tbs <= 4.9 if ctx.hopper else True), "bytes read + written"))
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


def check_no_sync_in_steps(ctx: Context) -> list[Check]:
    if not ctx.cuda:
        return [Check("no synchronize inside timed steps", None, "", "needs CUDA", None, "skipped")]
    out = []
    for precision in ("fp32", "amp_bf16"):
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
    medians = {}
    scale = math.nan
    for precision in ("fp32", "amp_bf16", "amp_fp16"):
        with configuration(ctx.device, _settings(ctx, precision=precision)):  # fp32: TF32 off, strict
            t, x, y = _trainer(ctx, precision)
            steps, _ = _timed_steps(ctx, t, x, y)
            medians[precision] = Samples.of(steps).median
            if t.scaler is not None:
                scale = float(t.scaler.get_scale())
    out = [
        Check(
            f"{p} step / strict fp32 step",
            medians[p] / medians["fp32"],
            "ratio",
            "< 0.6",
            medians[p] / medians["fp32"] < 0.6,
            f"{medians[p] * 1e3:.1f} ms against {medians['fp32'] * 1e3:.1f} ms",
        )
        for p in ("amp_bf16", "amp_fp16")
    ]
    out.append(Check("GradScaler scale after fp16 steps", scale, "", "finite", math.isfinite(scale),
                     "a scaler exists only for fp16 on CUDA"
                     if make_grad_scaler(_settings(ctx, precision="amp_fp16").knobs, ctx.device) else "no scaler"))
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
        nhwc = [k for k in kernels if re.search(r"nhwc|channels_?last", k, re.IGNORECASE)]
    return out + [Check("NHWC kernels in the profile", float(len(nhwc)), "kernels", ">= 1", bool(nhwc),
                        nhwc[0][:100] if nhwc else f"{len(kernels)} kernels, none NHWC")]


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


def check_telemetry(ctx: Context) -> list[Check]:
    if not ctx.cuda or pynvml is None:
        return [Check("telemetry", None, "", "needs CUDA and NVML", None, "skipped")]
    uuid = cuda_uuids([ctx.device.index or 0])
    with NvmlDevices(uuids=uuid) as nv:
        handles = list(nv.handles.values())
        if not handles:
            return [Check("NVML handle of the torch device", None, "", "found by UUID", False, str(nv.missing))]
        nvml_uuid = normal_uuid(pynvml.nvmlDeviceGetUUID(handles[0]))
        tdp_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(handles[0]) / 1000.0
    out = [Check("NVML UUID == torch UUID", float(nvml_uuid == normal_uuid(uuid[0])), "bool", "1",
                 nvml_uuid == normal_uuid(uuid[0]), nvml_uuid)]
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
    check_step_timer, check_ceilings, check_memory_isolation, check_no_sync_in_steps, check_amp, check_channels_last,
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
    ctx = Context(device, sizes, bool(re.search(r"\bH(100|200)\b", name)), args.timm_benchmark)
    t0 = time.perf_counter()
    results = run_checks(ctx)
    print(table(results))
    failed = [c.name for c in results if c.passed is False]
    manifest = collect_manifest()
    report = {"device": str(device), "device_name": name, "seconds": time.perf_counter() - t0,
              "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "driver": manifest.get("driver_version"), "hopper_ranges_judged": ctx.hopper,
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
