"""Roofline ceilings measured on the machine that ran the study: a large matmul and a convolution per dtype
(3x3 on a CPU, 1x1 on CUDA, where a Winograd 3x3 would inflate it), a large device copy.

The compute roof of a dtype is the faster of the two products: oneDNN's direct convolutions can run well
above a matrix product of the same dtype (486 against 215 GFLOP/s on one day's 2-core VM of this project,
within 5% on another's), and a CNN's convolutions would then sit above a matmul roof. Both figures are
kept beside the roof.

A roofline point is only as good as its roof. :func:`measure_ceilings` measures the roof here and now, so
points are compared with what this machine, driver and torch build actually reach, not with a marketing
number (:mod:`.datasheet` figures are drawn beside it, labelled). A roof is a maximum: one measured while
something else loaded the machine is too low, so :func:`measure_ceilings_robust` watches the machine while
it measures (:func:`measure_watched`), re-measures a noisy or interfered figure and keeps the highest
median (:func:`best_of`); the cache measures an interfered roof again, and a study measures once more at
its end, keeping the higher.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

import torch

from ..env.devices import bf16_supported, device_name, resolve_hardware, synchronize
from ..env.gpu import copy_bytes_for, gpu_facts, matmul_size_for, tf32_in_effect
from ..env.manifest import driver_version
from ..env.tf32 import tf32
from ..env.threads import usable_cpu_ids
from ..instruments import interference
from ..instruments.interference import DEFAULT_THRESHOLD_PCT
from ..instruments.samples import NOISY_IQR_OVER_MEDIAN, Samples
from ..instruments.telemetry import TelemetrySampler
from .measured import Ceilings, best_of

MIB = 2**20
GIB = 2**30

# A timed repeat shorter than this is dominated by clock resolution and launch/synchronize overhead,
# so short operations are looped inside one repeat (synchronized only at the repeat's two ends).
MIN_REPEAT_S = 0.05
MAX_OPS_PER_REPEAT = 10_000

DEFAULT_MATMUL_SIZE = {"cpu": 2048, "cuda": 8192, "mps": 8192}
DEFAULT_COPY_BYTES = {"cpu": 512 * MIB, "cuda": 2 * GIB, "mps": 1 * GIB}
# (batch, channels in = out, side) of the roof's convolution: wide enough to keep every core's vector units
# and a GPU's SMs busy, as a ResNet's middle stages are.
DEFAULT_CONV_SHAPE = {"cpu": (16, 256, 14), "cuda": (64, 1024, 28), "mps": (32, 256, 56)}
# Its kernel size. cuDNN may run a 3x3 stride-1 convolution as Winograd, which multiplies up to 2.25x less
# than the nominal count: counted at nominal FLOPs it would lift the roof above what any layer can reach. A
# 1x1 convolution has no such shortcut (it is implicit GEMM), so CUDA's conv roof is a 1x1's; oneDNN runs
# direct convolutions on a CPU, where the 3x3 is the faster and honest one.
CONV_KERNEL = {"cpu": 3, "cuda": 1, "mps": 3}
# The roof of each kind of operation a layer is judged by (spec.vocab.OP_KINDS), per device: the
# (batch, channels, side) of a 3x3, a 1x1 and a depthwise 3x3 convolution; the bytes of each tensor of an
# elementwise add on DRAM-sized tensors; and the sizes tried for cache-sized ones (the highest is the
# cache's roof: a layer whose tensors fit in the last-level cache meets it, none can beat it).
KIND_SHAPES: dict[str, dict[str, Any]] = {
    "cpu": {"conv3x3": (16, 256, 14), "conv1x1": (16, 512, 14), "depthwise": ((4, 128, 28), (16, 128, 28))},
    "cuda": {"conv3x3": (32, 512, 28), "conv1x1": (64, 1024, 28), "depthwise": ((32, 256, 56), (128, 512, 56))},
    "mps": {"conv3x3": (32, 256, 56), "conv1x1": (32, 512, 28), "depthwise": ((8, 128, 56), (32, 256, 56))}}
DRAM_TENSOR_BYTES = {"cpu": 128 * MIB, "cuda": 512 * MIB, "mps": 256 * MIB}
CACHE_TENSOR_BYTES = {"cpu": (256 * 2**10, 1 * MIB, 4 * MIB), "cuda": (1 * MIB, 4 * MIB, 8 * MIB),
                      "mps": (1 * MIB, 4 * MIB)}
# How ceilings are measured, as a version: raise it when the method changes, and every machine cache's roof is
# measured again (a matmul alone was version 1; the 3x3 convolution beside it made version 2; the roofs per
# kind of operation, version 3).
METHOD_VERSION = "ceilings-3"
DEFAULT_DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "tf32", "fp16", "bf16"), "mps": ("fp32", "fp16")}

_TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _resolve_device(device: str | torch.device) -> torch.device:
    """A present device with an explicit index for CUDA, so results say which GPU ("cuda:0")."""
    dev = torch.device(resolve_hardware(str(device)))
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


@contextlib.contextmanager
def _cudnn(tf32_on: bool) -> Iterator[None]:
    """cuDNN's TF32 for the block (on by default in torch: an fp32 convolution would run as tf32) and its
    autotuner on (a roof is the fastest algorithm); the caller's settings restored."""
    cudnn = torch.backends.cudnn
    before = cudnn.benchmark
    cudnn.benchmark = True
    try:
        with tf32(tf32_on, ("cudnn",)):
            yield
    finally:
        cudnn.benchmark = before


def _precision_context(dtype_name: str, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """fp32 is measured with TF32 off and tf32 with it on, so the two figures differ by their meaning."""
    if device.type == "cuda":
        return _cuda_precision(dtype_name == "tf32")
    return contextlib.nullcontext()


@contextlib.contextmanager
def _cuda_precision(tf32_on: bool) -> Iterator[None]:
    with tf32(tf32_on, ("matmul",)), _cudnn(tf32_on):
        yield


def _dtype_unsupported_reason(dtype_name: str, device: torch.device) -> str | None:
    """Why a dtype cannot be measured here (None when it can): checked by trying a small product."""
    if dtype_name not in _TORCH_DTYPES:
        return f"unknown dtype '{dtype_name}' (known: {', '.join(_TORCH_DTYPES)})"
    if dtype_name == "tf32" and device.type != "cuda":
        return "tf32 is a CUDA tensor-core mode"
    if dtype_name == "tf32" and not tf32_in_effect(device):
        return f"tf32 needs compute capability 8.0+ on {device} (it would silently measure fp32)"
    if dtype_name == "bf16" and not bf16_supported(device):
        return f"no native bf16 on this {device.type} (it would measure slow emulation, a roof no variant runs under)"
    try:
        a = torch.ones(64, 64, dtype=_TORCH_DTYPES[dtype_name], device=device)
        (a @ a).sum().item()
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        return f"a {dtype_name} matmul does not run on {device}: {exc}"
    return None


def _time_per_op_s(
    op: Callable[[], object], device: torch.device, repeats: int, warmup: int
) -> tuple[list[float], int]:
    """Seconds per ``op`` in each timed repeat, and how many ops each repeat ran.

    Warm up first (allocation, library handles, autotuning), then size the repeat from one timed op so a
    repeat lasts at least MIN_REPEAT_S. Each repeat is synchronized at both ends only.
    """
    for _ in range(warmup):
        op()
    synchronize(device)
    t0 = time.perf_counter()
    op()
    synchronize(device)
    one_op_s = time.perf_counter() - t0
    ops_per_repeat = min(MAX_OPS_PER_REPEAT, max(1, math.ceil(MIN_REPEAT_S / max(one_op_s, 1e-9))))
    per_op_s: list[float] = []
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(ops_per_repeat):
            op()
        synchronize(device)
        per_op_s.append((time.perf_counter() - t0) / ops_per_repeat)
    return per_op_s, ops_per_repeat


def matmul_flops(n: int) -> int:
    """FLOPs of one n x n by n x n product: n^3 multiply-accumulates, 2 FLOPs each."""
    return 2 * n**3


def _measure_matmul(
    dtype_name: str, n: int, device: torch.device, repeats: int, warmup: int
) -> tuple[list[float], int]:
    """Seconds per product ``C = A @ B`` (square, size n) in ``dtype_name``; C is preallocated."""
    dtype = _TORCH_DTYPES[dtype_name]
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    with _precision_context(dtype_name, device):
        return _time_per_op_s(lambda: torch.matmul(a, b, out=c), device, repeats, warmup)


def conv_flops(batch: int, channels: int, side: int, kernel: int = 3) -> int:
    """FLOPs of one ``kernel`` x ``kernel`` convolution, ``channels`` in and out, same padding, stride 1."""
    return 2 * batch * channels * channels * kernel * kernel * side * side


def _measure_conv(dtype_name: str, shape: Sequence[int], device: torch.device, repeats: int,
                  warmup: int, kernel: int = 3, depthwise: bool = False) -> tuple[list[float], int]:
    """Seconds per ``kernel`` x ``kernel`` convolution of ``shape`` (batch, channels, side) in ``dtype_name``,
    same padding, channels-last (the layout oneDNN and cuDNN run fastest; a roof is the fastest); one filter
    per channel where ``depthwise``."""
    batch, channels, side = shape
    dtype = _TORCH_DTYPES[dtype_name]
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(batch, channels, side, side, generator=gen).to(device=device, dtype=dtype)
    w = torch.randn(channels, 1 if depthwise else channels, kernel, kernel, generator=gen).to(device=device,
                                                                                             dtype=dtype)
    x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
    groups = channels if depthwise else 1
    with torch.no_grad(), _precision_context(dtype_name, device):
        return _time_per_op_s(lambda: torch.nn.functional.conv2d(x, w, padding=kernel // 2, groups=groups), device,
                              repeats, warmup)


def depthwise_flops(batch: int, channels: int, side: int, kernel: int = 3) -> int:
    """FLOPs of one depthwise ``kernel`` x ``kernel`` convolution: one filter per channel, same padding."""
    return 2 * batch * channels * kernel * kernel * side * side


def _measure_add(dtype_name: str, tensor_bytes: int, device: torch.device, repeats: int,
                 warmup: int) -> tuple[list[float], int]:
    """Seconds per ``torch.add(a, b, out=c)`` of three tensors of ``tensor_bytes`` each (2 read, 1 written)."""
    dtype = _TORCH_DTYPES[dtype_name]
    n = max(1, tensor_bytes // torch.empty((), dtype=dtype).element_size())
    a, b, c = (torch.full((n,), 1.0 + i, dtype=dtype, device=device) for i in range(3))
    return _time_per_op_s(lambda: torch.add(a, b, out=c), device, repeats, warmup)


@dataclasses.dataclass(frozen=True)
class KindRoofs:
    """The roofs of each kind of operation, measured together (``measure_kind_roofs``)."""

    flops_per_s: dict[str, dict[str, float]]  # kind -> dtype -> FLOP/s (conv3x3, conv1x1, depthwise, matmul)
    bandwidth_bytes_per_s: dict[str, dict[str, float]]  # dram / cache -> dtype -> bytes/s
    samples: dict[str, list[float]]  # the raw seconds per op behind each figure
    method: str  # how they were measured, in words


def measure_kind_roofs(dtypes: Sequence[str], device: torch.device, repeats: int, warmup: int,
                       matmul_flops_per_s: dict[str, float], conv_shape: Sequence[int] | None = None,
                       tensor_bytes: int | None = None) -> KindRoofs:
    """Per kind of operation and dtype, the FLOP/s of its roof (``conv3x3``, ``conv1x1``, ``depthwise``; the
    ``matmul``'s is measured by the caller) and the bytes/s of elementwise work on DRAM-sized and cache-sized
    tensors (``dram``, ``cache``: the highest of ``CACHE_TENSOR_BYTES``), with the raw samples behind each and
    how they were measured, in words. ``conv_shape`` and ``tensor_bytes`` replace every convolution's shape and
    the DRAM add's tensor size (a quick look, or a test: the cache's is then the smaller of it and 256 KiB)."""
    shapes = dict(KIND_SHAPES[device.type])
    if conv_shape is not None:
        shapes.update(conv3x3=tuple(conv_shape), conv1x1=tuple(conv_shape), depthwise=(tuple(conv_shape),))
    dram = tensor_bytes or DRAM_TENSOR_BYTES[device.type]
    cache = (min(tensor_bytes, 256 * 2**10),) if tensor_bytes else CACHE_TENSOR_BYTES[device.type]
    flops: dict[str, dict[str, float]] = {"matmul": dict(matmul_flops_per_s)}
    bandwidth: dict[str, dict[str, float]] = {"dram": {}, "cache": {}}
    samples: dict[str, list[float]] = {}
    for name in dtypes:
        for kind, kernel in (("conv3x3", 3), ("conv1x1", 1)):
            b, c, side = shapes[kind]
            per_s, _ = _measure_conv(name, (b, c, side), device, repeats, warmup, kernel)
            samples[f"{kind}_{name}_s"] = per_s
            flops.setdefault(kind, {})[name] = conv_flops(b, c, side, kernel) / Samples.of(per_s).median
        for b, c, side in shapes["depthwise"]:
            per_s, _ = _measure_conv(name, (b, c, side), device, repeats, warmup, 3, depthwise=True)
            samples[f"depthwise_{name}_{b}x{c}x{side}_s"] = per_s
            figure = depthwise_flops(b, c, side) / Samples.of(per_s).median
            flops.setdefault("depthwise", {})[name] = max(figure, flops.get("depthwise", {}).get(name, 0.0))
        storage = "fp32" if name == "tf32" else name  # tf32 is a product's mode: its tensors are fp32
        for kind, sizes in (("dram", (dram,)), ("cache", cache)):
            for size in sizes:
                per_s, _ = _measure_add(storage, size, device, repeats, warmup)
                samples[f"add_{name}_{size}_s"] = per_s
                figure = 3 * size / Samples.of(per_s).median
                bandwidth[kind][name] = max(figure, bandwidth[kind].get(name, 0.0))
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return KindRoofs(flops, bandwidth, samples, _kinds_method(shapes, dram, cache))


def _measure_copy(n_bytes: int, device: torch.device, repeats: int, warmup: int) -> tuple[list[float], int]:
    """Seconds per ``dst.copy_(src)`` of ``n_bytes``; both buffers are written first so no page is lazy."""
    src = torch.ones(n_bytes, dtype=torch.uint8, device=device)
    dst = torch.zeros(n_bytes, dtype=torch.uint8, device=device)
    return _time_per_op_s(lambda: dst.copy_(src), device, repeats, warmup)


def _iqr_over_median(values: Sequence[float]) -> float:
    s = Samples.of(values)
    return s.iqr / s.median if s.median > 0 else math.nan




def measure_ceilings(device: str | torch.device = "cpu", *, dtypes: Sequence[str] | None = None,
                     matmul_size: int | None = None, copy_bytes: int | None = None,
                     conv_shape: Sequence[int] | None = None, repeats: int = 5, warmup: int = 2) -> Ceilings:
    """Measure this machine's compute ceiling per dtype and its memory bandwidth.

    Compute: the higher median FLOP/s of a square matmul and of a 3x3 convolution, per dtype. Bandwidth:
    median (read + written) bytes/s of a large device copy. Default dtypes that do not run here are left out
    and listed in ``skipped_dtypes``; dtypes asked for explicitly must run (ValueError otherwise).
    """
    dev = _resolve_device(device)
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    n = int(matmul_size or DEFAULT_MATMUL_SIZE[dev.type])
    n_bytes = int(copy_bytes or DEFAULT_COPY_BYTES[dev.type])
    if n < 1 or n_bytes < 1:
        raise ValueError(f"matmul_size and copy_bytes must be positive, got {n} and {n_bytes}")
    if dev.type == "cuda":  # a T4 under load, a MIG slice or a 4 GiB laptop GPU holds less than the defaults
        gpu = gpu_facts(dev.index or 0)
        n_bytes = n_bytes if copy_bytes else copy_bytes_for(gpu, n_bytes)
        n = n if matmul_size else matmul_size_for(gpu, n, element_bytes=4)

    chosen, skipped = _chosen_dtypes(dtypes, dev)
    shape, kernel = list(conv_shape or DEFAULT_CONV_SHAPE[dev.type]), CONV_KERNEL[dev.type]
    if dev.type == "cuda" and not conv_shape:  # its input and output within the copy's share of free memory
        while shape[0] > 1 and 2 * shape[0] * shape[1] * shape[2] ** 2 * 4 > n_bytes:
            shape[0] //= 2
    samples: dict[str, list[float]] = {}
    matmul_peaks: dict[str, float] = {}
    conv_peaks: dict[str, float] = {}
    products_per_repeat: dict[str, int] = {}
    for name in chosen:
        per_product_s, products_per_repeat[name] = _measure_matmul(name, n, dev, repeats, warmup)
        samples[f"matmul_{name}_s"] = per_product_s
        matmul_peaks[name] = matmul_flops(n) / Samples.of(per_product_s).median
        per_conv_s, _ = _measure_conv(name, shape, dev, repeats, warmup, kernel)
        samples[f"conv_{name}_s"] = per_conv_s
        conv_peaks[name] = conv_flops(shape[0], shape[1], shape[2], kernel) / Samples.of(per_conv_s).median
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    kinds = measure_kind_roofs(chosen, dev, repeats, warmup, matmul_peaks, conv_shape,
                               copy_bytes // 4 if copy_bytes else None)
    kind_flops, kind_bandwidth = kinds.flops_per_s, kinds.bandwidth_bytes_per_s
    samples.update(kinds.samples)
    # the whole model's roof keeps the highest product, but on CUDA not a 3x3's: Winograd would inflate it
    whole_kinds = [k for k in kind_flops if not (dev.type == "cuda" and k == "conv3x3")]
    peak_flops_per_s = {name: max(matmul_peaks[name], conv_peaks[name],
                                  *(kind_flops[k].get(name, 0.0) for k in whole_kinds)) for name in chosen}

    per_copy_s, copies_per_repeat = _measure_copy(n_bytes, dev, repeats, warmup)
    samples["copy_s"] = per_copy_s
    bandwidth_bytes_per_s = max(2 * n_bytes / Samples.of(per_copy_s).median, *kind_bandwidth["dram"].values())
    if dev.type == "cuda":
        torch.cuda.empty_cache()

    iqr = {key: _iqr_over_median(values) for key, values in samples.items()}
    return Ceilings(
        device=str(dev), device_name=device_name(dev), peak_flops_per_s=peak_flops_per_s,
        bandwidth_bytes_per_s=bandwidth_bytes_per_s, samples=samples, iqr_over_median=iqr,
        noisy=sorted(k for k, v in iqr.items() if v > NOISY_IQR_OVER_MEDIAN), skipped_dtypes=skipped,
        matmul_size=n, matmul_products_per_repeat=products_per_repeat, copy_bytes=n_bytes,
        copies_per_repeat=copies_per_repeat, repeats=repeats, warmup=warmup, threads=torch.get_num_threads(),
        matmul_flops_per_s=matmul_peaks, conv_flops_per_s=conv_peaks, conv_shape=shape, conv_kernel=kernel,
        kind_flops_per_s=kind_flops, kind_bandwidth_bytes_per_s=kind_bandwidth,
        torch=torch.__version__, driver=driver_version()[0] if dev.type == "cuda" else None,
        measured_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        method=_method(n, shape, kernel, n_bytes, repeats, warmup, kinds.method),
    )


def _chosen_dtypes(dtypes: Sequence[str] | None, dev: torch.device) -> tuple[list[str], dict[str, str]]:
    """The dtypes to measure and, of the defaults, those that do not run here with why; a dtype asked for
    explicitly that does not run is a ValueError."""
    if dtypes is not None:
        chosen = list(dict.fromkeys(dtypes))
        for name in chosen:
            if (reason := _dtype_unsupported_reason(name, dev)) is not None:
                raise ValueError(reason)
        return chosen, {}
    reasons = {name: _dtype_unsupported_reason(name, dev) for name in DEFAULT_DTYPES[dev.type]}
    return [n for n, r in reasons.items() if r is None], {n: r for n, r in reasons.items() if r is not None}


def _method(n: int, shape: Sequence[int], kernel: int, n_bytes: int, repeats: int, warmup: int,
            kinds_method: str) -> str:
    """How the ceilings were measured, in words, with every size used."""
    return (
        f"compute: the higher of two products per dtype. C = A @ B, square n={n}, {matmul_flops(n)} FLOPs "
        f"(2*n^3) per product, C preallocated; a {kernel}x{kernel} convolution, stride 1, same padding, "
        f"channels-last, batch {shape[0]}, {shape[1]} channels in and out, {shape[2]}x{shape[2]} pixels, "
        f"{conv_flops(shape[0], shape[1], shape[2], kernel)} FLOPs; "
        f"{warmup} warmup products, then {repeats} timed repeats, each synchronized at both ends and looping "
        f"enough products to last >= {MIN_REPEAT_S} s; a sample is one repeat's seconds / its products; "
        "peak = FLOPs / median sample. CUDA fp32 with TF32 off, tf32 with TF32 on (setting restored). "
        f"bandwidth: dst.copy_(src) of {n_bytes} bytes, moved = read + written = {2 * n_bytes} bytes per copy, "
        "timed the same way; bandwidth = bytes moved / median sample, or the DRAM add's where higher. "
        f"Per kind of operation (each layer is judged by its own): {kinds_method}"
    )


def _kinds_method(shapes: dict[str, Any], dram_bytes: int, cache_bytes: Sequence[int]) -> str:
    depthwise = " and ".join("x".join(map(str, s)) for s in shapes["depthwise"])
    cache = ", ".join(f"{b / 2**10:g} KiB" for b in cache_bytes)
    return (f"conv3x3 and conv1x1: batch x channels x side {'x'.join(map(str, shapes['conv3x3']))} and "
            f"{'x'.join(map(str, shapes['conv1x1']))}, channels in = out; depthwise 3x3: {depthwise}, the higher; "
            f"matmul: the product above; dram: torch.add(a, b, out=c) of three {dram_bytes / MIB:g} MiB tensors, "
            f"3 tensors' bytes moved per add; cache: the same at {cache} per tensor, the highest. Each timed as "
            "the products are.")


def measure_watched(device: str | torch.device, threshold_pct: float = DEFAULT_THRESHOLD_PCT,
                    **kwargs: Any) -> Ceilings:
    """``measure_ceilings`` with the CPU telemetry running, so the ceilings say whether other work interfered."""
    sampler = TelemetrySampler(gpus=False)
    sampler.start()
    sampler.set_phase("ceilings")
    try:
        measured = measure_ceilings(device, **kwargs)
    finally:
        telemetry = sampler.stop()
    seen = interference.measure(telemetry.frame, usable_cpu_ids(), threshold_pct=threshold_pct, phases=("ceilings",))
    return dataclasses.replace(measured, interference_cpu_pct=seen.cpu_pct, steal_pct=seen.steal_pct,
                               interfered=seen.interfered, interference=seen.describe())


def measure_ceilings_robust(device: str | torch.device, max_attempts: int = 3,
                            threshold_pct: float = DEFAULT_THRESHOLD_PCT, **kwargs: Any) -> Ceilings:
    """Measure, and re-measure while a figure is noisy (IQR/median > 10%) or other work interfered, up to
    ``max_attempts``; keep the best of each figure."""
    attempts = [measure_watched(device, threshold_pct, **kwargs)]
    while (attempts[-1].noisy or attempts[-1].interfered) and len(attempts) < max_attempts:
        attempts.append(measure_watched(device, threshold_pct, **kwargs))
    return best_of(attempts)
