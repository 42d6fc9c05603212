"""What a variant's knobs do to a model on a device: autocast, loss scaling, backend flags, memory format, compile.

The knobs themselves are data (:class:`benchlib.spec.knobs.Knobs`); this module applies them, and says in
one line why a combination cannot run on a device (such a configuration is recorded as ``skipped``).

Compile time is its own figure, never part of a step time. ``torch.compile`` is lazy: the work happens in
the first call(s) of the compiled model, so :func:`compile_model` returns almost immediately and the
caller derives ``compile_s`` from the warmup steps with :func:`compile_seconds`.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from importlib.util import find_spec
from typing import cast

import torch
from torch import nn

from ..env.devices import bf16_supported, cpu_model_name
from ..env.gpu import compile_problem, gpu_facts
from ..env.tf32 import tf32
from ..env.threads import choose_threads
from ..spec.knobs import Knobs

_AUTOCAST_DTYPES = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}


def _inductor_cxx() -> str:
    """The C++ compiler inductor looks for on CPU: $CXX, else g++ (clang++ on macOS)."""
    return os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")


def _torch_release() -> tuple[int, int]:
    """(major, minor) of the torch running: features benchlib uses arrived in different releases."""
    major, minor = (int("".join(c for c in part if c.isdigit()) or 0) for part in torch.__version__.split(".")[:2])
    return major, minor


def _precision_reason(v: Knobs, device: str, training: bool) -> str | None:
    device_type = device.split(":")[0]
    if v.precision == "amp_fp16":
        if device_type == "cpu" and training:
            return "fp16 autocast training is not supported on CPU; use amp_bf16"
        if device_type == "mps" and training:
            return "fp16 autocast training on MPS is not measured (benchlib's GradScaler runs on CUDA only); use fp32"
    if v.precision == "amp_bf16":
        if device_type == "cpu" and not bf16_supported("cpu"):
            return f"this CPU ({cpu_model_name()}) has no bf16 kernels (oneDNN reports bf16 unsupported); use fp32"
        if device_type == "cuda" and not bf16_supported(device):
            return f"{device} has no native bf16 (needs compute capability 8.0+); use amp_fp16"
        if device_type == "mps" and not bf16_supported("mps"):
            return "bf16 on MPS needs macOS 14 or newer; use amp_fp16 or fp32"
    if v.precision in _AUTOCAST_DTYPES and device_type == "mps" and _torch_release() < (2, 6):
        return f"autocast on MPS needs torch 2.6 or newer (this is {torch.__version__}); use fp32"
    return None


def _compile_reason(v: Knobs, device: str) -> str | None:
    if v.compile == "off":
        return None
    device_type = device.split(":")[0]
    if device_type == "mps":
        return "torch.compile is not run on MPS by benchlib (inductor's Metal backend is a prototype); use compile: off"
    if device_type == "cpu" and shutil.which(_inductor_cxx()) is None:
        return (
            f"torch.compile on CPU needs the C++ compiler inductor uses ({_inductor_cxx()}, or $CXX): not found on PATH"
        )
    if device_type == "cuda" and find_spec("triton") is None:
        return "torch.compile on CUDA needs triton: pip install triton (it ships with the CUDA wheels of torch)"
    if device_type == "cuda" and torch.cuda.is_available():
        return compile_problem(gpu_facts(torch.device(device).index or 0, free_bytes=0))  # memory not needed:
        # reading it here would leave a CUDA context in a process that only checks
    return None


def unsupported_reason(v: Knobs, device: str, *, training: bool) -> str | None:
    """None when the variant runs on ``device`` (cpu, cuda, cuda:N, mps: the row's own device, whose capability
    decides); else one line saying why not."""
    device_type = device.split(":")[0]
    if v.quantization != "none":
        if device_type != "cpu":
            return "quantized inference runs on CPU only"
        if training:
            return ("quantized variants are inference-only: they are evaluated on the weights of the matching "
                    "training variant")
        engines = torch.backends.quantized.supported_engines
        if not {"x86", "fbgemm", "qnnpack"} & set(engines):
            return f"this torch build has no quantized engine for CPU (supported: {', '.join(engines)})"
    precision = _precision_reason(v, device, training)
    if precision:
        return precision
    # The GPU presets share CUDA backend settings; on MPS they do not apply (the row records them off),
    # on the CPU a variant that asks for them asks for something that cannot happen.
    if v.tf32 and device_type == "cpu":
        return "tf32 is a CUDA knob: it would be ignored on cpu"
    if v.cudnn_benchmark and device_type == "cpu":
        return "cudnn_benchmark is a CUDA knob: it would be ignored on cpu"
    return _compile_reason(v, device)


# ---------------------------------------------------------------- applying the knobs


@contextmanager
def precision_context(v: Knobs, device: torch.device) -> Iterator[None]:
    """Autocast to fp16/bf16 for ``amp_*`` (forward and loss only; backward runs outside), nothing for fp32."""
    dtype = _AUTOCAST_DTYPES.get(v.precision)
    ctx = torch.autocast(device_type=device.type, dtype=dtype) if dtype is not None else nullcontext()
    with ctx:
        yield


def make_grad_scaler(v: Knobs, device: torch.device) -> torch.amp.GradScaler | None:
    """A loss scaler for fp16 training on CUDA (fp16 gradients underflow without one); bf16 needs none."""
    if v.precision == "amp_fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None


@contextmanager
def backend_flags(v: Knobs) -> Iterator[None]:
    """Set TF32 (matmul and cuDNN), cudnn.benchmark and the intra-op threads for the duration, then restore them.

    ``tf32=False`` turns TF32 off for cuDNN convolutions too (torch's default allows it there), so an
    fp32 variant is strict fp32. Threads follow :func:`~benchlib.env.threads.choose_threads` for every
    configuration, so one that sets none does not inherit the count of the one before it.
    """
    benchmark_before, threads_before = torch.backends.cudnn.benchmark, torch.get_num_threads()
    torch.backends.cudnn.benchmark = v.cudnn_benchmark
    torch.set_num_threads(choose_threads(v.threads).threads)
    try:
        with tf32(v.tf32):
            yield
    finally:
        torch.backends.cudnn.benchmark = benchmark_before
        torch.set_num_threads(threads_before)


def apply_memory_format(model: nn.Module, v: Knobs) -> nn.Module:
    """Move 4-D weights (in place) to channels_last when the variant asks; inputs follow in the step."""
    if v.memory_format != "channels_last":
        return model
    return model.to(memory_format=torch.channels_last)


def compile_model(model: nn.Module, v: Knobs) -> tuple[nn.Module, float]:
    """(``torch.compile(model, mode=...)`` or the same model, seconds spent here).

    torch.compile is lazy: the seconds returned are only the wrapping (about 0). The compilation
    happens in the first call(s) of the returned model, i.e. inside the warmup steps; derive
    ``compile_s`` from them with :func:`compile_seconds` and keep warmup out of the step statistics.
    A new input shape (a last partial batch, another batch size) compiles again: warm up each shape.
    """
    if v.compile == "off":
        return model, 0.0
    t0 = time.perf_counter()
    compiled = torch.compile(model, mode=v.compile, dynamic=False)  # static shapes: no dynamic-shape recompile
    return cast(nn.Module, compiled), time.perf_counter() - t0


@dataclass(frozen=True)
class CompileReport:
    """What dynamo did in one configuration: graphs compiled, graph breaks, and whether it gave up."""

    graphs: int
    graph_breaks: int
    fell_back: bool
    reason: str | None


# dynamo's config names of the limits past which a code object is not compiled again and runs eager
DYNAMO_LIMITS = frozenset({"recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                           "accumulated_cache_size_limit"})


class _RecompileLimitHits(logging.Handler):
    """Dynamo's warning that a code object hit its recompile limit, after which it runs eager, silently.

    Every supported torch logs it from ``torch._dynamo.convert_frame`` with the limit's config name as the
    record's first argument (``cache_size_limit`` before torch 2.6, ``recompile_limit`` after); dynamo's
    counters name it only in later versions. The arguments are read, not the message's wording.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        if args and args[0] in DYNAMO_LIMITS:
            limit = f" ({args[1]})" if len(args) > 1 else ""
            self.hits.append(f"dynamo hit config.{args[0]}{limit}: the code object runs eager from there")


_LIMIT_HITS = _RecompileLimitHits()


def reset_compiler() -> None:
    """Forget every compiled graph and dynamo's counters, so each configuration compiles (and counts) afresh."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()
        dynamo.utils.counters.clear()
    _LIMIT_HITS.hits.clear()
    watched = logging.getLogger("torch._dynamo.convert_frame")
    if _LIMIT_HITS not in watched.handlers:
        watched.addHandler(_LIMIT_HITS)


def compile_report() -> CompileReport:
    """Dynamo's counters since :func:`reset_compiler`: a model past its recompile limit runs eager, silently."""
    from torch._dynamo.utils import counters

    frames = counters["frames"]
    gave_up = _LIMIT_HITS.hits
    fell_back = bool(gave_up) or frames.get("ok", 0) == 0
    reason = gave_up[0] if gave_up else ("no frame compiled" if frames.get("ok", 0) == 0 else None)
    return CompileReport(int(counters["stats"].get("unique_graphs", 0)), int(sum(counters["graph_break"].values())),
                         fell_back, reason)


def compile_seconds(warmup_step_s: Sequence[float], steady_step_s: float) -> float:
    """Compile time hidden in warmup steps: what each took beyond a steady step (median of timed steps)."""
    return float(sum(max(0.0, t - steady_step_s) for t in warmup_step_s))

