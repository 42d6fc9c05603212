"""One lent GPU session, prepared: five questions, each answered as findings written as it goes.

GPU time is rare and short (a cold machine, minutes in all), so this one script asks what the next session
must answer and fits in about 7 minutes on an H100 or H200. Each finding is one JSON line in
``OUT/findings.jsonl``, flushed as it is written, so a session cut off keeps what it found. A background
thread reads NVML every 0.5 s (SM clock, power, clock-event ("throttle") reasons, temperature) into
``OUT/watch.jsonl``, each line tagged with the section that was running. Each section has its own time
budget and is skipped, with the reason, when the session's ``--budget-s`` has less left than it needs; a
section that raises is logged as a finding and the next one runs.

Sections (``--only`` takes their names):

- ``fused_sgd``: torch's fused SGD under a GradScaler whose first step overflows, on the device's kernels:
  the momentum buffers after the skipped step of plain ``torch.optim.SGD(fused=True)`` and of benchlib's
  ``make_optimizer`` (zeroed first), the weights after 3 steps of each against for-loop SGD bit for bit
  (a for-loop run twice is the control), and host syncs per fp16 step with fused against foreach SGD.
- ``timm_gap``: benchlib's ``train_step`` against a bare timm-style loop on the same model in one process,
  interleaved blocks, over the factors scaler on/off (fp16), fused (zeroed) or foreach SGD, bf16 or fp16,
  timm's ``zero_init_last`` and the input converted to channels_last before or inside the step: median
  ms/step per cell, each factor's effect, and each side's idle gaps between kernels in a short profile.
- ``conv_kernels``: resnet18's 3x3 convolution shapes (forward) and the roof's convolution
  (``roofline/ceilings.py``), cudnn.benchmark off and on, strict fp32 and tf32: kernel names and FLOP/s.
- ``cli_gpu_amp``: the ``gpu-amp`` row through ``python -m benchlib run`` (on a CPU: its one-line refusal).
- ``small_memory``: a ballast process holding all but 15 GiB of the GPU, then the preflight's refusal of a
  batch that does not fit, a run at the batch it names, and ``gpu_acceptance.py`` sizing itself down; the
  ballast is killed whatever happens (its process group, and it exits when this process's pipe closes).
- ``predict`` (first): the CPU study carried in ``results/predict-source`` predicted on this GPU from its
  ceilings and shapes (``benchlib predict``, written to ``predicted.json`` before anything is measured), then
  each model measured here the same way (``benchlib layers``), each against its 90% interval.
- ``bf16_profile`` (last): one resnet50 step under fp16 and under bf16, profiled, kernel by kernel: the kernels
  that make bf16 slower, with their share of the difference.

Every finding with a rule (``RULES``, written before the run) carries it and its verdict; the session ends
with one line per verdict (PASS, FAIL, NOT JUDGED). The one command on a lent GPU, after
``bash benchmarks/gpu_wheels.sh`` here (carry ``.whl`` and ``results/predict-source``):

    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 benchmarks/gpu_session.py --out $OUT

    PYTHONPATH=. python benchmarks/gpu_session.py [--out DIR] [--quick] [--only SECTION,...] [--budget-s 520]

from the repository root (``PYTHONPATH=.`` where benchlib is not installed); ``--out`` defaults to ``$OUT``.
``--allow-cpu`` runs every section on the CPU at tiny sizes (what the tests do): what needs CUDA is a finding
``{"skipped": "needs CUDA: ..."}``, never a figure. Wheels carried in ``.whl/`` (timm or fvcore, where the
machine's Python lacks them) are installed to a temporary folder first, on this process's path and its
children's.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import json
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
from gpu_harness import (
    FAILURE_ENV,
    ROOT,
    Budget,
    FindingsFile,
    Run,
    Section,
    Watch,
    child_env,
    install_carried_wheels,
    kill_group,
    run_command,
    run_sections,
    section_log,
    tail_lines,
    verdict_lines,
)
from gpu_judges import SYNC_WARNING, TF32_KERNEL, WINOGRAD_KERNEL, sync_messages
from torch import nn

from benchlib.engine.knobs import backend_flags
from benchlib.engine.setup import fresh_state
from benchlib.engine.step import Trainer, make_optimizer, train_step
from benchlib.env.devices import cuda_uuids, device_name, synchronize
from benchlib.env.manifest import driver_version
from benchlib.env.tf32 import tf32
from benchlib.instruments.nvml import NvmlDevices, pynvml
from benchlib.instruments.profiler import device_work_kind, event_interval, is_host_event
from benchlib.instruments.samples import Samples
from benchlib.instruments.timing import StepTimer
from benchlib.nets.models import build_model
from benchlib.roofline.ceilings import CONV_KERNEL, DEFAULT_CONV_SHAPE, conv_flops
from benchlib.spec.knobs import Knobs
from benchlib.spec.settings import RunSettings

GIB = 2**30
NEEDS_CUDA = "needs CUDA"
GAP_MIN_US = 5.0  # an idle stretch of the device timeline shorter than this is a launch's own latency


# ---------------------------------------------------------------- sizes

@dataclass(frozen=True)
class Sizes:
    """Work sizes of one session: the issue's on a GPU, smaller with ``--quick``, tiny on a CPU."""

    gap_model: str = "resnet50"  # a timm name; torchvision's ``gap_fallback`` where timm is not importable
    gap_fallback: str = "resnet50"
    gap_batch: int = 128
    gap_px: int = 224
    gap_steps: int = 10  # timed steps per block
    gap_warmup: int = 2
    gap_rounds: int = 3  # at most; fewer where the section's budget ends first
    gap_full: bool = True  # the full factorial, else one factor at a time from benchlib's own cell
    gap_precisions: tuple[str, ...] = ("fp16", "bf16")
    profile_steps: int = 3
    sgd_batch: int = 16
    sgd_px: int = 32
    sync_model: str = "resnet18"
    sync_batch: int = 32
    sync_px: int = 224
    conv_batch: int = 32
    conv_px: int = 224
    conv_repeats: int = 20
    roof_shape: tuple[int, int, int] = DEFAULT_CONV_SHAPE["cuda"]
    cli_model: str = "resnet50"
    cli_batch: int = 128
    cli_px: int = 224
    cli_steps: int = 30
    refused_batch: int = 1024
    headroom_bytes: int = 15 * GIB  # what the ballast leaves free
    ballast_cpu_bytes: int = 16 * 2**20  # the ballast's allocation on a CPU (its plumbing only)


QUICK = replace(Sizes(), gap_batch=32, gap_px=128, gap_steps=6, gap_rounds=1, profile_steps=2, sync_batch=8,
                sync_px=64, conv_batch=8, conv_px=112, conv_repeats=10, roof_shape=(16, 1024, 28), cli_batch=32,
                cli_px=128, cli_steps=10)
# CPU: fp16 autocast training is no benchlib configuration there (and torch's fp16 convolutions crawl), so the
# gap's precision is bf16 alone, one factor at a time; timm's smallest resnet.
CPU = replace(QUICK, gap_model="test_resnet", gap_fallback="resnet18", gap_batch=2, gap_px=32, gap_steps=2,
              gap_warmup=1, gap_full=False, gap_precisions=("bf16",), profile_steps=1, sgd_batch=4, sgd_px=16,
              conv_batch=1, conv_px=32, conv_repeats=2, roof_shape=(1, 32, 8), cli_model="resnet18", cli_batch=4,
              cli_px=32, cli_steps=3)


@dataclass
class Session:
    device: torch.device
    sizes: Sizes
    quick: bool
    out: Path
    log: Callable[..., None]  # log(finding=..., **fields): one line, the section named by the runner
    deadline: float = math.inf  # time.monotonic() at which the running section's budget ends

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def left(self) -> float:
        return self.deadline - time.monotonic()


def _skip(s: Session, finding: str, why: str) -> None:
    s.log(finding=finding, skipped=why)


# ---------------------------------------------------------------- 1. fused SGD under an overflowing first step

class _SmallNet(nn.Sequential):
    """Convolutions, batch norm and a linear head, none with a nondeterministic backward (no pooling)."""

    def __init__(self, px: int) -> None:
        super().__init__(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                         nn.Flatten(), nn.Linear(32 * ((px + 1) // 2) ** 2, 10))


SGD_KINDS = ("torch fused", "torch fused, allocator dirtied", "benchlib fused", "benchlib fused, allocator dirtied",
             "benchlib foreach", "for_loop", "for_loop again")


def buffer_stats(buffers: Sequence[torch.Tensor | None]) -> dict[str, Any]:
    """What momentum buffers hold: how many exist, their elements, how many are nonzero and not finite, and the
    largest finite magnitude."""
    present = [b.detach().float() for b in buffers if b is not None]
    flat = torch.cat([b.flatten() for b in present]) if present else torch.zeros(0)
    finite = flat[torch.isfinite(flat)]
    return {"buffers": len(present), "of_params": len(buffers), "elements": int(flat.numel()),
            "nonzero": int((flat != 0).sum()), "nonfinite": int((~torch.isfinite(flat)).sum()),
            "max_abs_finite": float(finite.abs().max()) if finite.numel() else 0.0}


def _dirty_allocator(like: Sequence[torch.Tensor]) -> None:
    """Leave freed blocks the size of each of ``like`` holding 1e30, where the next ``empty_like`` of them is
    likely to land (the caching allocator hands a freed block of the size asked for back first)."""
    junk = [torch.full_like(t, 1e30) for t in like]
    synchronize(like[0].device)
    del junk


def _sgd(kind: str, net: nn.Module, device: torch.device) -> torch.optim.Optimizer:
    s = RunSettings.of()
    if kind.startswith("torch fused"):
        return torch.optim.SGD(net.parameters(), lr=s.lr, momentum=s.momentum, weight_decay=s.weight_decay,
                               fused=True)
    impl = {"benchlib fused": "fused", "benchlib foreach": "foreach"}.get(kind.split(",")[0], "for_loop")
    return make_optimizer(net, RunSettings.of(optimizer_impl=impl), device)


def _overflow_first(kind: str, net0: nn.Module, x: torch.Tensor, y: torch.Tensor, dtype: torch.dtype,
                    steps: int = 3) -> tuple[dict[str, Any], list[torch.Tensor]]:
    """``steps`` AMP steps of a copy of ``net0`` whose first loss is scaled to inf (the scaler skips that step):
    the buffers after it, and the weights at the end."""
    device = x.device
    net = copy.deepcopy(net0)
    opt = _sgd(kind, net, device)
    scaler = torch.amp.GradScaler(device.type)
    after_skip: dict[str, Any] = {}
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype):
            loss = nn.functional.cross_entropy(net(x), y)
        if i == 0:
            loss = loss * math.inf
        scaler.scale(loss).backward()
        if i == 0 and kind.endswith("allocator dirtied"):
            _dirty_allocator([p.grad for p in net.parameters() if p.grad is not None])
        scaler.step(opt)
        scaler.update()
        if i == 0:
            synchronize(device)
            after_skip = buffer_stats([opt.state.get(p, {}).get("momentum_buffer") for p in net.parameters()])
            after_skip["scale_after"] = float(scaler.get_scale())
    synchronize(device)
    return after_skip, [p.detach().clone() for p in net.parameters()]


WEIGHT_RTOL = 1e-5  # of each tensor's largest weight: a few float32 ulps over 3 steps


def compare_weights(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> dict[str, Any]:
    """Whether ``a`` is finite, its largest difference from ``b`` against the tolerance, and (said, not judged)
    whether they are bit-identical: CUDA's fused SGD updates in double and rounds once, the for-loop kernels
    round at each operation, so on a GPU the two agree to a few ulps, not bit for bit."""
    diffs = [float((x.double() - y.double()).abs().max()) for x, y in zip(a, b)]
    within = all(d <= WEIGHT_RTOL * float(y.double().abs().max()) + 1e-12 for d, y in zip(diffs, b))
    finite = all(bool(torch.isfinite(x).all()) for x in a)
    return {"bit_identical": all(torch.equal(x, y) for x, y in zip(a, b)),
            "max_abs_diff": max(diffs) if diffs else 0.0, "finite": finite, "within_tolerance": finite and within,
            "tolerance": f"|a - b| <= {WEIGHT_RTOL:g} x max|b| per tensor"}


def _sync_warnings(s: Session, impl: str, steps: int = 3) -> list[str]:
    """CUDA's sync debug warnings over ``steps`` fp16 steps of benchlib's trainer with ``impl`` SGD (after two)."""
    z = s.sizes
    settings = RunSettings.of(precision="amp_fp16", optimizer_impl=impl)
    net = build_model(z.sync_model, 1000).to(s.device)
    t = Trainer.of(net, net, settings, s.device)
    x = torch.randn(z.sync_batch, 3, z.sync_px, z.sync_px, device=s.device)
    y = torch.randint(0, 1000, (z.sync_batch,), device=s.device)
    for _ in range(2):
        train_step(t, x, y)
    synchronize(s.device)
    caught = sync_messages(lambda: train_step(t, x, y), steps, torch.cuda.set_sync_debug_mode)
    synchronize(s.device)
    return [m for m in caught if SYNC_WARNING in m.lower()]


def fused_sgd(s: Session) -> None:
    """Section 1: the fused-SGD mechanism on this device's kernels, and host syncs per fp16 step."""
    z, device = s.sizes, s.device
    dtype = torch.float16 if s.cuda else torch.bfloat16
    torch.manual_seed(0)
    net0 = _SmallNet(z.sgd_px).to(device)
    x = torch.randn(z.sgd_batch, 3, z.sgd_px, z.sgd_px, device=device)
    y = torch.randint(0, 10, (z.sgd_batch,), device=device)
    deterministic = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        weights: dict[str, list[torch.Tensor]] = {}
        for kind in SGD_KINDS:
            after_skip, weights[kind] = _overflow_first(kind, net0, x, y, dtype)
            s.log(finding="momentum buffers after the skipped first step", optimizer=kind, dtype=str(dtype),
                  **after_skip)
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = deterministic
    for kind in SGD_KINDS:
        if kind != "for_loop":
            s.log(finding="weights after 3 steps against for_loop", optimizer=kind,
                  control=kind == "for_loop again", **compare_weights(weights[kind], weights["for_loop"]))
    if not s.cuda:
        _skip(s, "host syncs per fp16 step", f"{NEEDS_CUDA}: torch.cuda.set_sync_debug_mode")
        return
    for impl in ("fused", "foreach"):
        syncs = _sync_warnings(s, impl)
        s.log(finding="host syncs per fp16 step", optimizer=impl, model=z.sync_model, batch=z.sync_batch,
              image_px=z.sync_px, steps=3, syncs=len(syncs), per_step=len(syncs) / 3,
              first=syncs[0][:200] if syncs else None)
        fresh_state(device)


# ---------------------------------------------------------------- 2. the timm gap, factor by factor

@dataclass(frozen=True)
class Cell:
    """One combination of the gap's factors."""

    precision: str  # fp16 | bf16 (autocast)
    scaler: bool  # a GradScaler (fp16 only on a GPU)
    optimizer: str  # fused (benchlib's, momentum zeroed first) | foreach
    zero_init_last: bool | None  # timm's init; None: torchvision's model (timm not importable)
    input: str  # channels_last: converted before the steps | nchw: converted inside each step

    def label(self) -> str:
        init = "" if self.zero_init_last is None else f" zero_init_last={self.zero_init_last}"
        return (f"{self.precision}{' +scaler' if self.scaler else ''} {self.optimizer}{init} "
                f"input={'pre-converted' if self.input == 'channels_last' else 'converted in step'}")


SIDES = ("benchlib", "bare")
# what each side runs by itself: benchlib's CLI (fp16 with its scaler, fused SGD, its loader's NCHW batches
# converted in the step) and timm's benchmark.py (fp16 without a scaler, foreach SGD, a channels_last input)
NATIVE = {"benchlib": Cell("fp16", True, "fused", True, "nchw"),
          "bare": Cell("fp16", False, "foreach", True, "channels_last")}
FACTORS: dict[str, tuple[Any, Any]] = {"scaler": (True, False), "optimizer": ("fused", "foreach"),
                                       "precision": ("fp16", "bf16"), "zero_init_last": (True, False),
                                       "input": ("nchw", "channels_last")}


def natives(precisions: Sequence[str], inits: Sequence[bool | None]) -> dict[str, Cell]:
    """Each side's own cell, in the first precision and init measured where fp16 or timm's init is not."""
    return {side: replace(cell, precision=cell.precision if cell.precision in precisions else precisions[0],
                          zero_init_last=cell.zero_init_last if cell.zero_init_last in inits else inits[0])
            for side, cell in NATIVE.items()}


def gap_cells(precisions: Sequence[str], inits: Sequence[bool | None], full: bool) -> list[Cell]:
    """The cells measured: every combination (``full``), else benchlib's own cell with one factor changed at a
    time, and the bare loop's own cell. A scaler goes with fp16 only, except where fp16 is not measured (a
    CPU: the scaler's path still runs)."""
    pairs = [(p, sc) for p in precisions for sc in ((True, False) if p == "fp16" or "fp16" not in precisions
                                                     else (False,))]
    if full:
        return [Cell(p, sc, o, i, x) for (p, sc), o, i, x in
                itertools.product(pairs, FACTORS["optimizer"], inits, FACTORS["input"])]
    own = natives(precisions, inits)
    base = own["benchlib"]
    others = [replace(base, scaler=False), replace(base, optimizer="foreach"), replace(base, input="channels_last"),
              *[replace(base, zero_init_last=i) for i in inits if i != base.zero_init_last],
              *[replace(base, precision=p, scaler=p == "fp16") for p in precisions if p != base.precision],
              own["bare"]]
    return list(dict.fromkeys([base, *others]))


def main_effects(medians: dict[tuple[str, Cell], float]) -> list[dict[str, Any]]:
    """Each factor's effect per side: the geometric mean, over pairs of measured cells that differ in that
    factor alone, of ms/step at its second level over its first; and the bare loop over benchlib per cell.

    >>> a = Cell("fp16", True, "fused", True, "nchw")
    >>> main_effects({("benchlib", a): 10.0, ("benchlib", replace(a, optimizer="foreach")): 11.0})[0]["ratio"]
    1.1
    """
    out = []
    for factor, (first, second) in FACTORS.items():
        for side in SIDES:
            ratios = [medians[(side, replace(c, **{factor: second}))] / ms for (sd, c), ms in medians.items()
                      if sd == side and getattr(c, factor) == first and (side, replace(c, **{factor: second}))
                      in medians]
            if ratios:
                out.append({"factor": factor, "side": side, "ratio": round(_geomean(ratios), 4),
                            "of": f"{second} / {first}", "pairs": len(ratios)})
    sides = [medians[("bare", c)] / ms for (sd, c), ms in medians.items()
             if sd == "benchlib" and ("bare", c) in medians]
    if sides:
        out.append({"factor": "side", "side": "both", "ratio": round(_geomean(sides), 4), "of": "bare / benchlib",
                    "pairs": len(sides)})
    return out


def _geomean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


class Gap(NamedTuple):
    start_us: float
    us: float
    before: str  # the kernel whose end opened the gap
    after: str  # the kernel that closed it


def idle_gaps(kernels: Sequence[tuple[float, float, str]], min_us: float = GAP_MIN_US) -> tuple[list[Gap], float]:
    """Stretches longer than ``min_us`` in which no kernel or copy of ``kernels`` ((start, end, name) in
    microseconds, any stream) runs, between the first start and the last end; and the busy microseconds.

    >>> idle_gaps([(0, 10, "a"), (12, 20, "b"), (5, 15, "c"), (40, 50, "d")])
    ([Gap(start_us=20, us=20, before='b', after='d')], 30)
    """
    gaps: list[Gap] = []
    busy = 0.0
    ordered = sorted(kernels)
    if not ordered:
        return gaps, busy
    run_start, run_end, last = ordered[0][0], ordered[0][1], ordered[0][2]
    for start, end, name in ordered[1:]:
        if start > run_end:
            busy += run_end - run_start
            if start - run_end > min_us:
                gaps.append(Gap(run_end, start - run_end, last, name))
            run_start, run_end, last = start, end, name
        elif end > run_end:
            run_end, last = end, name
    busy += run_end - run_start
    return gaps, busy


def _gap_models(s: Session) -> tuple[dict[bool | None, nn.Module], str | None]:
    """The gap's model per ``zero_init_last`` (timm's), or torchvision's alone and why timm is not used."""
    z = s.sizes
    try:
        import timm
    except ImportError as exc:
        net = build_model(z.gap_fallback, 1000)
        return {None: net.to(s.device, memory_format=torch.channels_last)}, f"timm is not importable: {exc}"
    return {init: timm.create_model(z.gap_model, pretrained=False, num_classes=1000, zero_init_last=init).to(
        s.device, memory_format=torch.channels_last) for init in (True, False)}, None


_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _bare_step(net: nn.Module, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None, x: torch.Tensor,
               dtype: torch.dtype, convert: bool, criterion: nn.Module) -> torch.Tensor:
    """timm benchmark.py's training step: targets drawn on the device each step, the loss and its backward
    inside autocast, no host read."""
    opt.zero_grad(set_to_none=True)
    if convert:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(x.device.type, dtype=dtype):
        out = net(x)
        target = torch.empty(out.shape[0], dtype=torch.long, device=x.device).random_(out.shape[1])
        loss = criterion(out, target)
        (scaler.scale(loss) if scaler is not None else loss).backward()
    if scaler is not None:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    return loss


class Stepper(NamedTuple):
    step: Callable[[], torch.Tensor]  # one training step; its loss, left on the device
    scaler: torch.amp.GradScaler | None


def _stepper(s: Session, side: str, cell: Cell, net: nn.Module, inputs: dict[str, torch.Tensor],
             y: torch.Tensor) -> Stepper:
    """One training step of ``side`` in ``cell``, with a fresh optimizer and scaler."""
    opt = make_optimizer(net, RunSettings.of(optimizer_impl=cell.optimizer), s.device)
    scaler = torch.amp.GradScaler(s.device.type) if cell.scaler else None
    x = inputs[cell.input]
    if side == "benchlib":
        knobs = Knobs(precision=f"amp_{cell.precision}", memory_format="channels_last", cudnn_benchmark=True)
        t = Trainer(net, opt, s.device, knobs, scaler)
        return Stepper(lambda: train_step(t, x, y).loss, scaler)
    criterion = nn.CrossEntropyLoss()
    return Stepper(lambda: _bare_step(net, opt, scaler, x, _DTYPES[cell.precision], cell.input == "nchw", criterion),
                   scaler)


def _block(s: Session, stepper: Stepper) -> tuple[list[float], dict[str, Any]]:
    """Warm-up steps, then timed ones: seconds per step (StepTimer); whether the last loss was finite and the
    scaler's scale before and after the timed steps (a halving is a step it skipped)."""
    for _ in range(s.sizes.gap_warmup):
        stepper.step()
    scale = float(stepper.scaler.get_scale()) if stepper.scaler is not None else None
    timer = StepTimer(s.device)
    loss = None
    for _ in range(s.sizes.gap_steps):
        timer.start()
        loss = stepper.step()
        timer.stop()
    times = timer.collect()
    return times, {"loss_finite": loss is not None and bool(torch.isfinite(loss.detach()).all()),
                   "scale_before": scale,
                   "scale_after": float(stepper.scaler.get_scale()) if stepper.scaler is not None else None}


def _profile_gaps(s: Session, step: Callable[[], torch.Tensor]) -> dict[str, Any]:
    for _ in range(2):
        step()
    synchronize(s.device)
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(s.sizes.profile_steps):
            step()
        synchronize(s.device)
    kernels = [(*event_interval(e), e.name) for e in prof.events() if device_work_kind(e) is not None]
    gaps, busy = idle_gaps(kernels)
    window = max(k[1] for k in kernels) - min(k[0] for k in kernels) if kernels else 0.0
    largest = sorted(gaps, key=lambda g: -g.us)[:5]
    return {"steps": s.sizes.profile_steps, "kernels": len(kernels), "window_us": round(window, 1),
            "busy_us": round(busy, 1), f"gaps_over_{GAP_MIN_US:g}us": len(gaps),
            f"gaps_over_{GAP_MIN_US:g}us_sum_us": round(sum(g.us for g in gaps), 1),
            "largest": [{"us": round(g.us, 1), "before": g.before[:120], "after": g.after[:120]} for g in largest]}


def warm_block_s(blocks: list[tuple[bool, float]]) -> float:
    """The seconds a block takes once warm: the median of the blocks that were not their cell's first (a cell's
    first block autotunes cuDNN and can take ten times as long), the slowest block where none is warm yet."""
    warm = [t for first, t in blocks if not first]
    return statistics.median(warm) if warm else max((t for _, t in blocks), default=0.0)


def round_order(cells: list[Any], r: int) -> list[Any]:
    """The cells in round ``r``'s order: as listed, then reversed, so no cell (the bf16 ones) always runs last."""
    return list(cells) if r % 2 == 0 else list(cells)[::-1]


def timm_gap(s: Session) -> None:
    """Section 2: benchlib's step against a bare timm-style loop, same model and process, interleaved blocks."""
    z = s.sizes
    models, no_timm = _gap_models(s)
    if no_timm:
        _skip(s, "factor zero_init_last", f"{no_timm} (torchvision's {z.gap_fallback} instead)")
    if not s.cuda:
        _skip(s, "factor precision fp16", "fp16 autocast training is a GPU configuration (benchlib refuses it on "
                                          "a CPU): bf16 alone here, the scaler's path still run")
    precisions = [p for p in z.gap_precisions if p != "bf16" or not s.cuda or torch.cuda.is_bf16_supported()]
    cells, own = gap_cells(precisions, list(models), z.gap_full), natives(precisions, list(models))
    x = torch.randn(z.gap_batch, 3, z.gap_px, z.gap_px, device=s.device)
    inputs = {"nchw": x, "channels_last": x.contiguous(memory_format=torch.channels_last)}
    y = torch.randint(0, 1000, (z.gap_batch,), device=s.device)
    s.log(finding="plan", model=z.gap_fallback if no_timm else z.gap_model, batch=z.gap_batch, image_px=z.gap_px,
          cells=len(cells), sides=list(SIDES), steps_per_block=z.gap_steps, warmup_per_block=z.gap_warmup,
          rounds_at_most=z.gap_rounds, full_factorial=z.gap_full, cudnn_benchmark=True, tf32=False)
    start = {init: copy.deepcopy(net.state_dict()) for init, net in models.items()}  # each block starts here
    samples: dict[tuple[str, Cell], list[float]] = {}
    reserve_s = 25.0 if s.cuda else 0.0  # the profiles at the end
    blocks: list[tuple[bool, float]] = []  # (a cell's first block, its seconds): the round estimate's
    with backend_flags(Knobs(cudnn_benchmark=True)):
        for r in range(z.gap_rounds):
            block_s = warm_block_s(blocks)
            if r and s.left() < reserve_s + block_s * 2 * len(cells):
                s.log(finding="rounds cut", rounds=r, left_s=round(s.left(), 1), warm_block_s=round(block_s, 2))
                break
            for i, cell in enumerate(round_order(cells, r)):
                for side in SIDES if (r + i) % 2 == 0 else SIDES[::-1]:  # A B, then B A: drift reaches both
                    t0 = time.monotonic()
                    net = models[cell.zero_init_last]
                    net.load_state_dict(start[cell.zero_init_last])
                    times, state = _block(s, _stepper(s, side, cell, net, inputs, y))
                    blocks.append((not any(key[1] == cell for key in samples), time.monotonic() - t0))
                    block_s = warm_block_s(blocks)
                    samples.setdefault((side, cell), []).extend(times)
                    s.log(finding="block", round=r, side=side, cell=cell.label(), **asdict(cell),
                          median_ms=round(Samples.of(times).median * 1e3, 4), steps=len(times), **state)
                if s.left() < reserve_s + 2 * block_s:
                    break
            else:
                continue
            s.log(finding="rounds cut", rounds=r + 1, mid_round=True, left_s=round(s.left(), 1))
            break
        medians = {key: Samples.of(v).median * 1e3 for key, v in samples.items()}
        for (side, cell), ms in medians.items():
            s.log(finding="cell", side=side, cell=cell.label(), **asdict(cell), median_ms=round(ms, 4),
                  steps=len(samples[(side, cell)]))
        for effect in main_effects(medians):
            s.log(finding="effect", **effect)
        ms = {side: medians.get((side, own[side])) for side in SIDES}
        if ms["benchlib"] and ms["bare"]:
            s.log(finding="each side as it runs by itself", benchlib=own["benchlib"].label(),
                  benchlib_ms=round(ms["benchlib"], 4), bare=own["bare"].label(), bare_ms=round(ms["bare"], 4),
                  bare_over_benchlib=round(ms["bare"] / ms["benchlib"], 4))
        if not s.cuda:
            _skip(s, "idle gaps between kernels", f"{NEEDS_CUDA}: a device timeline")
            return
        for side in SIDES:
            net = models[own[side].zero_init_last]
            net.load_state_dict(start[own[side].zero_init_last])
            stepper = _stepper(s, side, own[side], net, inputs, y)
            s.log(finding="idle gaps between kernels", side=side, cell=own[side].label(),
                  **_profile_gaps(s, stepper.step))


# ---------------------------------------------------------------- 3. convolution kernels and FLOP/s

class ConvShape(NamedTuple):
    shape: str
    batch: int
    c_in: int
    c_out: int
    side_in: int
    side_out: int
    kernel: int
    stride: int
    channels_last: bool

    def flops(self) -> int:
        # conv_flops counts channels in = out; with one channel each it is the per-channel-pair count
        return conv_flops(self.batch, 1, self.side_out, self.kernel) * self.c_in * self.c_out


def resnet18_3x3_shapes(batch: int, image_px: int) -> list[ConvShape]:
    """Each distinct 3x3 convolution of resnet18 at ``image_px`` (its NCHW layout, as ``benchlib layers`` runs
    it), from one forward pass on the CPU."""
    net = build_model("resnet18", 1000).eval()
    found: dict[tuple[int, ...], ConvShape] = {}

    def hook(m: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        assert isinstance(m, nn.Conv2d)
        if m.kernel_size == (3, 3):
            key = (m.in_channels, m.out_channels, args[0].shape[-1], m.stride[0])
            found.setdefault(key, ConvShape(f"resnet18 3x3 {key[0]}->{key[1]} {key[2]}px s{key[3]}", batch,
                                            *key[:3], out.shape[-1], 3, key[3], False))

    handles = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        net(torch.zeros(1, 3, image_px, image_px))
    for h in handles:
        h.remove()
    return list(found.values())


def roof_shapes(device: torch.device, shape: Sequence[int]) -> list[ConvShape]:
    """The roof's convolution (``ceilings.py``: channels-last, ``CONV_KERNEL`` of this device) and the same
    shape at the other kernel size (1x1 against 3x3), for comparison."""
    batch, channels, side = shape
    roof = CONV_KERNEL[device.type]
    return [ConvShape(f"roof {k}x{k}{' (the roof)' if k == roof else ''} {channels}ch {side}px", batch, channels,
                      channels, side, side, k, 1, True) for k in dict.fromkeys((roof, 4 - roof))]


def _conv_inputs(shape: ConvShape, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape.batch, shape.c_in, shape.side_in, shape.side_in, generator=gen).to(device)
    w = torch.randn(shape.c_out, shape.c_in, shape.kernel, shape.kernel, generator=gen).to(device)
    if shape.channels_last:
        x, w = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
    return x, w


def _conv_names(s: Session, ops: dict[str, Callable[[], torch.Tensor]]) -> dict[str, list[tuple[str, float]]]:
    """The kernels (on a CPU: the aten ops) each op ran, with their microseconds, from one profile: each op in its
    own range, synchronized, so a kernel belongs to the range its time falls in."""
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if s.cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        for name, op in ops.items():
            with torch.profiler.record_function(f"conv::{name}"):
                op()
                synchronize(s.device)
    events = prof.events()
    ranges = {e.name[len("conv::"):]: event_interval(e) for e in events
              if e.name.startswith("conv::") and is_host_event(e)}  # not the device's copy of the annotation
    out: dict[str, list[tuple[str, float]]] = {name: [] for name in ops}
    for e in events:
        if not (device_work_kind(e) == "kernel" if s.cuda else _innermost_conv_op(e)):
            continue
        start, end = event_interval(e)
        for name, (r0, r1) in ranges.items():
            if r0 <= start < r1:
                out[name].append((e.name, end - start))
    return out


def _innermost_conv_op(event: Any) -> bool:
    """A CPU's own convolution op (``aten::mkldnn_convolution``...): none of its children is a convolution."""
    def conv(e: Any) -> bool:
        return bool(e.name.startswith("aten::") and "conv" in e.name)
    return is_host_event(event) and conv(event) and not any(conv(c) for c in event.cpu_children)


def _sig(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant figures."""
    return float(f"{value:.{digits}g}")


def _conv_math(s: Session) -> list[tuple[bool, str]]:
    """(cudnn.benchmark, fp32 | tf32) combinations: all four on CUDA, strict fp32 alone on a CPU."""
    return [(b, m) for b in (False, True) for m in ("fp32", "tf32")] if s.cuda else [(False, "fp32")]


def conv_kernels(s: Session) -> None:
    """Section 3: kernel names and FLOP/s of resnet18's 3x3 shapes and of the roof's convolution."""
    z = s.sizes
    shapes = roof_shapes(s.device, z.roof_shape) + resnet18_3x3_shapes(z.conv_batch, z.conv_px)
    if not s.cuda:
        _skip(s, "cudnn.benchmark on, tf32", f"{NEEDS_CUDA}: cuDNN's autotuner and TF32")
    tensors = {sh.shape: _conv_inputs(sh, s.device) for sh in shapes}
    before = torch.backends.cudnn.benchmark
    try:
        for benchmark, math_mode in _conv_math(s):
            torch.backends.cudnn.benchmark = benchmark
            with tf32(math_mode == "tf32"), torch.no_grad():
                ops = {sh.shape: (lambda sh=sh: nn.functional.conv2d(*tensors[sh.shape], stride=sh.stride,
                                                                     padding=sh.kernel // 2)) for sh in shapes}
                for op in ops.values():  # cuDNN's autotuner picks here, before anything is timed
                    for _ in range(3):
                        op()
                names = _conv_names(s, ops)
                roof_flops_per_s = None
                for sh in shapes:
                    timer = StepTimer(s.device)
                    for _ in range(z.conv_repeats):
                        timer.start()
                        ops[sh.shape]()
                        timer.stop()
                    median_s = Samples.of(timer.collect()).median
                    flops_per_s = sh.flops() / median_s
                    if sh.kernel == CONV_KERNEL[s.device.type] and sh.shape.startswith("roof"):
                        roof_flops_per_s = flops_per_s
                    kernels = names[sh.shape]
                    s.log(finding="convolution", **sh._asdict(), cudnn_benchmark=benchmark,
                          math=math_mode, flops=sh.flops(), median_ms=_sig(median_s * 1e3),
                          tflop_per_s=_sig(flops_per_s / 1e12),  # significant figures: a CPU's tiny conv is not 0
                          over_roof=_sig(flops_per_s / roof_flops_per_s) if roof_flops_per_s else None,
                          kernels=list(dict.fromkeys(k for k, _ in kernels)),
                          kernel_us=round(sum(us for _, us in kernels), 2),
                          winograd=any(WINOGRAD_KERNEL.search(k) for k, _ in kernels),
                          tf32_kernel=any(TF32_KERNEL.search(k) for k, _ in kernels))
    finally:
        torch.backends.cudnn.benchmark = before


# ---------------------------------------------------------------- 4. the gpu-amp row through the CLI

ROW_FIELDS = ("status", "error", "precision", "optimizer_impl", "memory_format", "cudnn_benchmark", "tf32",
              "train_samples_per_s", "train_step_s_median", "train_step_s_iqr", "final_loss", "infer_samples_per_s",
              "peak_cuda_allocated_bytes", "peak_cuda_reserved_bytes", "gpu_sm_clock_mhz_mean", "gpu_power_w_mean",
              "gpu_util_pct_mean", "device_name")


def benchlib_run(model: str, batch: int, image_px: int, steps: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "benchlib", "run", "--model", model, "--data", "synthetic", "--device", "cuda",
            "--batch-size", str(batch), "--image-size", str(image_px), "--steps", str(steps), "--no-save", "--json",
            *extra]


def _row(done: Run) -> dict[str, Any]:
    """The row a ``--json`` run printed (its fields that matter here), or nothing."""
    lines = done.stdout.strip().splitlines()
    try:
        row = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return {}
    return {k: row.get(k) for k in ROW_FIELDS} if isinstance(row, dict) else {}


def _run_finding(done: Run) -> dict[str, Any]:
    refusal = [line for line in done.stderr.strip().splitlines() if line.startswith("benchlib: error:")]
    return {"rc": done.rc, "seconds": round(done.seconds, 1), **_row(done),
            "stderr_lines": len(done.stderr.strip().splitlines()), "refusal": refusal[0][:400] if refusal else None,
            "stderr_tail": tail_lines(done.stderr) if done.rc else None}


def cli_gpu_amp(s: Session) -> None:
    """Section 4: ``benchlib run --variant gpu-amp`` in its own process (a CPU machine: its refusal)."""
    z = s.sizes
    cmd = benchlib_run(z.cli_model, z.cli_batch, z.cli_px, z.cli_steps, "--variant", "gpu-amp")
    done = run_command(cmd, s.left())
    finding = _run_finding(done)
    loss = finding.get("final_loss")
    s.log(finding="gpu-amp row", command=" ".join(cmd[1:]), cuda=s.cuda, **finding,
          loss_finite=math.isfinite(loss) if isinstance(loss, float) else None)


# ---------------------------------------------------------------- 5. small memory

BALLAST = """
import os, sys, threading, torch
device, keep, cap_bytes, life_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
threading.Timer(life_s, lambda: os._exit(3)).start()  # never outlive the session, whatever happens to it
if device.startswith("cuda"):
    free, total = torch.cuda.mem_get_info(torch.device(device))
    want = max(0, free - keep)
else:
    free, total, want = 0, 0, cap_bytes
held, chunk = [], 2**30  # in chunks: no single block of all of it is needed, and what fits is held
while sum(t.numel() for t in held) < want and chunk >= 2**20:
    try:
        held.append(torch.empty(min(chunk, want - sum(t.numel() for t in held)), dtype=torch.uint8, device=device))
    except torch.OutOfMemoryError:
        chunk //= 2
if device.startswith("cuda"):
    torch.cuda.synchronize()
print(f"ready {sum(t.numel() for t in held)} {free} {total}", flush=True)
sys.stdin.read()  # until told to go (stdin closed), or the parent died and its end of the pipe closed
os._exit(0)
"""


@contextlib.contextmanager
def ballast(device: torch.device, keep_free_bytes: int, cpu_bytes: int, life_s: float) -> Iterator[dict[str, Any]]:
    """A child process holding all but ``keep_free_bytes`` of ``device`` (``cpu_bytes`` on a CPU) until the block
    ends; then killed with its whole process group. Yields what it reported (``held_bytes``...)."""
    proc = subprocess.Popen([sys.executable, "-c", BALLAST, str(device), str(keep_free_bytes), str(cpu_bytes),
                             str(life_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=child_env(), start_new_session=True)
    info: dict[str, Any] = {"pid": proc.pid}
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("ready"):
            said = proc.stderr.read()[-300:] if proc.stderr else ""
            raise RuntimeError(f"the ballast did not start: {line.strip()} {said}")
        _, held, free, total = line.split()
        info.update(held_bytes=int(held), free_before_bytes=int(free), total_bytes=int(total))
        yield info
    finally:
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        kill_group(proc)
        info["killed"] = proc.poll() is not None
        info["returncode"] = proc.returncode


def _nvml_free_bytes(device: torch.device) -> int | None:
    with NvmlDevices(uuids=cuda_uuids([device.index or 0])) as nv:
        if not nv.handles:
            return None
        return int(pynvml.nvmlDeviceGetMemoryInfo(next(iter(nv.handles.values()))).free)


def _allowed_batch(refusal: str | None) -> int | None:
    found = re.search(r"batch sizes up to (\d+)", refusal or "")
    return int(found.group(1)) if found else None


def small_memory(s: Session) -> None:
    """Section 5: the preflight's refusal, its suggested batch and the acceptance run's sizes, beside a ballast."""
    z = s.sizes
    if s.cuda:
        fresh_state(s.device)  # this process's cached blocks are not the ballast's to count
    keep = z.headroom_bytes if s.cuda else 0
    with ballast(s.device, keep, z.ballast_cpu_bytes, life_s=max(s.left(), 5.0) + 30) as held:
        s.log(finding="ballast", device=str(s.device), keep_free_bytes=keep,
              free_bytes_now=_nvml_free_bytes(s.device) if s.cuda else None,
              **{k: v for k, v in held.items() if k != "pid"})
        if s.cuda:
            _small_memory_runs(s)
        else:
            s.log(finding="skipped", skipped=f"{NEEDS_CUDA}: the preflight's GPU memory check, a run at its batch, "
                                             "the acceptance run's sizing (the ballast's start and kill ran)")
    s.log(finding="ballast killed", pid_alive=_pid_alive(held["pid"]), returncode=held.get("returncode"))


def _small_memory_runs(s: Session) -> None:
    z = s.sizes
    refused = run_command(benchlib_run("resnet50", z.refused_batch, 224, 3), min(s.left(), 120))
    finding = _run_finding(refused)
    fits = _allowed_batch(finding["refusal"])
    s.log(finding="preflight refusal", batch=z.refused_batch, allowed_batch=fits, **finding)
    if fits:
        ran = run_command(benchlib_run("resnet50", fits, 224, 3, "--set", "warmup_steps=1", "--set",
                                       "latency_repeats=3", "--set", "latency_budget_s=0"), min(s.left(), 150))
        s.log(finding="run at the allowed batch", batch=fits, **_run_finding(ran))
    out = s.out / "acceptance_small_memory.json"
    args = ["--only", "check_memory_floor", "--out", str(out)] + (["--quick"] if s.quick else [])
    done = run_command([sys.executable, str(ROOT / "benchmarks" / "gpu_acceptance.py"), *args], s.left())
    notes = [line.removeprefix("[acceptance] ") for line in done.stderr.splitlines()
             if line.startswith("[acceptance]") and "check_" not in line]
    report = json.loads(out.read_text()) if out.exists() else {}
    checks = [{k: c.get(k) for k in ("name", "figure", "passed", "detail")} for c in report.get("checks", [])]
    s.log(finding="acceptance sized to the free memory", args=args, rc=done.rc, seconds=round(done.seconds, 1),
          sizes=report.get("sizes"), sizes_why=report.get("sizes_why") or notes, checks=checks,
          stderr_tail=tail_lines(done.stderr) if done.rc not in (0, 1) else None)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------- the runner

# ---------------------------------------------------------------- 6. predict, then measure

PREDICT_FROM = ROOT / "results" / "predict-source"  # a CPU study's per-layer files, carried to the GPU
PREDICT_LAYERS = ("--data", "synthetic", "--batch-size", "32", "--image-size", "32", "--steps", "12", "--block", "4")


def predict_then_measure(s: Session) -> None:
    """Section 6: the CPU study's models predicted on this GPU from its ceilings (and shapes) alone, written before
    any of them runs here, then each measured the way the CPU study measured it (``benchlib layers``)."""
    source = PREDICT_FROM
    if not any(source.glob("layers/*.json")):
        _skip(s, "predicted step", f"no CPU study carried in {source.relative_to(ROOT)}: make it here with "
                                   "`benchmarks/predict_check.py` or `benchlib layers --results-dir "
                                   f"{source.relative_to(ROOT)} ...` and carry that folder")
        return
    if not s.cuda:
        _skip(s, "predicted step", f"{NEEDS_CUDA}: the target's ceilings are this GPU's")
        return
    target = s.out / "predict_target"
    done = run_command([sys.executable, "-m", "benchlib", "roofline", "-q", "--device", str(s.device),
                        "--results-dir", str(target), "--shapes-of", str(source)], min(s.left(), 90))
    ceilings = sorted((target / "ceilings").glob("*.json"))
    if done.rc != 0 or not ceilings:
        s.log(finding="target ceilings", rc=done.rc, seconds=round(done.seconds, 1),
              stderr_tail=tail_lines(done.stderr))
        return
    said = run_command([sys.executable, "-m", "benchlib", "predict", str(source), "--on", str(ceilings[0]),
                        "--json"], min(s.left(), 60))
    if said.rc != 0:
        s.log(finding="predicted step", rc=said.rc, stderr_tail=tail_lines(said.stderr))
        return
    rows = json.loads(said.stdout)["rows"]
    (s.out / "predicted.json").write_text(said.stdout)  # on disk before anything is measured here
    for r in rows:
        s.log(finding="predicted step", model=r["model"], figure=r["figure"], predicted=r["predicted"],
              low=r["low"], high=r["high"], unit=r["unit"], measured_on_cpu=r["measured"], weakest=r["weakest"])
    for model in dict.fromkeys(r["model"] for r in rows):
        if s.left() < 20:
            s.log(finding="measured against predicted", model=model, skipped="the section's budget is spent")
            continue
        ran = run_command([sys.executable, "-m", "benchlib", "layers", "-q", "--model", model, "--device",
                           str(s.device), *PREDICT_LAYERS, "--results-dir", str(target), "--json"], s.left() - 5)
        if ran.rc != 0:
            s.log(finding="measured against predicted", model=model, rc=ran.rc, stderr_tail=tail_lines(ran.stderr))
            continue
        got = json.loads(ran.stdout)
        measured = {"train_step_s": float(got["step_s"]),
                    "latency_ms_p50": float((got.get("inference") or {}).get("step_s") or math.nan) * 1e3}
        for r in (r for r in rows if r["model"] == model and r["figure"] in measured):
            truth = measured[r["figure"]]
            s.log(finding="measured against predicted", model=model, figure=r["figure"], predicted=r["predicted"],
                  low=r["low"], high=r["high"], measured=truth, error=r["predicted"] / truth - 1 if truth else None,
                  inside=bool(r["low"] <= truth <= r["high"]))


# ---------------------------------------------------------------- 7. bf16 against fp16, kernel by kernel

def bf16_profile(s: Session) -> None:
    """Section 7: why bf16 trained slower than fp16 (27% on the H200): one resnet50 training step of benchlib's
    trainer under each, profiled, each kernel's device time summed by name; the kernels whose time differs most
    between the two, with their share of the difference."""
    if not s.cuda:
        _skip(s, "bf16 against fp16 kernels", f"{NEEDS_CUDA}: device kernels")
        return
    if not torch.cuda.is_bf16_supported():
        _skip(s, "bf16 against fp16 kernels", "this GPU has no bf16")
        return
    z = s.sizes
    totals: dict[str, dict[str, float]] = {}
    for precision in ("amp_fp16", "amp_bf16"):
        settings = RunSettings.of(precision=precision, memory_format="channels_last", cudnn_benchmark=True)
        net = build_model("resnet50", 1000).to(s.device, memory_format=torch.channels_last)
        t = Trainer.of(net, net, settings, s.device)
        x = torch.randn(z.gap_batch, 3, z.gap_px, z.gap_px, device=s.device)
        y = torch.randint(0, 1000, (z.gap_batch,), device=s.device)
        for _ in range(3):  # autotuned and warm
            train_step(t, x, y)
        synchronize(s.device)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(z.profile_steps):
                train_step(t, x, y)
            synchronize(s.device)
        per: dict[str, float] = {}
        for e in prof.key_averages():
            us = float(getattr(e, "device_time_total", 0.0) or getattr(e, "cuda_time_total", 0.0) or 0.0)
            if us > 0:
                per[e.key] = per.get(e.key, 0.0) + us / z.profile_steps
        totals[precision] = per
        s.log(finding="kernels of one step", precision=precision, kernels=len(per),
              device_ms=round(sum(per.values()) / 1e3, 3))
        del net, t
        fresh_state(s.device)
    fp16, bf16 = totals["amp_fp16"], totals["amp_bf16"]
    diff = sum(bf16.values()) - sum(fp16.values())
    moved = sorted(set(fp16) | set(bf16), key=lambda k: -(bf16.get(k, 0.0) - fp16.get(k, 0.0)))
    s.log(finding="bf16 against fp16 kernels", bf16_over_fp16=round(sum(bf16.values()) / sum(fp16.values()), 4),
          difference_us=round(diff, 1), largest=[{"kernel": k[:160], "fp16_us": round(fp16.get(k, 0.0), 1),
                                                  "bf16_us": round(bf16.get(k, 0.0), 1),
                                                  "share_of_difference": round((bf16.get(k, 0.0) - fp16.get(k, 0.0))
                                                                               / diff, 3) if diff else None}
                                                 for k in moved[:12]])


SECTIONS = [
    Section("predict", predict_then_measure, 75, 30),  # first: the prediction is written before anything runs
    Section("fused_sgd", fused_sgd, 30, 10),
    Section("timm_gap", timm_gap, 140, 40),
    Section("conv_kernels", conv_kernels, 50, 15),
    Section("cli_gpu_amp", cli_gpu_amp, 75, 40),
    Section("small_memory", small_memory, 100, 60),
    Section("bf16_profile", bf16_profile, 45, 20),
]


# Each finding's rule, written before the run, and its judge (True pass, False fail, None: not judged, with why).
# A finding without a rule is informational (a plan, a block's time, an effect): it is data for the others.
RULES: dict[str, tuple[str, Callable[[dict[str, Any]], bool | None]]] = {
    "momentum buffers after the skipped first step": (
        "benchlib's fused SGD leaves every momentum buffer finite after the scaler skips the first step "
        "(torch's own fused SGD is the control that may not)",
        lambda f: f.get("nonfinite") == 0 if str(f.get("optimizer", "")).startswith("benchlib") else None),
    "weights after 3 steps against for_loop": (
        f"finite, and within {WEIGHT_RTOL:g} x the largest weight of for-loop SGD's, tensor by tensor",
        lambda f: bool(f.get("within_tolerance")) if str(f.get("optimizer", "")).startswith("benchlib") else None),
    "host syncs per fp16 step": (
        "benchlib's default (fused) SGD under fp16: no host synchronization in a step",
        lambda f: f.get("syncs") == 0 if f.get("optimizer") == "fused" else None),
    "each side as it runs by itself": (
        "benchlib's step at least 0.97 of the bare timm-style loop's speed (bare / benchlib >= 0.97)",
        lambda f: float(f["bare_over_benchlib"]) >= 0.97 if f.get("bare_over_benchlib") is not None else None),
    "gpu-amp row": ("on a GPU the gpu-amp variant runs through the CLI to a finite loss (a CPU refuses it in "
                    "one line)",
                    lambda f: (f.get("rc") == 0 and bool(f.get("loss_finite"))) if f.get("cuda")
                    else (f.get("rc") == 2 and f.get("stderr_lines") == 1)),
    "preflight refusal": ("a batch too large for the free memory is refused in one line naming a batch that fits",
                          lambda f: f.get("rc") == 2 and bool(f.get("refusal")) and f.get("stderr_lines") == 1),
    "run at the allowed batch": ("the batch the refusal named runs", lambda f: f.get("rc") == 0),
    "acceptance sized to the free memory": ("the acceptance run sizes itself to the free memory and passes",
                                            lambda f: f.get("rc") == 0),
    "measured against predicted": ("the step and batch-1 latency measured here inside the 90% interval predicted "
                                   "from the CPU study and this GPU's ceilings",
                                   lambda f: f.get("inside") if "inside" in f else None),
}


def verdict(fields: dict[str, Any]) -> dict[str, Any]:
    """A finding's rule and pass/fail (``RULES``); nothing for an informational one."""
    rule = RULES.get(str(fields.get("finding")))
    if rule is None:
        return {}
    try:
        passed = rule[1](fields)
    except (KeyError, TypeError, ValueError) as exc:
        passed = False
        fields = {**fields, "judge_error": str(exc)}
    return {"rule": rule[0], "passed": passed}


def _machine(device: torch.device, sizes: Sizes, args: argparse.Namespace, wheels: str | None) -> dict[str, Any]:
    try:
        import timm
        timm_version = timm.__version__
    except ImportError as exc:
        timm_version = f"not importable: {exc}"
    return {"device": str(device), "device_name": device_name(device), "python": platform.python_version(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "driver": driver_version()[0], "timm": timm_version, "carried_wheels": wheels, "quick": args.quick,
            "budget_s": args.budget_s, "sizes": asdict(sizes), "argv": sys.argv}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_session_out")),
                        help="folder of findings.jsonl and watch.jsonl (default $OUT)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run every section on the CPU at tiny sizes (what needs CUDA is skipped, with why)")
    parser.add_argument("--only", help=f"comma-separated sections, of: {', '.join(s.name for s in SECTIONS)}")
    parser.add_argument("--budget-s", type=float, default=520.0,
                        help="the session's seconds: a section starts only if its minimum is left (default 520: "
                             "with start-up, about 9 minutes, a minute inside a 10-minute command)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    unknown = sorted((only or set()) - {s.name for s in SECTIONS})
    if unknown:
        print(f"gpu_session: unknown section {', '.join(unknown)}; allowed: {', '.join(s.name for s in SECTIONS)}",
              file=sys.stderr)
        return 2
    t0 = time.monotonic()
    budget = Budget(args.budget_s, t0)
    args.out.mkdir(parents=True, exist_ok=True)
    findings = FindingsFile(args.out / "findings.jsonl", t0)
    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        findings.write({"section": "session", "finding": "skipped",
                        "skipped": "no CUDA device on this machine (--allow-cpu runs the plumbing on the CPU)"})
        print("gpu_session: no CUDA device on this machine: nothing to measure (exit 0)")
        return 0
    wheels = install_carried_wheels(ROOT)
    device = torch.device(args.device if cuda else "cpu")
    sizes = CPU if device.type == "cpu" else QUICK if args.quick else Sizes()
    watch = Watch(args.out / "watch.jsonl", t0, cuda_uuids([device.index or 0]) if device.type == "cuda" else None)
    session = Session(device, sizes, args.quick, args.out, log=section_log(findings, "session", verdict))
    session.log(finding="machine", **_machine(device, sizes, args, wheels))
    fail = set(filter(None, os.environ.get(FAILURE_ENV, "").split(",")))
    try:
        outcome = run_sections(session, [s for s in SECTIONS if not only or s.name in only], budget, findings,
                               watch, fail, verdict)
    finally:
        watch.stop()
    judged = findings.judged
    findings.write({"section": "session", "finding": "end", "outcome": outcome,
                    "seconds": round(time.monotonic() - t0, 1), "budget_s": args.budget_s,
                    "passed": sum(p is True for _, p in judged), "failed": sum(p is False for _, p in judged)})
    findings.close()
    for line in verdict_lines(judged):
        print(line)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a terminated session's finally blocks still run
    sys.exit(main())
