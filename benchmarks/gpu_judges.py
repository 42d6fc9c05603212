"""The GPU acceptance run's judgements: figures in, a verdict out. Nothing here touches a device.

``gpu_acceptance.py`` measures on the GPU and hands each figure to one ``judge_*`` here, so a test on a
machine without a GPU can feed every judgement a wrong figure and see it fail, and a right one and see it
pass. What the judgements are measured against is chosen here too, from facts alone: the datasheet of the
GPU's family and board (``sheet_for``) and work sizes that fit its free memory (``fit_sizes``).
"""
from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchlib.env.gpu import MIN_COPY_BYTES, GpuFacts, copy_bytes_for, matmul_size_for
from benchlib.instruments.nvml import normal_uuid
from benchlib.roofline.datasheet import datasheet_for, mig_parent_name, slice_datasheet

TERA = 1e12
GIB = 2**30
NO_SHEET = "no datasheet for this part"


@dataclass
class Check:
    name: str
    figure: float | None
    unit: str
    expected: str
    passed: bool | None  # None: not judged here (skipped, or informational on this GPU)
    detail: str = ""


def not_run(name: str, why: str = "skipped", expected: str = "needs CUDA") -> Check:
    return Check(name, None, "", expected, None, why)


# ---------------------------------------------------------------- what the figures are judged against

def sheet_for(gpu: GpuFacts) -> tuple[dict[str, Any] | None, str]:
    """The datasheet a GPU's ranges come from, chosen by family and board (``GpuFacts.form``: a PCIe part never
    gets SXM figures), a MIG slice's scaled from its parent's; and where they came from, or why there are none."""
    if gpu.mig:
        parent = replace(gpu, name=mig_parent_name(gpu.name))
        return slice_datasheet(gpu.name, parent.form)
    sheet = datasheet_for(gpu.name, gpu.form)
    if sheet is None:
        return None, f"{NO_SHEET} ({gpu.name}, {gpu.form} board)"
    return sheet, f"{sheet['name']} datasheet"


@dataclass(frozen=True)
class Sizes:
    """Work sizes: the issue's on a GPU with room for them (``fit_sizes`` shrinks them), tiny ones on the CPU."""

    model: str = "resnet50"
    batch: int = 128
    image_px: int = 224
    steps: int = 50
    warmup: int = 5
    matmul: int = 8192
    copy_bytes: int = 2 * GIB
    telemetry_s: float = 15.0
    isolation_batches: tuple[int, int] = (256, 16)  # resnet18: a large configuration, then a small one


QUICK = Sizes(model="resnet18", batch=8, image_px=32, steps=6, warmup=2, matmul=256, copy_bytes=8 * 2**20,
              telemetry_s=1.5, isolation_batches=(64, 8))

# The share of the free memory a configuration's floor (``nets/memory_floor.py``) may take: the real peak
# adds gradients, momentum, cuDNN workspaces and the allocator's rounding, and other processes may grow.
WORK_SHARE = 0.4
BATCHES = (256, 128, 96, 64, 48, 32, 24, 16, 8, 4, 2)
SMALL_MODEL = "resnet18"  # the memory-isolation model, and the fallback where the asked model fits no batch
FloorBytes = Callable[[str, int, int], float]  # (model, image_px, batch) -> fp32 training floor in bytes


def largest_batch(model: str, image_px: int, wanted: int, budget_bytes: float, floor: FloorBytes) -> int | None:
    """The largest batch of ``BATCHES`` up to ``wanted`` whose training floor fits ``budget_bytes``."""
    return next((b for b in BATCHES if b <= wanted and floor(model, image_px, b) <= budget_bytes), None)


def _training(sizes: Sizes, budget: float, floor: FloorBytes) -> tuple[str, int, list[str]]:
    """(model, batch) of the training checks: the asked model's largest batch that fits, else the small model's."""
    for model in dict.fromkeys((sizes.model, SMALL_MODEL)):
        batch = largest_batch(model, sizes.image_px, sizes.batch, budget, floor)
        if batch is not None:
            return model, batch, []
    return SMALL_MODEL, BATCHES[-1], [f"no batch of {sizes.model} or {SMALL_MODEL} fits: expect out of memory"]


def _ceilings(sizes: Sizes, gpu: GpuFacts) -> tuple[int, int, list[str]]:
    """(copy bytes, matmul size) of the ceilings, within ``FREE_SHARE`` of the free memory (``env/gpu.py``)."""
    try:
        return copy_bytes_for(gpu, sizes.copy_bytes), matmul_size_for(gpu, sizes.matmul, element_bytes=4), []
    except ValueError as exc:  # under MIN_COPY_BYTES each: the bandwidth figure would be the cache's
        return MIN_COPY_BYTES, matmul_size_for(gpu, sizes.matmul, element_bytes=4), [str(exc)]


def fit_sizes(sizes: Sizes, gpu: GpuFacts, floor: FloorBytes) -> tuple[Sizes, list[str]]:
    """``sizes`` shrunk to what ``gpu``'s free memory holds (a MIG 1g slice, a 4 GiB laptop GPU, a loaded T4),
    and lines saying what was chosen and why."""
    budget = gpu.free_bytes * WORK_SHARE
    model, batch, why = _training(sizes, budget, floor)
    asked_big, asked_small = sizes.isolation_batches
    big = largest_batch(SMALL_MODEL, sizes.image_px, asked_big, budget, floor) or BATCHES[-1]
    isolation = (big, max(1, big * asked_small // asked_big))
    copy_bytes, matmul, ceiling_why = _ceilings(sizes, gpu)
    why = [f"{gpu.label()}: {gpu.free_bytes / GIB:.1f} GiB free, of which a training floor (nets/memory_floor.py) "
           f"may take {WORK_SHARE:.0%} ({budget / GIB:.2f} GiB)", *why,
           f"training: {model} batch {batch} at {sizes.image_px} px, floor "
           f"{floor(model, sizes.image_px, batch) / GIB:.2f} GiB (asked {sizes.model} batch {sizes.batch})",
           f"memory isolation: {SMALL_MODEL} batch {isolation[0]} then {isolation[1]} (asked {asked_big} then "
           f"{asked_small})", *ceiling_why,
           f"ceilings: copy buffers {copy_bytes / 2**20:.0f} MiB, matmul {matmul} (asked "
           f"{sizes.copy_bytes / 2**20:.0f} MiB, {sizes.matmul})"]
    return replace(sizes, model=model, batch=batch, isolation_batches=isolation, copy_bytes=copy_bytes,
                   matmul=matmul), why


# ---------------------------------------------------------------- ceilings

# A measured roof's lowest share of its datasheet figure: cuBLAS reaches 65-100% of the fp32 figure on a
# large square product (GA102 parts, A10 and A10G, about 65%: their sheet counts FP32 lanes SGEMM cannot
# keep busy, hence 0.55), 55-100% of the tensor-core ones, and a device copy 70-100% of the memory's.
RANGE_LOW = {"fp32": 0.55, "tf32": 0.55, "fp16": 0.55, "bf16": 0.55, "bandwidth": 0.70}
RANGE_HIGH = 1.02  # above the datasheet is a measuring error, not a fast part


def expected_range(sheet: dict[str, Any] | None, what: str) -> tuple[float, float] | None:
    """(low, high) in the sheet's units for ``what`` (a dtype or ``bandwidth``); None where the sheet has none."""
    if sheet is None:
        return None
    figure = sheet["bandwidth_bytes_per_s"] if what == "bandwidth" else sheet["peak_flops_per_s"].get(what)
    return (RANGE_LOW[what] * figure, RANGE_HIGH * figure) if figure else None


def judge_roof(what: str, measured: float, sheet: dict[str, Any] | None, why: str = NO_SHEET) -> Check:
    """A ceiling (FLOP/s of a dtype, or bandwidth in bytes/s) against its family's datasheet range."""
    unit = "TB/s" if what == "bandwidth" else "TFLOP/s"
    name = "ceiling copy bandwidth" if what == "bandwidth" else f"ceiling {what}"
    span = expected_range(sheet, what)
    if sheet is None or span is None:
        reason = why if sheet is None else f"its datasheet states no {what}"
        return Check(name, measured / TERA, unit, "within its family's datasheet range", None, reason)
    low, high = span
    return Check(name, measured / TERA, unit, f"{low / TERA:.3g}-{high / TERA:.3g} ({sheet['name']})",
                 low <= measured <= high, f"datasheet {high / RANGE_HIGH / TERA:.3g}")


# Strict fp32 runs at most at its datasheet share of TF32's rate, measured a little above it (cuBLAS
# reaches more of the fp32 figure than of the tensor-core one): below that ratio x STRICT_MARGIN passes.
# A ratio near 1 means TF32 ran for "strict" fp32; where the datasheet limit comes near 1 (GeForce GA102,
# A10G: TF32 no faster than fp32) the ratio cannot tell, and is not judged.
STRICT_MARGIN = 1.6
STRICT_MAX = 0.85


def judge_strict_fp32(fp32_flops: float, tf32_flops: float, sheet: dict[str, Any] | None,
                      why: str = NO_SHEET) -> Check:
    """Strict fp32's ceiling over TF32's: TF32 really off for fp32, judged by the family's datasheet ratio."""
    name, ratio = "strict fp32 / tf32", fp32_flops / tf32_flops if tf32_flops > 0 else math.nan
    peaks = sheet["peak_flops_per_s"] if sheet else {}
    if not (peaks.get("fp32") and peaks.get("tf32")):
        reason = why if sheet is None else "its datasheet states no fp32 and tf32 pair"
        return Check(name, ratio, "ratio", "its datasheet ratio x 1.6", None, reason)
    sheet_ratio = peaks["fp32"] / peaks["tf32"]
    limit = sheet_ratio * STRICT_MARGIN
    expected = f"< {limit:.2f} ({sheet_ratio:.2f} x {STRICT_MARGIN}, {sheet['name']})"
    if limit > STRICT_MAX:
        return Check(name, ratio, "ratio", expected, None, f"datasheet ratio {sheet_ratio:.2f}: TF32 is no faster "
                     "than fp32 on this part, so the ratio cannot show it off")
    return Check(name, ratio, "ratio", expected, ratio < limit, "TF32 really off for fp32")


# ---------------------------------------------------------------- timing, kernels, identity

def judge_step_timer(event_s: float, host_s: float, device: str) -> Check:
    ratio = event_s / host_s if host_s > 0 else math.nan
    return Check(f"step timer on {device}: sum of step_s / host clock", ratio, "ratio", "0.95-1.05",
                 0.95 <= ratio <= 1.05, f"{event_s:.3f} s by events, {host_s:.3f} s by host clock")


def judge_latency(host_s: float, event_s: float) -> Check:
    """Batch-1 latency by benchlib's host clock against CUDA events around the same forward passes."""
    ratio = host_s / event_s if event_s > 0 else math.nan
    return Check("batch-1 latency: host clock / CUDA events", ratio, "ratio", "0.9-1.1", 0.9 <= ratio <= 1.1,
                 f"{host_s * 1e3:.2f} ms by host clock, {event_s * 1e3:.2f} ms by events")


# what CUDA's sync debug mode says of each synchronizing call; its own notice on being switched on ("...is a
# prototype feature and does not yet detect all synchronizing operations") is not a synchronization
SYNC_WARNING = "called a synchronizing cuda operation"


def sync_messages(step: Callable[[], object], steps: int, set_sync_debug_mode: Callable[[Any], None]) -> list[str]:
    """The warnings CUDA's sync debug mode raises over ``steps`` calls of ``step`` (the caller warms up and
    synchronizes first); ``set_sync_debug_mode`` is torch.cuda's, restored to 0 after."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                step()
        finally:
            set_sync_debug_mode(0)
    return [str(w.message) for w in caught]


def judge_syncs(precision: str, messages: list[str], allowed: int = 0, why_allowed: str = "") -> Check:
    """Host synchronizations inside timed steps, from CUDA's sync debug warnings (other warnings ignored):
    none, or ``allowed`` where the optimizer's kernels need them (an fp16 scaler's inf read with a non-fused
    optimizer, one per step; ``optimizer_impl``). More than that is a sync the baseline does not pay."""
    syncs = [m for m in messages if SYNC_WARNING in m.lower()]
    expected = f"<= {allowed} ({why_allowed})" if allowed else "0"
    return Check(f"synchronizations inside {precision} steps", float(len(syncs)), "count", expected,
                 len(syncs) <= allowed, syncs[0][:120] if syncs else "")


NHWC = re.compile(r"nhwc|channels_?last", re.IGNORECASE)
# layout conversions name NHWC too (nchwToNhwc, nhwc_to_nchw, a transpose or copy kernel): they show the
# data was converted, not that a convolution ran in channels_last
CONVERSION = re.compile(r"nchw_?to_?nhwc|nhwc_?to_?nchw|transpose|convert|copy|permute", re.IGNORECASE)


# what cuDNN runs to feed an NCHW tensor to its NHWC kernels and back: a channels_last model needs none
LAYOUT_SWAP = re.compile(r"nchw_?to_?nhwc|nhwc_?to_?nchw", re.IGNORECASE)


def judge_nhwc(kernels: list[str]) -> Check:
    """A channels_last model's convolutions run NHWC kernels, and no kernel swaps the layout between NCHW and NHWC:
    an NCHW model whose convolutions cuDNN runs as NHWC behind a transpose on each side shows NHWC compute kernels
    too, and its swaps give it away."""
    compute = [k for k in kernels if NHWC.search(k) and not CONVERSION.search(k)]
    swaps = [k for k in kernels if LAYOUT_SWAP.search(k)]
    said = (f"{len(swaps)} layout swap kernel(s), e.g. {swaps[0][:80]}: the tensors are NCHW" if swaps else
            compute[0][:100] if compute else f"{len(kernels)} kernels, none an NHWC convolution")
    return Check("NHWC compute kernels and no layout swap in the profile", float(len(compute)), "kernels",
                 ">= 1, no swap", bool(compute) and not swaps, said)


def judge_device_feed(worst_abs_diff: float, seen: int, sent: int) -> Check:
    """Every batch the side stream fed the step equals the CPU's normalisation of it (float32 rounding only)."""
    passed = seen == sent and worst_abs_diff <= 1e-5
    return Check("side-stream feed against CPU normalisation", worst_abs_diff, "max |GPU - CPU|",
                 "<= 1e-5, every batch", passed, f"{seen} of {sent} batches")


def judge_weights_channels_last(channels_last: bool) -> Check:
    return Check("conv weights in channels_last", float(channels_last), "bool", "1", channels_last)


def judge_uuid(torch_uuid: str, nvml_uuid_same_bus: str | None) -> Check:
    """torch's UUID of the device against the UUID NVML gives the GPU on the same PCI bus: found independently
    of the UUID lookup benchlib uses, so a wrong mapping shows."""
    if nvml_uuid_same_bus is None:
        return Check("NVML UUID on torch's PCI bus == torch UUID", None, "bool", "1", None,
                     "torch reports no PCI bus here, or a MIG slice (its UUID is the slice's)")
    same = normal_uuid(nvml_uuid_same_bus) == normal_uuid(torch_uuid)
    return Check("NVML UUID on torch's PCI bus == torch UUID", float(same), "bool", "1", same,
                 f"torch {torch_uuid}, NVML {nvml_uuid_same_bus}")


def judge_nvml_handle(found: int, missing: object) -> Check:
    return Check("NVML handle of the torch device", float(found), "handles", "found by UUID", found >= 1,
                 "" if found else str(missing))


# ---------------------------------------------------------------- precision and memory

SCALER_SKIPS_ALLOWED = 5  # a scale starting at 2**16 may halve a few times before fp16 gradients fit


def scaler_skips(start_scale: float, end_scale: float, growth_interval: int, steps: int) -> int | None:
    """Steps the scaler skipped, from its scale: each skip halves it, and it grows only after
    ``growth_interval`` clean steps in a row (None where it could have grown, so halvings do not count)."""
    if steps >= growth_interval or not (start_scale > 0 and end_scale > 0):
        return None
    return max(0, round(math.log2(start_scale / end_scale)))


def judge_scaler(scale: float, skipped_steps: int | None, steps: int, weights_finite: bool) -> Check:
    """fp16 training works when the weights stay finite, the scale stays a finite number of at least 1 and the
    scaler skipped at most a few steps. NaN weights differ from the weights before and so "moved"; a scale
    halved on every step stays finite and positive: neither passes here."""
    ok: bool | None = weights_finite and math.isfinite(scale) and scale >= 1
    if ok and skipped_steps is None:
        ok = None  # the scale may have grown between skips: their count cannot be told from it
    elif skipped_steps is not None:
        ok = bool(ok) and skipped_steps <= SCALER_SKIPS_ALLOWED
    said = f"scale {scale:g}, {skipped_steps if skipped_steps is not None else '?'} of {steps} steps skipped"
    return Check("GradScaler: finite weights, scale >= 1, few skipped steps",
                 float(skipped_steps) if skipped_steps is not None else None, "skipped steps",
                 f"<= {SCALER_SKIPS_ALLOWED} of {steps}, scale >= 1, weights finite", ok,
                 said if weights_finite else f"{said}; non-finite weights")


# AMP's step over strict fp32's: tensor cores at 3x fp32 or more on the datasheet give well under 0.6;
# where half precision runs at most twice fp32 (A10G, GeForce GA102) or the part is unknown, 0.8 still
# catches autocast that changes nothing (a ratio near 1).
AMP_LIMIT = 0.6
AMP_LIMIT_HALF_RATE = 0.8


def amp_limit(sheet: dict[str, Any] | None) -> float:
    peaks = sheet["peak_flops_per_s"] if sheet else {}
    fp16, fp32 = peaks.get("fp16"), peaks.get("fp32")
    return AMP_LIMIT if fp16 and fp32 and fp16 >= 3 * fp32 else AMP_LIMIT_HALF_RATE


def judge_amp(precision: str, amp_s: float, fp32_s: float, sheet: dict[str, Any] | None) -> Check:
    """A median AMP step against the strict fp32 one on the same model and batch."""
    ratio, limit = amp_s / fp32_s if fp32_s > 0 else math.nan, amp_limit(sheet)
    return Check(f"{precision} step / strict fp32 step", ratio, "ratio", f"< {limit}", ratio < limit,
                 f"{amp_s * 1e3:.1f} ms against {fp32_s * 1e3:.1f} ms")


def judge_memory_floor(floor_bytes: float, peak_bytes: int) -> Check:
    """The preflight's training-memory floor is a floor: a real step's allocated peak is at or above it
    (below it, the preflight could refuse a batch that runs)."""
    ratio = peak_bytes / floor_bytes if floor_bytes > 0 else math.nan
    return Check("allocated training peak / preflight floor", ratio, "ratio", ">= 1", ratio >= 1,
                 f"peak {peak_bytes / 2**20:.0f} MiB, floor {floor_bytes / 2**20:.0f} MiB")


def judge_memory_isolation(in_process_bytes: int, fresh_bytes: int, big: int, small: int) -> Check:
    """A small configuration's reserved peak after a large one, against the same in a fresh process: memory
    the large one left cached would inflate it."""
    ratio = in_process_bytes / fresh_bytes if fresh_bytes > 0 else math.nan
    return Check(f"reserved peak of batch {small} after batch {big} / fresh process", ratio, "ratio", "0.9-1.1",
                 0.9 <= ratio <= 1.1, f"{in_process_bytes / 2**20:.0f} MiB in process, {fresh_bytes / 2**20:.0f} MiB "
                 "fresh")


# ---------------------------------------------------------------- compile

def judge_compile_speed(compiled_s: float, eager_s: float) -> Check:
    ratio = compiled_s / eager_s if eager_s > 0 else math.nan
    return Check("compiled val_s / eager val_s", ratio, "ratio", "<= 1.2", ratio <= 1.2,
                 "shapes warmed before the timed pass")


def judge_compile_fell_back(fell_back: bool) -> Check:
    return Check("compiled row fell back to eager", float(fell_back), "bool", "0", not fell_back)


def judge_recompiles(recompiled: int, configurations: int) -> Check:
    return Check(f"recompiles inside timed regions ({configurations} configurations)", float(recompiled), "count",
                 "0", recompiled == 0)


def judge_fallbacks(fell_back: int, configurations: int) -> Check:
    return Check(f"configurations that fell back to eager (of {configurations})", float(fell_back), "count", "0",
                 fell_back == 0)


# ---------------------------------------------------------------- telemetry

def judge_utilization(util_pct: float | None) -> Check:
    """NVML's utilization of the run's own GPU while training keeps it busy (None: NVML reports none, as on a
    MIG slice)."""
    if util_pct is None:
        return Check("GPU utilization while GPU-bound", None, "%", "> 80", None, "NVML reports no utilization here")
    return Check("GPU utilization while GPU-bound", util_pct, "%", "> 80", util_pct > 80)


def judge_power(power_w: float | None, idle_w: float | None, tdp_w: float | None) -> Check:
    """Mean power while training: above the idle draw, at most the enforced limit (2% for sampling)."""
    if power_w is None or idle_w is None or tdp_w is None:
        return Check("mean power", power_w, "W", "between idle and TDP", None,
                     "NVML reports no power or power limit here (a MIG slice, some vGPUs)")
    return Check("mean power", power_w, "W", f"between idle ({idle_w:.0f} W) and TDP ({tdp_w:.0f} W)",
                 idle_w < power_w <= tdp_w * 1.02)


def judge_energy(gpu_j: float | None, power_w: float | None, seconds: float, method: str | None) -> Check:
    """The energy counter over a window against the sampled mean power times the window (judged only where
    the figure is the counter's: power x time against power x time is 1 by construction)."""
    name = "counter energy / (mean power x window)"
    expected_j = (power_w or 0.0) * seconds
    if gpu_j is None or expected_j <= 0 or method != "nvml-counter":
        return Check(name, None, "ratio", "0.85-1.15", None, f"no energy counter reading here ({method})")
    ratio = gpu_j / expected_j
    return Check(name, ratio, "ratio", "0.85-1.15", 0.85 <= ratio <= 1.15,
                 f"{gpu_j:.0f} J over {seconds:.1f} s by {method}")


TIMM_MIN_RATIO = 0.97


def judge_timm(what: str, ours: float, theirs: float | None) -> Check:
    """benchlib's throughput against timm's benchmark.py on the same timm model, batch, image size and
    precision, medians of fresh processes interleaved: at least ``TIMM_MIN_RATIO`` of timm's."""
    ratio = ours / theirs if theirs else math.nan
    return Check(f"{what} throughput benchlib / timm", ratio, "ratio", f">= {TIMM_MIN_RATIO}",
                 bool(ratio >= TIMM_MIN_RATIO), f"benchlib {ours:.0f}, timm {theirs or math.nan:.0f} samples/s")


# ---------------------------------------------------------------- per-layer table on the GPU

# Winograd F(2x2, 3x3) does 16 multiplies where a 3x3 stride-1 convolution's nominal count says 36: counted at
# the nominal FLOPs such a kernel may run up to 2.25x "above" the roof. Only a layer whose own kernels say
# Winograd is excused, and only that far.
WINOGRAD_MAX_ROOF_FRACTION = 36 / 16
WINOGRAD_KERNEL = re.compile(r"winograd", re.IGNORECASE)
# cuDNN's and cuBLAS's TF32 kernels name it (sm80_xmma_..._tf32f32_..., cutlass_..._tf32_...): under strict
# fp32 any of them is TF32 leaking in
# (and Ampere's cuBLAS ones only by their tile, ampere_s1688gemm_...: TF32 tensor cores on single-precision data)
TF32_KERNEL = re.compile(r"tf32|s1688", re.IGNORECASE)


@dataclass(frozen=True)
class AboveRoof:
    """A compute-bound layer of the table that ran faster than its roof allows, with its kernels."""

    layer: str
    phase: str
    roof_fraction: float
    kernels: tuple[str, ...]

    def winograd(self) -> bool:
        """Excused: one of its own kernels is a Winograd one, and it sits within Winograd's bound."""
        return (any(WINOGRAD_KERNEL.search(k) for k in self.kernels)
                and self.roof_fraction <= WINOGRAD_MAX_ROOF_FRACTION)


def tf32_kernels(kernels: dict[tuple[str, str], list[str]]) -> list[str]:
    """Every ``layer phase: kernel`` whose kernel is a TF32 one (a leak when the row is strict fp32)."""
    return [f"{layer} {phase}: {k}" for (layer, phase), names in sorted(kernels.items()) for k in names
            if TF32_KERNEL.search(k)]


def judge_layers(coverage: float, flops_ratio: float, above: Sequence[AboveRoof],
                 tf32_leaks: Sequence[str] = ()) -> Check:
    """``benchlib layers`` on the GPU: the kernels attributed to layers (optimizer included) take at most the
    wall step (more would be kernels counted twice) and some of it; the layers' FLOPs are the model's within
    1%; no compute-bound layer sits above its roof (a kernel credited to the wrong layer would), except one
    whose own kernels are Winograd's, within Winograd's bound (the shape alone proves nothing); and a strict
    fp32 step runs no TF32 kernel (``tf32_leaks``)."""
    unexplained = [a for a in above if not a.winograd()]
    passed = 0 < coverage <= 1.05 and abs(flops_ratio - 1) <= 0.01 and not unexplained and not tf32_leaks
    said = f"FLOPs {flops_ratio:.4f}x the model's, {len(above)} compute-bound layer(s) above their roof"
    if len(above) > len(unexplained):
        said += f", {len(above) - len(unexplained)} of them Winograd kernels within {WINOGRAD_MAX_ROOF_FRACTION:.2f}x"
    if unexplained:
        said += "; unexplained: " + "; ".join(f"{a.layer} {a.phase} {a.roof_fraction:.2f}x roof "
                                               f"({', '.join(a.kernels[:3]) or 'no kernel named'})"
                                               for a in unexplained)
    if tf32_leaks:
        said += f"; TF32 kernels in strict fp32: {'; '.join(tf32_leaks[:3])}"
    return Check("per-layer table: layers' kernel time / step", coverage, "ratio",
                 "0-1.05, FLOPs within 1% of the model's, no compute-bound layer above its roof unless its "
                 "kernels are Winograd's, no TF32 kernel in strict fp32", passed, said)
