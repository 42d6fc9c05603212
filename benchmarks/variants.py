"""CPU variants on ONE trained model: fp32 eager vs static int8 (and dynamic int8), and torch.compile training.

resnet18 is trained on digits at 32x32 first (SGD lr 0.05, momentum 0.9, wd 5e-4, batch 64), then on
those very weights: test accuracy of fp32 and int8 (accuracy_drop_pts), model size on disk, and
inference latency at batch 1 and 64 over timed repeats after warmup. Variants are timed interleaved
(one repeat of each in turn) so load from other processes on a shared machine hits all of them alike.
The same int8 weights are then timed at larger inputs (128, 224 px) to show how the int8 speed-up
depends on the work per convolution. Training: eager vs ``torch.compile`` from the same weights on
the same batches, interleaved; compile_s is the first compiled steps' time beyond a steady step, never
inside a step time. Targets (issue): static int8 >= 1.5x faster at batch 64, <= 1 point accuracy lost.

    .venv/bin/python benchmarks/variants.py [--epochs 8] [--repeats 30] [--sizes 128 224] [--json out.json]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time

import kit
import torch
from torch import nn
from torch.utils.data import DataLoader

from benchlib.data.datasets import load_dataset
from benchlib.engine.knobs import compile_model, compile_seconds, unsupported_reason
from benchlib.env.devices import cpu_model_name
from benchlib.env.threads import apply_threads
from benchlib.instruments.samples import Samples
from benchlib.nets.models import build_model
from benchlib.nets.quantize import (
    count_quantized_modules,
    model_size_on_disk_bytes,
    quantize_dynamic_linear,
    quantize_static_int8,
    unserved_copy,
)
from benchlib.spec.variants import PRESETS


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", file=sys.stderr, flush=True)


def stats_ms(s: Samples) -> dict[str, float]:
    return {"median_ms": s.median * 1e3, "p90_ms": s.percentile(90) * 1e3, "p99_ms": s.percentile(99) * 1e3,
            "iqr_ms": s.iqr * 1e3, "n": s.n, "noisy": s.noisy}


def train(model: nn.Module, loader: DataLoader, epochs: int) -> list[float]:
    """Plain SGD training; returns per-step seconds (for the record, not a figure of this benchmark)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    model.train()
    steps = []
    for epoch in range(epochs):
        for x, y in loader:
            t0 = time.perf_counter()
            kit.bare_step(model, opt, nn.functional.cross_entropy, x, y)
            steps.append(time.perf_counter() - t0)
        log(f"epoch {epoch + 1}/{epochs}: median step {sorted(steps)[len(steps) // 2] * 1e3:.0f} ms")
    return steps


@torch.inference_mode()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
    pred = torch.cat([model(chunk).argmax(1) for chunk in x.split(64)])
    return float((pred == y).float().mean()), pred


@torch.inference_mode()
def interleaved_latency(
    models: dict[str, nn.Module], batch: torch.Tensor, warmup: int, repeats: int
) -> dict[str, Samples]:
    """Seconds per forward of ``batch`` for each model, one repeat of each in turn."""
    for m in models.values():
        for _ in range(warmup):
            m(batch)
    times: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(repeats):
        for k, m in models.items():
            t0 = time.perf_counter()
            m(batch)
            times[k].append(time.perf_counter() - t0)
    return {k: Samples.of(v) for k, v in times.items()}


def latency_block(models: dict[str, nn.Module], batch: torch.Tensor, warmup: int, repeats: int) -> dict:
    samples = interleaved_latency(models, batch, warmup, repeats)
    out = {k: stats_ms(s) for k, s in samples.items()}
    base = samples["fp32"].median
    for k, s in samples.items():
        out[k]["speedup_vs_fp32"] = base / s.median
        out[k]["per_sample_ms"] = s.median * 1e3 / batch.shape[0]
    return out


def compile_vs_eager_training(weights: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]],
                              warmup: int, steps: int, *, cold_cache: bool) -> dict:
    """Eager and compiled copies of the same weights, stepped alternately on the same batches.

    ``cold_cache`` disables inductor's on-disk caches so compile_s is what a first run pays; with
    a warm cache (a second run on the same machine) it is mostly the cache lookup.
    """
    reason = unsupported_reason(PRESETS["cpu-compiled"].knobs, "cpu", training=True)
    if reason:
        return {"skipped": reason}
    torch.compiler.config.force_disable_caches = cold_cache
    eager = copy.deepcopy(weights).train()
    compiled_src = copy.deepcopy(weights).train()
    compiled, wrap_s = compile_model(compiled_src, PRESETS["cpu-compiled"].knobs)
    runs: dict[str, tuple[nn.Module, torch.optim.Optimizer]] = {
        "eager": (eager, torch.optim.SGD(eager.parameters(), lr=0.01, momentum=0.9)),
        "compiled": (compiled, torch.optim.SGD(compiled_src.parameters(), lr=0.01, momentum=0.9)),
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(warmup + steps):
        x, y = batches[i % len(batches)]
        for k, (m, opt) in runs.items():
            t0 = time.perf_counter()
            kit.bare_step(m, opt, nn.functional.cross_entropy, x, y)
            times[k].append(time.perf_counter() - t0)
        if i < warmup:
            log(f"train warmup step {i + 1}: eager {times['eager'][-1]:.2f} s, compiled {times['compiled'][-1]:.2f} s")
    out: dict = {"warmup_steps": warmup, "wrap_s": wrap_s, "cold_cache": cold_cache}
    for k, t in times.items():
        timed = Samples.of(t[warmup:])
        out[k] = {**stats_ms(timed), "first_step_s": t[0]}
    steady = Samples.of(times["compiled"][warmup:]).median
    out["compile_s"] = compile_seconds(times["compiled"][:warmup], steady)
    out["speedup_compiled_vs_eager"] = out["eager"]["median_ms"] / out["compiled"]["median_ms"]
    return out


def upscaled(batches: list[torch.Tensor], px: int) -> list[torch.Tensor]:
    return [nn.functional.interpolate(b, size=(px, px), mode="bilinear", align_corners=False) for b in batches]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--calibration-batches", type=int, default=8)
    p.add_argument("--sizes", type=int, nargs="*", default=[128, 224], help="larger input sizes to time (px)")
    p.add_argument("--large-batch", type=int, default=16, help="batch size at the larger input sizes")
    p.add_argument("--train-steps", type=int, default=20, help="timed steps of the compile vs eager comparison")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: the usable CPUs)")
    p.add_argument("--warm-compile-cache", action="store_true", help="let inductor reuse its on-disk caches")
    p.add_argument("--json", default=None, help="also write the result here")
    args = p.parse_args(argv)

    intra, inter = apply_threads(args.threads)
    torch.manual_seed(0)
    result: dict = {"cpu": cpu_model_name(), "threads": intra, "interop_threads": inter, "torch": torch.__version__,
                    "quantized_engine": torch.backends.quantized.engine, "load_avg_start": os.getloadavg()}
    data = load_dataset("digits", None, 32)
    loader = DataLoader(data.train, batch_size=args.batch_size, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(0))
    x_test = torch.stack([data.test[i][0] for i in range(len(data.test))])
    y_test = torch.as_tensor([data.test[i][1] for i in range(len(data.test))])

    model = build_model("resnet18", data.num_classes)
    log(f"training resnet18 on digits 32x32: {args.epochs} epochs of {len(loader)} steps, batch {args.batch_size}")
    t0 = time.perf_counter()
    train_steps = train(model, loader, args.epochs)
    model.eval()
    result["training"] = {"epochs": args.epochs, "steps": len(train_steps), "wall_s": time.perf_counter() - t0}

    calib_loader = DataLoader(data.train, batch_size=args.batch_size, shuffle=True,
                              generator=torch.Generator().manual_seed(1))
    calibration = [x for x, _ in list(calib_loader)[:args.calibration_batches]]
    t0 = time.perf_counter()
    int8 = quantize_static_int8(model, calibration, calibration[0])
    quantize_s = time.perf_counter() - t0
    dynamic = quantize_dynamic_linear(model)
    log(f"quantized in {quantize_s:.1f} s: {count_quantized_modules(int8)}")

    acc_fp32, pred_fp32 = accuracy(model, x_test, y_test)
    acc_int8, pred_int8 = accuracy(int8, x_test, y_test)
    acc_dyn, _ = accuracy(dynamic, x_test, y_test)
    result["accuracy"] = {
        "test_samples": len(y_test),
        "fp32": acc_fp32,
        "static_int8": acc_int8,
        "dynamic_int8": acc_dyn,
        "accuracy_drop_pts": (acc_fp32 - acc_int8) * 100,
        "argmax_agreement": float((pred_fp32 == pred_int8).float().mean()),
    }
    log(f"test accuracy fp32 {acc_fp32:.4f}, static int8 {acc_int8:.4f}, dynamic {acc_dyn:.4f}")
    result["quantization"] = {
        "flow": "torch.ao FX graph mode, qconfig mapping x86",
        "quantize_s": quantize_s,
        "calibration_images": sum(len(c) for c in calibration),
        "modules_fp32": count_quantized_modules(model),
        "modules_int8": count_quantized_modules(int8),
    }
    result["size_on_disk_bytes"] = {
        "fp32": model_size_on_disk_bytes(model),
        "static_int8": model_size_on_disk_bytes(int8),
        "dynamic_int8": model_size_on_disk_bytes(dynamic),
    }
    result["size_on_disk_bytes"]["int8_over_fp32"] = (
        result["size_on_disk_bytes"]["static_int8"] / result["size_on_disk_bytes"]["fp32"]
    )

    models = {"fp32": model, "static_int8": int8, "dynamic_int8": dynamic}
    latency: dict = {}
    for bs in (1, args.batch_size):
        batch = x_test[:bs].contiguous()
        # each quantized model timed on a copy first called at this batch, as benchlib times it (the accuracy
        # passes above ran it at 64: its oneDNN kernels would keep that shape's fast path)
        served = {k: m if k == "fp32" else unserved_copy(m) for k, m in models.items()}
        latency[f"32px_bs{bs}"] = latency_block(served, batch, args.warmup, args.repeats)
        log(
            f"latency 32px batch {bs}: "
            + ", ".join(f"{k} {v['median_ms']:.2f} ms" for k, v in latency[f"32px_bs{bs}"].items())
        )
    for px in args.sizes:
        # Same trained weights (resnet18 pools adaptively); int8 recalibrated on the upscaled images.
        big_calib = upscaled(calibration[:2], px)
        int8_big = quantize_static_int8(model, big_calib, big_calib[0][:1])
        batch = upscaled([x_test[:args.large_batch]], px)[0]
        block = latency_block({"fp32": model, "static_int8": int8_big}, batch, 3, max(5, args.repeats // 3))
        latency[f"{px}px_bs{args.large_batch}"] = block
        log(
            f"latency {px}px batch {args.large_batch}: "
            + ", ".join(f"{k} {v['median_ms']:.1f} ms" for k, v in block.items())
        )
    result["latency"] = latency

    log("compile vs eager training (same weights, same batches, interleaved)")
    train_batches = list(loader)[:8]
    result["train_compile"] = compile_vs_eager_training(model, train_batches, 3, args.train_steps,
                                                         cold_cache=not args.warm_compile_cache)
    log(f"train step eager {result['train_compile'].get('eager', {}).get('median_ms', float('nan')):.0f} ms, "
        f"compiled {result['train_compile'].get('compiled', {}).get('median_ms', float('nan')):.0f} ms, "
        f"compile_s {result['train_compile'].get('compile_s', float('nan')):.1f}")

    bs_key = f"32px_bs{args.batch_size}"
    result["targets"] = {
        "int8_speedup_bs64": latency[bs_key]["static_int8"]["speedup_vs_fp32"],
        "int8_speedup_bs64_met": latency[bs_key]["static_int8"]["speedup_vs_fp32"] >= 1.5,
        "accuracy_drop_pts": result["accuracy"]["accuracy_drop_pts"],
        "accuracy_drop_met": result["accuracy"]["accuracy_drop_pts"] <= 1.0,
    }
    result["load_avg_end"] = os.getloadavg()
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return result


if __name__ == "__main__":
    main()
