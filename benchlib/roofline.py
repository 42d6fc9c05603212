"""Roofline ceilings: measured on the machine that ran the study, datasheet figures beside them.

A roofline point is only as good as its roof. ``measure_ceilings`` measures the roof here and now
(a large matrix product per dtype for compute, a large device copy for bandwidth), so points are
compared with what this machine, driver and torch build actually reach, not with a marketing number.
``DATASHEET`` holds vendor figures to draw *beside* the measured roof, labelled as such; they are
never a substitute for a measurement. A point above its measured roof is a measurement bug
(wrong FLOP count, bytes undercounted, a missing synchronize), not a finding: ``above_roof`` flags it.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import torch

from .devices import device_name, resolve_hardware, synchronize
from .manifest import machine_name
from .results import atomic_write_text, safe_name
from .timing import NOISY_IQR_OVER_MEDIAN, Samples

MIB = 2**20
GIB = 2**30
TERA = 1e12
GIGA = 1e9

# A timed repeat shorter than this is dominated by clock resolution and launch/synchronize overhead,
# so short operations are looped inside one repeat (synchronized only at the repeat's two ends).
MIN_REPEAT_S = 0.05
MAX_OPS_PER_REPEAT = 10_000

DEFAULT_MATMUL_SIZE = {"cpu": 2048, "cuda": 8192, "mps": 8192}
DEFAULT_COPY_BYTES = {"cpu": 512 * MIB, "cuda": 2 * GIB, "mps": 1 * GIB}
DEFAULT_DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "tf32", "fp16", "bf16"), "mps": ("fp32", "fp16")}

_TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

# ----------------------------------------------------------------------------------------------------------
# The roof itself: pure arithmetic
# ----------------------------------------------------------------------------------------------------------


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite positive number, got {value!r}")


def ridge_point_flops_per_byte(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Intensity where the roof turns from memory-bound to compute-bound (peak / bandwidth)."""
    _check_positive(peak_flops_per_s=peak_flops_per_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s)
    return peak_flops_per_s / bandwidth_bytes_per_s


def roof_flops_per_s(intensity_flops_per_byte: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The attainable FLOP/s at an arithmetic intensity: min(peak, intensity * bandwidth)."""
    _check_positive(intensity_flops_per_byte=intensity_flops_per_byte, peak_flops_per_s=peak_flops_per_s,
                    bandwidth_bytes_per_s=bandwidth_bytes_per_s)
    return min(peak_flops_per_s, intensity_flops_per_byte * bandwidth_bytes_per_s)


def roof_fraction(achieved_flops_per_s: float, intensity_flops_per_byte: float, peak_flops_per_s: float,
                  bandwidth_bytes_per_s: float) -> float:
    """Achieved FLOP/s as a fraction of the roof at its intensity (1.0 = on the roof)."""
    if not (math.isfinite(achieved_flops_per_s) and achieved_flops_per_s >= 0):
        raise ValueError(f"achieved_flops_per_s must be finite and >= 0, got {achieved_flops_per_s!r}")
    return achieved_flops_per_s / roof_flops_per_s(intensity_flops_per_byte, peak_flops_per_s, bandwidth_bytes_per_s)


def above_roof(achieved_flops_per_s: float, intensity_flops_per_byte: float, peak_flops_per_s: float,
               bandwidth_bytes_per_s: float, tolerance: float = 1.05) -> bool:
    """True when a point sits above its roof by more than ``tolerance``: a measurement bug to flag."""
    return roof_fraction(achieved_flops_per_s, intensity_flops_per_byte, peak_flops_per_s,
                         bandwidth_bytes_per_s) > tolerance


# ----------------------------------------------------------------------------------------------------------
# Measuring the ceilings
# ----------------------------------------------------------------------------------------------------------


def _resolve_device(device: str | torch.device) -> torch.device:
    """A present device with an explicit index for CUDA, so results say which GPU ("cuda:0")."""
    dev = torch.device(resolve_hardware(str(device)))
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


@contextlib.contextmanager
def _tf32_matmul(enabled: bool) -> Iterator[None]:
    """Set cuBLAS TF32 for the block and restore the caller's setting, whatever happens inside.

    Uses the legacy ``allow_tf32`` flag (what the manifest records) unless the caller already set the
    newer ``fp32_precision`` API: torch refuses to read the legacy flag once the two are mixed.
    """
    matmul = torch.backends.cuda.matmul
    try:
        attr, before, value = "allow_tf32", matmul.allow_tf32, enabled
    except RuntimeError:
        attr, before, value = "fp32_precision", matmul.fp32_precision, "tf32" if enabled else "ieee"
    setattr(matmul, attr, value)
    try:
        yield
    finally:
        setattr(matmul, attr, before)


def _precision_context(dtype_name: str, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """fp32 is measured with TF32 off and tf32 with it on, so the two figures differ by their meaning."""
    if device.type == "cuda" and dtype_name in ("fp32", "tf32"):
        return _tf32_matmul(dtype_name == "tf32")
    return contextlib.nullcontext()


def _dtype_unsupported_reason(dtype_name: str, device: torch.device) -> str | None:
    """Why a dtype cannot be measured here (None when it can): checked by trying a small product."""
    if dtype_name not in _TORCH_DTYPES:
        return f"unknown dtype '{dtype_name}' (known: {', '.join(_TORCH_DTYPES)})"
    if dtype_name == "tf32" and device.type != "cuda":
        return "tf32 is a CUDA tensor-core mode"
    if dtype_name == "tf32" and torch.cuda.get_device_capability(device) < (8, 0):
        return "tf32 needs compute capability 8.0+ (it would silently measure fp32)"
    try:
        a = torch.ones(64, 64, dtype=_TORCH_DTYPES[dtype_name], device=device)
        (a @ a).sum().item()
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        return f"a {dtype_name} matmul does not run on {device}: {exc}"
    return None


def _time_per_op_s(op: Callable[[], object], device: torch.device, repeats: int, warmup: int) -> tuple[list[float], int]:
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


def _measure_matmul(dtype_name: str, n: int, device: torch.device, repeats: int, warmup: int) -> tuple[list[float], int]:
    """Seconds per product ``C = A @ B`` (square, size n) in ``dtype_name``; C is preallocated."""
    dtype = _TORCH_DTYPES[dtype_name]
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)
    with _precision_context(dtype_name, device):
        return _time_per_op_s(lambda: torch.matmul(a, b, out=c), device, repeats, warmup)


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
                     repeats: int = 5, warmup: int = 2) -> dict[str, Any]:
    """Measure this machine's compute ceiling per dtype and its memory bandwidth (a JSON-ready dict).

    Compute: median FLOP/s of a square matmul per dtype. Bandwidth: median (read + written) bytes/s of a
    large device copy. Default dtypes that do not run here are left out and listed in ``skipped_dtypes``;
    dtypes asked for explicitly must run (ValueError otherwise).
    """
    dev = _resolve_device(device)
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    n = int(matmul_size or DEFAULT_MATMUL_SIZE[dev.type])
    n_bytes = int(copy_bytes or DEFAULT_COPY_BYTES[dev.type])
    if n < 1 or n_bytes < 1:
        raise ValueError(f"matmul_size and copy_bytes must be positive, got {n} and {n_bytes}")

    skipped: dict[str, str] = {}
    if dtypes is None:
        chosen = []
        for name in DEFAULT_DTYPES[dev.type]:
            reason = _dtype_unsupported_reason(name, dev)
            if reason is None:
                chosen.append(name)
            else:
                skipped[name] = reason
    else:
        chosen = list(dict.fromkeys(dtypes))
        for name in chosen:
            reason = _dtype_unsupported_reason(name, dev)
            if reason is not None:
                raise ValueError(reason)

    samples: dict[str, list[float]] = {}
    peak_flops_per_s: dict[str, float] = {}
    products_per_repeat: dict[str, int] = {}
    for name in chosen:
        per_product_s, products_per_repeat[name] = _measure_matmul(name, n, dev, repeats, warmup)
        samples[f"matmul_{name}_s"] = per_product_s
        peak_flops_per_s[name] = matmul_flops(n) / Samples.of(per_product_s).median
    if dev.type == "cuda":
        torch.cuda.empty_cache()

    per_copy_s, copies_per_repeat = _measure_copy(n_bytes, dev, repeats, warmup)
    samples["copy_s"] = per_copy_s
    bandwidth_bytes_per_s = 2 * n_bytes / Samples.of(per_copy_s).median
    if dev.type == "cuda":
        torch.cuda.empty_cache()

    iqr = {key: _iqr_over_median(values) for key, values in samples.items()}
    return {
        "device": str(dev),
        "device_name": device_name(dev),
        "peak_flops_per_s": peak_flops_per_s,
        "bandwidth_bytes_per_s": bandwidth_bytes_per_s,
        "ridge_point_flops_per_byte": {k: ridge_point_flops_per_byte(v, bandwidth_bytes_per_s)
                                       for k, v in peak_flops_per_s.items()},
        "samples": samples,
        "iqr_over_median": iqr,
        "noisy": sorted(k for k, v in iqr.items() if v > NOISY_IQR_OVER_MEDIAN),
        "skipped_dtypes": skipped,
        "matmul_size": n,
        "matmul_products_per_repeat": products_per_repeat,
        "copy_bytes": n_bytes,
        "copies_per_repeat": copies_per_repeat,
        "repeats": repeats,
        "warmup": warmup,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "measured_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "method": (
            f"compute: C = A @ B, square n={n}, {matmul_flops(n)} FLOPs (2*n^3) per product, C preallocated; "
            f"{warmup} warmup products, then {repeats} timed repeats, each synchronized at both ends and looping "
            f"enough products to last >= {MIN_REPEAT_S} s; a sample is one repeat's seconds / its products; "
            "peak = FLOPs / median sample. CUDA fp32 with TF32 off, tf32 with TF32 on (setting restored). "
            f"bandwidth: dst.copy_(src) of {n_bytes} bytes, moved = read + written = {2 * n_bytes} bytes per copy, "
            "timed the same way; bandwidth = bytes moved / median sample."
        ),
    }


# ----------------------------------------------------------------------------------------------------------
# Datasheet figures (NOT measured)
# ----------------------------------------------------------------------------------------------------------
# Vendor-published peak figures, DENSE only: where a sheet prints the "with sparsity" number (A100 and
# later), the dense figure is half of it. Tensor-core figures are for fp32 accumulation where a card
# differs (GeForce runs fp16 with fp32 accumulate at half the fp16-accumulate rate); that is the mode a
# torch matmul uses. A dtype absent from an entry is one the vendor does not state for that part.
# These are drawn beside measured roofs, labelled "datasheet"; a device we are not sure of is omitted.

DATASHEET: dict[str, dict[str, Any]] = {
    "NVIDIA T4": {
        "peak_flops_per_s": {"fp32": 8.1 * TERA, "fp16": 65 * TERA},
        "bandwidth_bytes_per_s": 320 * GIGA,
        "source": "vendor datasheet (NVIDIA T4 datasheet; fp16 = mixed-precision tensor cores)",
    },
    "NVIDIA P100 (PCIe 16GB)": {
        "peak_flops_per_s": {"fp32": 9.3 * TERA, "fp16": 18.7 * TERA},
        "bandwidth_bytes_per_s": 732 * GIGA,
        "source": "vendor datasheet (NVIDIA Tesla P100 PCIe datasheet; no tensor cores)",
    },
    "NVIDIA V100 (SXM2)": {
        "peak_flops_per_s": {"fp32": 15.7 * TERA, "fp16": 125 * TERA},
        "bandwidth_bytes_per_s": 900 * GIGA,
        "source": "vendor datasheet (NVIDIA Tesla V100 datasheet, SXM2; fp16 = tensor performance)",
    },
    "NVIDIA A100 (SXM4 80GB)": {
        "peak_flops_per_s": {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "fp16": 312 * TERA, "bf16": 312 * TERA},
        "bandwidth_bytes_per_s": 2039 * GIGA,
        "source": "vendor datasheet (NVIDIA A100 datasheet, SXM4 80GB; dense tensor-core figures)",
    },
    "NVIDIA H100 (SXM5)": {
        "peak_flops_per_s": {"fp32": 67 * TERA, "tf32": 494.7 * TERA, "fp16": 989.4 * TERA, "bf16": 989.4 * TERA},
        "bandwidth_bytes_per_s": 3.35 * TERA,
        "source": "vendor datasheet (NVIDIA H100 datasheet / Hopper whitepaper, SXM5; dense = half the sparsity figure)",
    },
    "NVIDIA H200 (SXM)": {
        "peak_flops_per_s": {"fp32": 67 * TERA, "tf32": 494.7 * TERA, "fp16": 989.4 * TERA, "bf16": 989.4 * TERA},
        "bandwidth_bytes_per_s": 4.8 * TERA,
        "source": "vendor datasheet (NVIDIA H200 datasheet, SXM; dense = half the sparsity figure)",
    },
    "NVIDIA L4": {
        "peak_flops_per_s": {"fp32": 30.3 * TERA, "tf32": 60 * TERA, "fp16": 121 * TERA, "bf16": 121 * TERA},
        "bandwidth_bytes_per_s": 300 * GIGA,
        "source": "vendor datasheet (NVIDIA L4 datasheet; dense = half the sparsity figure)",
    },
    "NVIDIA RTX A6000": {
        "peak_flops_per_s": {"fp32": 38.7 * TERA, "tf32": 77.4 * TERA, "fp16": 154.8 * TERA, "bf16": 154.8 * TERA},
        "bandwidth_bytes_per_s": 768 * GIGA,
        "source": "vendor datasheet (NVIDIA RTX A6000 datasheet / Ampere GA102 whitepaper; dense tensor figures)",
    },
    "NVIDIA GeForce RTX 3090": {
        "peak_flops_per_s": {"fp32": 35.6 * TERA, "tf32": 35.6 * TERA, "fp16": 71 * TERA, "bf16": 71 * TERA},
        "bandwidth_bytes_per_s": 936 * GIGA,
        "source": "vendor datasheet (NVIDIA Ampere GA102 whitepaper; dense tensor figures, fp32 accumulate)",
    },
    "NVIDIA GeForce RTX 4090": {
        "peak_flops_per_s": {"fp32": 82.6 * TERA, "tf32": 82.6 * TERA, "fp16": 165.2 * TERA, "bf16": 165.2 * TERA},
        "bandwidth_bytes_per_s": 1008 * GIGA,
        "source": "vendor datasheet (NVIDIA Ada Lovelace whitepaper; dense tensor figures, fp32 accumulate)",
    },
    "NVIDIA GeForce GTX 1660 Ti": {
        "peak_flops_per_s": {"fp32": 5.4 * TERA},
        "bandwidth_bytes_per_s": 288 * GIGA,
        "source": "vendor datasheet (NVIDIA spec page: 1536 CUDA cores x 1770 MHz boost x 2; 12 Gbps x 192-bit)",
    },
    "Apple M1": {
        "peak_flops_per_s": {"fp32": 2.6 * TERA},
        "bandwidth_bytes_per_s": 68.25 * GIGA,
        "source": "vendor datasheet (Apple M1 announcement, 8-core GPU; LPDDR4X-4266 x 128-bit)",
    },
    "Apple M2": {
        "peak_flops_per_s": {"fp32": 3.6 * TERA},
        "bandwidth_bytes_per_s": 100 * GIGA,
        "source": "vendor datasheet (Apple M2 announcement, 10-core GPU)",
    },
    # "Apple M3 Pro" is omitted: Apple states its bandwidth (150 GB/s) but no GPU FLOP/s figure.
}

# How a torch device name maps to an entry: each pattern must also reject the sibling parts with other
# figures (H100 PCIe/NVL, A100 40GB/PCIe, V100 PCIe, RTX 3090 Ti, L40, M1 Pro/Max/Ultra, ...).
_DATASHEET_PATTERNS: dict[str, re.Pattern[str]] = {
    "NVIDIA T4": re.compile(r"\bT4\b"),
    "NVIDIA P100 (PCIe 16GB)": re.compile(r"\bP100\b.*\bPCI-?E\b.*\b16\s?GB\b"),
    "NVIDIA V100 (SXM2)": re.compile(r"\bV100\b.*\bSXM2\b"),
    "NVIDIA A100 (SXM4 80GB)": re.compile(r"\bA100\b.*\bSXM4?\b.*\b80\s?GB\b"),
    "NVIDIA H100 (SXM5)": re.compile(r"\bH100\b(?!.*\b(PCIE|NVL)\b)"),
    "NVIDIA H200 (SXM)": re.compile(r"\bH200\b(?!.*\b(NVL|PCIE)\b)"),
    "NVIDIA L4": re.compile(r"\bL4\b"),
    "NVIDIA RTX A6000": re.compile(r"\bRTX\s+A6000\b"),
    "NVIDIA GeForce RTX 3090": re.compile(r"\bRTX\s+3090\b(?!.*\b(TI|LAPTOP)\b)"),
    "NVIDIA GeForce RTX 4090": re.compile(r"\bRTX\s+4090\b(?!\s*D\b)(?!.*\bLAPTOP\b)"),
    "NVIDIA GeForce GTX 1660 Ti": re.compile(r"\bGTX\s+1660\s+TI\b(?!.*\b(MAX-Q|LAPTOP)\b)"),
    "Apple M1": re.compile(r"\bAPPLE\s+M1\b(?!\s*(PRO|MAX|ULTRA)\b)"),
    "Apple M2": re.compile(r"\bAPPLE\s+M2\b(?!\s*(PRO|MAX|ULTRA)\b)"),
}


def datasheet_for(device_name: str) -> dict[str, Any] | None:
    """The datasheet entry for a torch device name ("NVIDIA H100 80GB HBM3", "Tesla T4"), or None.

    The returned copy carries ``"name"`` (the DATASHEET key) so a plot can label the roof it draws.
    """
    text = " ".join(device_name.replace("_", " ").split()).upper()
    for key, entry in DATASHEET.items():
        pattern = _DATASHEET_PATTERNS.get(key)
        if text == key.upper() or (pattern is not None and pattern.search(text)):
            return {"name": key, **json.loads(json.dumps(entry))}
    return None


# ----------------------------------------------------------------------------------------------------------
# Ceilings on disk
# ----------------------------------------------------------------------------------------------------------


def _json_ready(value: Any) -> Any:
    """Non-finite floats become null (JSON has no NaN), recursively."""
    if isinstance(value, Mapping):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def ceilings_path(results_dir: Path, machine: str, device: str) -> Path:
    """Where the ceilings of one device of one machine live: one file each, so writers never collide."""
    return Path(results_dir) / "ceilings" / f"{safe_name(machine)}__{safe_name(device)}.json"


def save_ceilings(ceilings: Mapping[str, Any], results_dir: Path) -> Path:
    """Write measured ceilings to ``results_dir/ceilings/<machine>__<device>.json`` atomically."""
    machine = str(ceilings.get("machine") or machine_name())
    data = {**_json_ready(dict(ceilings)), "machine": machine}
    data.pop("path", None)
    path = ceilings_path(Path(results_dir), machine, str(ceilings["device"]))
    atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
    return path


def _read_ceilings(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("peak_flops_per_s"), dict) \
            or not isinstance(data.get("bandwidth_bytes_per_s"), (int, float)) or "device" not in data:
        raise ValueError("not a benchlib ceilings file")
    return data


def load_ceilings(results_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every saved ceilings file under the given results folders (each gains "machine" and "path").

    A folder without ceilings gives none; unreadable or foreign files are skipped with a warning naming them.
    """
    found: list[dict[str, Any]] = []
    for d in results_dirs:
        d = Path(d)
        if not d.is_dir():
            raise FileNotFoundError(f"results folder '{d}' does not exist")
        for path in sorted((d / "ceilings").glob("*.json")):
            try:
                data = _read_ceilings(path)
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                warnings.warn(f"skipping unreadable ceilings file {path}: {exc}", stacklevel=2)
                continue
            data["machine"] = data.get("machine") or path.stem.split("__", 1)[0]
            data["path"] = str(path)
            found.append(data)
    return found


def roof_dtype(precision: str, device_type: str, tf32: bool) -> str:
    """The ceiling a configuration runs under: its compute dtype (fp32 matmuls run as tf32 when enabled)."""
    if precision in ("amp_fp16", "fp16"):
        return "fp16"
    if precision in ("amp_bf16", "bf16"):
        return "bf16"
    return "tf32" if device_type == "cuda" and tf32 else "fp32"


def ensure_ceilings(results_dir: Path, device: str | torch.device) -> dict[str, Any]:
    """This machine's ceilings for ``device`` from ``results_dir``, measured and saved on first use."""
    dev = str(_resolve_device(device))
    path = ceilings_path(Path(results_dir), machine_name(), dev)
    if path.exists():
        try:
            return _read_ceilings(path)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            warnings.warn(f"re-measuring ceilings: unreadable file {path}: {exc}", stacklevel=2)
    ceilings = measure_ceilings_robust(dev)
    save_ceilings(ceilings, Path(results_dir))
    return {**ceilings, "machine": machine_name()}


def best_of(attempts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Merge ceiling measurements: per figure, the attempt with the highest median wins.

    A ceiling is what the machine can do; a median taken while something else loaded it is lower,
    never higher, so the highest of a few medians is the better estimate of the roof.
    """
    best = dict(attempts[0])
    best["peak_flops_per_s"] = {}
    for dtype in {d for a in attempts for d in a["peak_flops_per_s"]}:
        values = [a["peak_flops_per_s"][dtype] for a in attempts if a["peak_flops_per_s"].get(dtype)]
        if values:
            best["peak_flops_per_s"][dtype] = max(values)
    best["bandwidth_bytes_per_s"] = max(a["bandwidth_bytes_per_s"] for a in attempts)
    best["ridge_point_flops_per_byte"] = {d: p / best["bandwidth_bytes_per_s"] for d, p in best["peak_flops_per_s"].items()}
    best["attempts"] = len(attempts)
    best["attempt_peaks_flops_per_s"] = [a["peak_flops_per_s"] for a in attempts]
    best["attempt_bandwidths_bytes_per_s"] = [a["bandwidth_bytes_per_s"] for a in attempts]
    return best


def measure_ceilings_robust(device: str | torch.device, max_attempts: int = 3, **kwargs: Any) -> dict[str, Any]:
    """Measure, and re-measure while a figure is noisy (IQR/median > 10%), up to ``max_attempts``; merge with best_of."""
    attempts = [measure_ceilings(device, **kwargs)]
    while attempts[-1].get("noisy") and len(attempts) < max_attempts:
        attempts.append(measure_ceilings(device, **kwargs))
    return best_of(attempts)


def place_on_roof(achieved_flops_per_s: float | None, intensity_flops_per_byte: float | None,
                  ceilings: Mapping[str, Any], dtype: str) -> dict[str, Any]:
    """Roof at the point's intensity, the fraction of it achieved, and the above-roof flag.

    Empty values (None) where the point or the dtype's ceiling is missing: never a made-up roof.
    """
    peak = ceilings.get("peak_flops_per_s", {}).get(dtype)
    bandwidth = ceilings.get("bandwidth_bytes_per_s")
    values = (achieved_flops_per_s, intensity_flops_per_byte, peak, bandwidth)
    if any(v is None or not math.isfinite(v) or v <= 0 for v in values):
        return {"roof_flops_per_s": None, "fraction": None, "above": None}
    roof = roof_flops_per_s(intensity_flops_per_byte, peak, bandwidth)
    return {"roof_flops_per_s": roof, "fraction": achieved_flops_per_s / roof,
            "above": above_roof(achieved_flops_per_s, intensity_flops_per_byte, peak, bandwidth)}
