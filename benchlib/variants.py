"""Hardware-specific variants of a configuration: precision, TF32, memory format, compilation, quantization.

A :class:`Variant` names a set of knobs that change *how* a model runs, not what it computes, so
variants can be compared on the same weights, data and number of steps (MEASUREMENT.md, "Compare
fairly"). Quantized variants are inference-only: they are evaluated on the weights trained by the
matching training variant, never on a second training.

Compile time is its own figure, never part of a step time. ``torch.compile`` is lazy: the work
happens in the first call(s) of the compiled model, so :func:`compile_model` returns almost
immediately and the caller derives ``compile_s`` from the warmup steps with :func:`compile_seconds`.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import re
import shutil
import sys
import time
import types
import typing
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import torch
import yaml
from torch import nn

from .config import coerce_setting
from .errors import ConfigError

PRECISIONS = ("fp32", "amp_fp16", "amp_bf16")
MEMORY_FORMATS = ("nchw", "channels_last")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
QUANTIZATIONS = ("none", "dynamic", "static_int8")
TUNED_SUFFIX = "-tuned"
DEFAULT_TUNED_PARAMS_DIR = Path("results") / "tuned"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # the rule config applies to study and variant names
_AUTOCAST_DTYPES = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}


def _f(default: Any, help: str, **checks: Any) -> Any:
    return field(default=default, metadata={"help": help, **checks})


@dataclass(frozen=True)
class Variant:
    """One named combination of knobs; ``settings_overrides`` carries tuned run settings (lr, batch_size...)."""

    name: str = _f("default", "name of the variant (part of the run id)", pattern=_NAME_RE)
    precision: str = _f("fp32", "numeric precision (autocast for amp_*)", choices=PRECISIONS)
    tf32: bool = _f(False, "allow TF32 in CUDA matmuls and cuDNN convolutions (False: strict fp32)")
    memory_format: str = _f("nchw", "memory format of weights and inputs", choices=MEMORY_FORMATS)
    compile: str = _f("off", "torch.compile mode", choices=COMPILE_MODES)
    quantization: str = _f("none", "post-training quantization (inference only, CPU)", choices=QUANTIZATIONS)
    threads: int | None = _f(None, "torch intra-op threads (default: the CPUs this process may use)", min=1, max=1024)
    interop_threads: int | None = _f(None, "torch inter-op threads", min=1, max=1024)
    cudnn_benchmark: bool = _f(False, "let cuDNN autotune convolution algorithms (torch.backends.cudnn.benchmark)")
    settings_overrides: dict[str, Any] = field(default_factory=dict, compare=False, hash=False,
                                               metadata={"help": "run settings a tuning study chose"})

    @property
    def trains(self) -> bool:
        """Quantized variants are inference-only: evaluated on the weights of the matching training variant."""
        return self.quantization == "none"


# The *-tuned entries are placeholders: parse_variant reads their knobs from the tuning study's export.
PRESETS: dict[str, Variant] = {v.name: v for v in (
    Variant("cpu-default"),
    Variant("cpu-quantized", quantization="static_int8"),
    Variant("cpu-compiled", compile="default"),
    Variant("cpu-tuned"),
    Variant("gpu-default"),
    Variant("gpu-amp", precision="amp_fp16", cudnn_benchmark=True),
    Variant("gpu-bf16", precision="amp_bf16"),
    Variant("gpu-channels-last", memory_format="channels_last"),
    Variant("gpu-compiled", compile="default"),
    Variant("gpu-tuned"),
)}

# ---------------------------------------------------------------- parsing

_KNOB_FIELDS = {f.name: f for f in dataclasses.fields(Variant) if f.name != "settings_overrides"}


def _base_type(tp: Any) -> tuple[type, bool]:
    """(underlying type, whether None is allowed) of an annotation such as ``int | None``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(tp) if a is not type(None)), True
    return tp, False


_KNOB_TYPES = {name: _base_type(tp) for name, tp in typing.get_type_hints(Variant).items() if name in _KNOB_FIELDS}
# Run settings a tuned variant may override: RunSettings fields (checked by config) plus the batch size.
_SETTING_OVERRIDES = ("lr", "optimizer", "weight_decay", "momentum")
_OVERRIDES = _SETTING_OVERRIDES + ("batch_size",)
VARIANT_KEYS: tuple[str, ...] = tuple(_KNOB_FIELDS) + tuple(_OVERRIDES)
_TYPE_WORD = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _allowed_text(meta: Mapping[str, Any], tp: type, optional: bool) -> str:
    if "choices" in meta:
        text = "one of: " + ", ".join(meta["choices"])
    elif "pattern" in meta:
        text = "a name of letters, digits, '.', '_' and '-'"
    else:
        bounds = [f">= {meta['min']}" if "min" in meta else "", f"<= {meta['max']}" if "max" in meta else ""]
        text = " ".join([_TYPE_WORD[tp], " and ".join(b for b in bounds if b)]).strip()
    return text + (" or null" if optional else "")


def _is_type(value: Any, tp: type) -> bool:
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, tp)


def _coerce_knob(key: str, value: Any, where: str) -> Any:
    f = _KNOB_FIELDS[key]
    tp, optional = _KNOB_TYPES[key]
    allowed = _allowed_text(f.metadata, tp, optional)
    if value is None and optional:
        return None
    meta = f.metadata
    ok = (_is_type(value, tp)
          and ("choices" not in meta or value in meta["choices"])
          and ("pattern" not in meta or meta["pattern"].match(value))
          and ("min" not in meta or value >= meta["min"])
          and ("max" not in meta or value <= meta["max"]))
    if not ok:
        raise ConfigError(f"{where}: variant key '{key}' is {value!r}; allowed: {allowed}")
    return value


def _coerce_override(key: str, value: Any, where: str) -> Any:
    if key in _SETTING_OVERRIDES:
        return coerce_setting(key, value, where)
    if not _is_type(value, int) or value < 1:
        raise ConfigError(f"{where}: variant key '{key}' is {value!r}; allowed: an integer >= 1")
    return value


def _unknown_key(key: Any, where: str) -> ConfigError:
    close = difflib.get_close_matches(str(key), VARIANT_KEYS, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"{where}: unknown variant key '{key}'{hint}; allowed keys: {', '.join(VARIANT_KEYS)}")


def _variant_from_mapping(values: Mapping[str, Any], where: str, *, name: str | None = None) -> Variant:
    """Validate knobs and run-setting overrides; ``name`` (when given) wins over a name in the mapping."""
    knobs: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    for key, value in values.items():
        if key in _KNOB_FIELDS:
            knobs[key] = _coerce_knob(key, value, where)
        elif key in _OVERRIDES:
            overrides[key] = _coerce_override(key, value, where)
        else:
            raise _unknown_key(key, where)
    if name is not None:
        knobs["name"] = name
    elif "name" not in knobs:
        raise ConfigError(f"{where}: variant key 'name' is missing; allowed: a name of letters, digits, '.', '_' and '-'")
    return Variant(**knobs, settings_overrides=overrides)


def tuned_params_path(preset: str, tuned_params_dir: Path | None = None) -> Path:
    """Where a tuning study exports the parameters of ``preset`` (e.g. results/tuned/cpu-tuned.yaml)."""
    return Path(tuned_params_dir if tuned_params_dir is not None else DEFAULT_TUNED_PARAMS_DIR) / f"{preset}.yaml"


def _load_tuned(preset: str, where: str, tuned_params_dir: Path | None) -> Variant:
    """Read ``<kind>-tuned.yaml``: a flat YAML mapping of knobs and run settings chosen by ``benchlib tune``."""
    path = tuned_params_path(preset, tuned_params_dir)
    if not path.is_file():
        raise ConfigError(f"{where}: no tuning study has exported {preset} yet: run `benchlib tune PARAMS.yaml` "
                          f"first (looked for {path})")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of variant keys, got {type(raw).__name__}; "
                          f"allowed keys: {', '.join(VARIANT_KEYS)}")
    raw = {k: v for k, v in raw.items() if k != "source"}  # provenance written by benchlib tune
    return _variant_from_mapping(raw, str(path), name=preset)


def parse_variant(spec: str | Mapping[str, Any], where: str, *, tuned_params_dir: Path | None = None) -> Variant:
    """A preset name (``cpu-quantized``), a ``*-tuned`` preset read from its exported file, or a mapping of knobs."""
    if isinstance(spec, str):
        if spec.endswith(TUNED_SUFFIX) and spec in PRESETS:
            return _load_tuned(spec, where, tuned_params_dir)
        if spec in PRESETS:
            return PRESETS[spec]
        close = difflib.get_close_matches(spec, PRESETS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"{where}: key 'variant' is '{spec}'{hint}; allowed: {', '.join(PRESETS)} "
                          f"or a mapping of keys {', '.join(VARIANT_KEYS)}")
    if isinstance(spec, Mapping):
        return _variant_from_mapping(spec, where)
    raise ConfigError(f"{where}: key 'variant' is {spec!r} ({type(spec).__name__}); allowed: {', '.join(PRESETS)} "
                      f"or a mapping of keys {', '.join(VARIANT_KEYS)}")


# ---------------------------------------------------------------- what runs where


def _inductor_cxx() -> str:
    """The C++ compiler inductor looks for on CPU: $CXX, else g++ (clang++ on macOS)."""
    return os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")


def _cpu_bf16_supported() -> bool:
    """oneDNN's own check for bf16 kernels; True when torch cannot tell (run it rather than refuse)."""
    check = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else True
    except RuntimeError:
        return True


def _cuda_bf16_supported() -> bool:
    if not torch.cuda.is_available():
        return True  # cannot check without the device: let the run decide
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # older torch without the keyword
        return bool(torch.cuda.is_bf16_supported())


def _mps_bf16_supported() -> bool:
    if not torch.backends.mps.is_available():
        return True
    return bool(torch.backends.mps.is_macos_or_newer(14, 0))


def _precision_reason(v: Variant, device_type: str, training: bool) -> str | None:
    if v.precision == "amp_fp16":
        if device_type == "cpu" and training:
            return "fp16 autocast training is not supported on CPU; use amp_bf16"
        if device_type == "mps" and training:
            return "fp16 autocast training on MPS is not measured (benchlib's GradScaler runs on CUDA only); use fp32"
    if v.precision == "amp_bf16":
        if device_type == "cpu" and not _cpu_bf16_supported():
            return "this CPU has no bf16 kernels (oneDNN reports bf16 unsupported); use fp32"
        if device_type == "cuda" and not _cuda_bf16_supported():
            return "this GPU has no native bf16 (needs compute capability 8.0+); use amp_fp16"
        if device_type == "mps" and not _mps_bf16_supported():
            return "bf16 on MPS needs macOS 14 or newer; use amp_fp16 or fp32"
    return None


def _compile_reason(v: Variant, device_type: str) -> str | None:
    if v.compile == "off":
        return None
    if device_type == "mps":
        return "torch.compile is not run on MPS by benchlib (inductor's Metal backend is a prototype); use compile: off"
    if device_type == "cpu" and shutil.which(_inductor_cxx()) is None:
        return f"torch.compile on CPU needs the C++ compiler inductor uses ({_inductor_cxx()}, or $CXX): not found on PATH"
    if device_type == "cuda" and find_spec("triton") is None:
        return "torch.compile on CUDA needs triton: pip install triton (it ships with the CUDA wheels of torch)"
    return None


def unsupported_reason(v: Variant, device_type: str, *, training: bool) -> str | None:
    """None when the variant runs on ``device_type`` (cpu, cuda, cuda:N, mps); else one line saying why not."""
    device_type = device_type.split(":")[0]
    if v.quantization != "none":
        if device_type != "cpu":
            return "quantized inference runs on CPU only"
        if training:
            return "quantized variants are inference-only: they are evaluated on the weights of the matching training variant"
        engines = torch.backends.quantized.supported_engines
        if not {"x86", "fbgemm", "qnnpack"} & set(engines):
            return f"this torch build has no quantized engine for CPU (supported: {', '.join(engines)})"
    precision = _precision_reason(v, device_type, training)
    if precision:
        return precision
    if v.tf32 and device_type != "cuda":
        return f"tf32 is a CUDA knob: it would be ignored on {device_type}"
    if v.cudnn_benchmark and device_type != "cuda":
        return f"cudnn_benchmark is a CUDA knob: it would be ignored on {device_type}"
    return _compile_reason(v, device_type)


# ---------------------------------------------------------------- applying the knobs


@contextmanager
def precision_context(v: Variant, device: torch.device) -> Iterator[None]:
    """Autocast to fp16/bf16 for ``amp_*`` (forward and loss only; backward runs outside), nothing for fp32."""
    dtype = _AUTOCAST_DTYPES.get(v.precision)
    ctx = torch.autocast(device_type=device.type, dtype=dtype) if dtype is not None else nullcontext()
    with ctx:
        yield


def make_grad_scaler(v: Variant, device: torch.device) -> torch.amp.GradScaler | None:
    """A loss scaler for fp16 training on CUDA (fp16 gradients underflow without one); bf16 needs none."""
    if v.precision == "amp_fp16" and device.type == "cuda":
        return torch.amp.GradScaler("cuda")
    return None


@contextmanager
def backend_flags(v: Variant) -> Iterator[None]:
    """Set TF32 (matmul and cuDNN) and cudnn.benchmark for the duration, then restore the previous values.

    ``tf32=False`` turns TF32 off for cuDNN convolutions too (torch's default allows it there), so an
    fp32 variant is strict fp32.
    """
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    torch.backends.cuda.matmul.allow_tf32 = v.tf32
    torch.backends.cudnn.allow_tf32 = v.tf32
    torch.backends.cudnn.benchmark = v.cudnn_benchmark
    try:
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
         torch.backends.cudnn.benchmark) = saved


def apply_memory_format(model: nn.Module, x: torch.Tensor | None, v: Variant) -> tuple[nn.Module, torch.Tensor | None]:
    """Move 4-D weights (in place) and the 4-D input to channels_last; returns (model, input) to use."""
    if v.memory_format != "channels_last":
        return model, x
    model = model.to(memory_format=torch.channels_last)
    if x is not None and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x


def compile_model(model: nn.Module, v: Variant) -> tuple[nn.Module, float]:
    """(``torch.compile(model, mode=...)`` or the same model, seconds spent here).

    torch.compile is lazy: the seconds returned are only the wrapping (about 0). The compilation
    happens in the first call(s) of the returned model, i.e. inside the warmup steps; derive
    ``compile_s`` from them with :func:`compile_seconds` and keep warmup out of the step statistics.
    A new input shape (a last partial batch, another batch size) compiles again: warm up each shape.
    """
    if v.compile == "off":
        return model, 0.0
    t0 = time.perf_counter()
    compiled = torch.compile(model, mode=v.compile)
    return compiled, time.perf_counter() - t0


def compile_seconds(warmup_step_s: Sequence[float], steady_step_s: float) -> float:
    """Compile time hidden in warmup steps: what each took beyond a steady step (median of timed steps)."""
    return float(sum(max(0.0, t - steady_step_s) for t in warmup_step_s))


_KNOBS_IN_SETTINGS = ("precision", "tf32", "memory_format", "compile", "quantization", "cudnn_benchmark")


def apply_variant(settings: Any, v: Variant) -> Any:
    """RunSettings with the variant's knobs, name, threads and tuned overrides (batch_size stays a grid value)."""
    changes: dict[str, Any] = {k: getattr(v, k) for k in _KNOBS_IN_SETTINGS}
    changes["variant"] = v.name
    if v.threads is not None:
        changes["threads"] = v.threads
    if v.interop_threads is not None:
        changes["interop_threads"] = v.interop_threads
    changes.update({k: val for k, val in v.settings_overrides.items() if k != "batch_size"})
    return dataclasses.replace(settings, **changes)


def variant_of(settings: Any) -> Variant:
    """The Variant a RunSettings carries (its knobs), to apply them while training and measuring."""
    return Variant(name=settings.variant, threads=settings.threads, interop_threads=settings.interop_threads,
                   **{k: getattr(settings, k) for k in _KNOBS_IN_SETTINGS})


def variant_spec(v: Variant) -> dict[str, Any]:
    """A plain mapping that ``parse_variant`` turns back into ``v`` (for notebook parameters)."""
    spec = {k: getattr(v, k) for k in _KNOB_FIELDS}
    spec.update(v.settings_overrides)
    return {k: val for k, val in spec.items() if val is not None}
