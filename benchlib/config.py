"""Typed run and study configuration, loaded from YAML and validated before any work starts.

A study file is flat: the grid keys (``hardware``, ``models``, ``batch_sizes``) plus any run setting
(the fields of :class:`RunSettings`). Every bad value is refused with one line naming the file, the
key and what is allowed (:class:`ConfigError`, exit code 2).
"""
from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from .datasets import DATASETS, DATASETS_NEEDING_PATH, check_data_path
from .devices import HARDWARE_CHOICES, is_valid_hardware_name, resolve_hardware
from .errors import BenchlibError, ConfigError
from .models import MODELS

OPTIMIZERS = ("sgd", "adam")
PRECISIONS = ("fp32", "amp_fp16", "amp_bf16")
MEMORY_FORMATS = ("nchw", "channels_last")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
QUANTIZATIONS = ("none", "dynamic", "static_int8")
DIGITS_TRAIN_SAMPLES = 1437
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_FLOAT_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _f(default: Any, help: str, **checks: Any) -> Any:
    return field(default=default, metadata={"help": help, **checks})


@dataclass(frozen=True)
class RunSettings:
    """Everything one configuration needs besides hardware, model and batch size."""

    dataset: str = _f("digits", "data set", choices=DATASETS)
    data_path: str | None = _f(None, "folder of the data set on disk (cifar10, tinyimagenet, imagefolder)")
    image_size: int = _f(32, "square input size in pixels", min=8, max=1024)
    train_subset: int | None = _f(None, "train on a seeded random subset of this many images", min=1)
    test_subset: int | None = _f(None, "evaluate on a seeded random subset of this many images", min=1)
    synthetic_samples: int = _f(1024, "samples per epoch of the synthetic data set", min=1)
    synthetic_classes: int = _f(10, "classes of the synthetic data set", min=2)
    augment: bool = _f(True, "training augmentation where the data set defines one")
    num_workers: int = _f(0, "DataLoader worker processes", min=0, max=256)
    pin_memory: bool = _f(False, "DataLoader pin_memory")
    persistent_workers: bool = _f(False, "keep DataLoader workers between epochs (needs num_workers > 0)")
    pretrained: bool = _f(False, "start from torchvision's ImageNet weights (transfer learning)")
    freeze_backbone: bool = _f(False, "train only the new classifier head (needs pretrained)")
    weights_path: str | None = _f(None, "local .pth state_dict to use instead of the torch hub cache")
    optimizer: str = _f("sgd", "optimizer", choices=OPTIMIZERS)
    lr: float = _f(0.01, "learning rate", min_exclusive=0.0, max=10.0)
    momentum: float = _f(0.9, "SGD momentum", min=0.0, max_exclusive=1.0)
    weight_decay: float = _f(5e-4, "weight decay", min=0.0, max=1.0)
    epochs: int = _f(1, "training epochs", min=1, max=10_000)
    max_train_batches: int | None = _f(None, "cap on training batches per epoch", min=1)
    train_steps: int | None = _f(None, "train exactly this many timed steps (after warmup), across epochs as needed", min=1)
    warmup_steps: int = _f(5, "first training steps left out of the step statistics", min=0)
    infer_warmup_batches: int = _f(10, "inference batches run before latency is timed", min=0)
    latency_repeats: int = _f(50, "timed inference repeats at batch 1 and at the working batch", min=3)
    seed: int = _f(0, "random seed for weights, data order and subsets", min=0)
    threads: int | None = _f(None, "torch intra-op threads (default: the CPUs this process may use)", min=1, max=1024)
    interop_threads: int | None = _f(None, "torch inter-op threads", min=1, max=1024)
    telemetry: bool = _f(True, "sample CPU/GPU telemetry in a background thread while measuring")
    telemetry_interval_s: float = _f(0.1, "seconds between telemetry samples (CPU, memory, GPU via NVML)",
                                     min=0.01, max=60.0)
    memory_limit_bytes: int | None = _f(None, "CPU memory ceiling: a configuration whose RSS passes it is recorded as oom", min=1)
    precision: str = _f("fp32", "numeric precision (amp_*: autocast; fp16 training with a gradient scaler)",
                        choices=PRECISIONS)
    tf32: bool = _f(False, "TF32 matmuls and convolutions on CUDA")
    memory_format: str = _f("nchw", "memory format of weights and inputs", choices=MEMORY_FORMATS)
    compile: str = _f("off", "torch.compile mode (compile time is its own column, compile_s)", choices=COMPILE_MODES)
    quantization: str = _f("none", "post-training quantization for CPU inference, on the trained fp32 weights",
                           choices=QUANTIZATIONS)
    cudnn_benchmark: bool = _f(False, "cuDNN autotuning of convolution algorithms")
    variant: str = _f("default", "name of the variant this configuration measures", pattern=_NAME_RE)


@dataclass(frozen=True)
class RunConfig:
    """One measured configuration: a point of the study grid."""

    study: str
    hardware: str
    model: str
    batch_size: int
    settings: RunSettings = field(default_factory=RunSettings)
    swept: tuple[str, ...] = ()
    world_size: int = 1  # data-parallel processes (torchrun); the batch size is global

    @property
    def run_id(self) -> str:
        """Stable id of the configuration on one machine: a re-run replaces its row (and resume skips it).

        A data-parallel run has its own id (``__ddpN``), so rows for 1 and N processes sit side by side.
        """
        s = self.settings
        extra = "".join(f"__{k}{getattr(s, k)}" for k in self.swept)
        ddp = f"__ddp{self.world_size}" if self.world_size > 1 else ""
        return (f"{self.hardware.replace(':', '')}__{self.model}__bs{self.batch_size}__{s.variant}__{s.precision}"
                f"{extra}{ddp}__seed{s.seed}")


def expand_variants(study: str, hardware: str, model: str, batch_sizes: Sequence[int], settings: RunSettings,
                    sweep: Mapping[str, Sequence[Any]] | None, repeats: int, variants: Sequence[Any]) -> list[RunConfig]:
    """Every configuration of the pair: per variant (a tuned one brings its own batch size), the grid."""
    from .variants import apply_variant

    out = []
    for v in variants or (None,):
        point = apply_variant(settings, v) if v is not None else settings
        tuned_batch = v.settings_overrides.get("batch_size") if v is not None else None
        out += expand_configs(study, hardware, model, (tuned_batch,) if tuned_batch else batch_sizes, point, sweep, repeats)
    return out


def expand_configs(study: str, hardware: str, model: str, batch_sizes: Sequence[int], settings: RunSettings,
                   sweep: Mapping[str, Sequence[Any]] | None = None, repeats: int = 1) -> list[RunConfig]:
    """Every configuration of one hardware/model pair: batch sizes x swept settings x repeat seeds."""
    sweep = dict(sweep or {})
    keys = tuple(sweep)
    out = []
    for b in batch_sizes:
        for values in itertools.product(*(sweep[k] for k in keys)):
            point = dataclasses.replace(settings, **dict(zip(keys, values)))
            for r in range(repeats):
                out.append(RunConfig(study, hardware, model, b, dataclasses.replace(point, seed=settings.seed + r), keys))
    return out


@dataclass(frozen=True)
class StudyConfig:
    """A grid of hardware x model x batch size sharing one set of run settings."""

    study: str
    hardware: tuple[str, ...]
    models: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    settings: RunSettings
    description: str = ""
    source: str = "<memory>"
    sweep: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    repeats: int = 1
    profile: bool = False
    tune: Any = None  # benchlib.tuning.TuneSpec when the file has a tune: section

    def pairs(self) -> list[tuple[str, str]]:
        """(hardware, model) pairs in the order they run: one notebook each."""
        return [(h, m) for h in self.hardware for m in self.models]

    variants: tuple[Any, ...] = ()  # benchlib.variants.Variant, one set of configurations each

    def configs(self, hardware: str, model: str) -> list[RunConfig]:
        return expand_variants(self.study, hardware, model, self.batch_sizes, self.settings, dict(self.sweep),
                               self.repeats, self.variants)

    def all_configs(self) -> list[RunConfig]:
        return [c for h, m in self.pairs() for c in self.configs(h, m)]


# ---------------------------------------------------------------- validation

_SETTING_FIELDS = {f.name: f for f in dataclasses.fields(RunSettings)}
_GRID_KEYS = {"study": "name of the study (results/<study>/)", "description": "free text",
              "hardware": f"list of: {HARDWARE_CHOICES}", "models": f"list of: {', '.join(MODELS)}",
              "batch_sizes": "list of integers >= 1, or {from: A, to: B} for the doubling range A, 2A, ... <= B",
              "sweep": "mapping of run settings to lists of values, e.g. {threads: [1, 2]}",
              "repeats": "integer >= 1: run each configuration with this many seeds (seed, seed+1, ...)",
              "profile": "true or false: also profile each pair (torch.profiler) at its first batch size",
              "variants": "list of variant presets (cpu-default, cpu-quantized, gpu-amp, ...) or mappings of knobs",
              "tuned_params_dir": "folder with the <cpu|gpu>-tuned.yaml files benchlib tune exported (default results/tuned)",
              "tune": "mapping for benchlib tune: n_trials, objective, pruning, epochs_per_trial, seed, search_space"}
ALLOWED_KEYS: tuple[str, ...] = tuple(_GRID_KEYS) + tuple(_SETTING_FIELDS)


def _describe(meta: Mapping[str, Any], base: str) -> str:
    if "choices" in meta:
        return "one of: " + ", ".join(meta["choices"])
    parts = []
    if "min" in meta:
        parts.append(f">= {meta['min']}")
    if "min_exclusive" in meta:
        parts.append(f"> {meta['min_exclusive']}")
    if "max" in meta:
        parts.append(f"<= {meta['max']}")
    if "max_exclusive" in meta:
        parts.append(f"< {meta['max_exclusive']}")
    if "pattern" in meta:
        parts.append("letters, digits, '.', '_' and '-'")
    return f"{base} " + " and ".join(parts) if parts else base


def _base_type(tp: Any) -> tuple[type, bool]:
    """(underlying type, whether None is allowed) of an annotation such as ``int | None``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


_TYPE_WORD = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def coerce_setting(name: str, value: Any, where: str) -> Any:
    """Check one run setting against its type, choices and range; return the typed value."""
    if name not in _SETTING_FIELDS:
        raise ConfigError(_unknown_key_message(name, where))
    f = _SETTING_FIELDS[name]
    hints = typing.get_type_hints(RunSettings)
    tp, optional = _base_type(hints[name])
    meta = f.metadata
    allowed = _describe(meta, _TYPE_WORD[tp]) + (" or null" if optional else "")
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{where}: key '{name}' must not be empty; allowed: {allowed}")
    if tp is float and isinstance(value, str) and _FLOAT_RE.match(value.strip()):
        value = float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
    ok_type = (isinstance(value, bool) if tp is bool else
               isinstance(value, int) and not isinstance(value, bool) if tp is int else
               isinstance(value, (int, float)) and not isinstance(value, bool) if tp is float else
               isinstance(value, str))
    if not ok_type:
        raise ConfigError(f"{where}: key '{name}' is {value!r} ({type(value).__name__}); allowed: {allowed}")
    if tp is float:
        value = float(value)
    bad = (("choices" in meta and value not in meta["choices"])
           or ("min" in meta and value < meta["min"])
           or ("min_exclusive" in meta and value <= meta["min_exclusive"])
           or ("max" in meta and value > meta["max"])
           or ("max_exclusive" in meta and value >= meta["max_exclusive"])
           or ("pattern" in meta and not meta["pattern"].match(value)))
    if bad:
        raise ConfigError(f"{where}: key '{name}' is {value!r}; allowed: {allowed}")
    return value


def _unknown_key_message(key: str, where: str) -> str:
    close = difflib.get_close_matches(key, ALLOWED_KEYS, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"{where}: unknown key '{key}'{hint}; allowed keys: {', '.join(ALLOWED_KEYS)}"


def _as_list(value: Any, key: str, where: str, item_type: type, describe: str) -> list[Any]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ConfigError(f"{where}: key '{key}' is an empty list; allowed: {describe}")
    for item in items:
        if not isinstance(item, item_type) or isinstance(item, bool):
            raise ConfigError(f"{where}: key '{key}' has {item!r} ({type(item).__name__}); allowed: {describe}")
    if len(set(items)) != len(items):
        raise ConfigError(f"{where}: key '{key}' lists a value twice: {items}")
    return items


def settings_from_mapping(values: Mapping[str, Any], where: str) -> RunSettings:
    """Validated RunSettings from a mapping of setting names (unknown names refused)."""
    typed = {k: coerce_setting(k, v, where) for k, v in values.items()}
    settings = RunSettings(**typed)
    _check_settings_consistency(settings, where)
    return settings


def _check_settings_consistency(s: RunSettings, where: str) -> None:
    if s.freeze_backbone and not s.pretrained:
        raise ConfigError(f"{where}: key 'freeze_backbone' is true but 'pretrained' is false; allowed: freeze_backbone only with pretrained: true")
    if s.persistent_workers and s.num_workers == 0:
        raise ConfigError(f"{where}: key 'persistent_workers' is true with num_workers 0; allowed: persistent_workers only with num_workers >= 1")
    if s.dataset in DATASETS_NEEDING_PATH and not s.data_path:
        raise ConfigError(f"{where}: key 'data_path' is missing; dataset '{s.dataset}' needs the folder that holds it on disk")
    if s.dataset in DATASETS_NEEDING_PATH:
        try:
            check_data_path(s.dataset, s.data_path)
        except BenchlibError as exc:
            raise ConfigError(f"{where}: key 'data_path': {exc}") from exc


def train_samples_known(s: RunSettings) -> int | None:
    """Training-set size where it is known without reading the data."""
    if s.dataset == "synthetic":
        return s.synthetic_samples
    if s.dataset == "digits":
        return min(s.train_subset or DIGITS_TRAIN_SAMPLES, DIGITS_TRAIN_SAMPLES)
    return s.train_subset


def check_batch_sizes(batch_sizes: list[int], s: RunSettings, where: str) -> None:
    samples = train_samples_known(s)
    for b in batch_sizes:
        if b < 1:
            raise ConfigError(f"{where}: key 'batch_sizes' has {b}; allowed: integers >= 1")
        if samples is not None and b > samples:
            raise ConfigError(
                f"{where}: key 'batch_sizes' has {b}, larger than the {samples} training samples of "
                f"'{s.dataset}'; allowed: 1..{samples}")


def parse_study(raw: Any, where: str, *, check_devices: bool = True) -> StudyConfig:
    """Validate a parsed YAML document into a StudyConfig."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of keys at the top level, got {type(raw).__name__}; allowed keys: {', '.join(ALLOWED_KEYS)}")
    for key in raw:
        if not isinstance(key, str) or key not in ALLOWED_KEYS:
            raise ConfigError(_unknown_key_message(str(key), where))
    for key in ("study", "hardware", "models", "batch_sizes"):
        if key not in raw:
            raise ConfigError(f"{where}: key '{key}' is missing; allowed: {_GRID_KEYS[key]}")
    study = raw["study"]
    if not isinstance(study, str) or not _NAME_RE.match(study):
        raise ConfigError(f"{where}: key 'study' is {study!r}; allowed: a name of letters, digits, '.', '_' and '-'")
    hardware = _as_list(raw["hardware"], "hardware", where, str, HARDWARE_CHOICES)
    for h in hardware:
        if not is_valid_hardware_name(h):
            raise ConfigError(f"{where}: key 'hardware' has '{h}'; allowed: {HARDWARE_CHOICES}")
        if check_devices:
            try:
                resolve_hardware(h)
            except BenchlibError as exc:
                raise ConfigError(f"{where}: key 'hardware': {exc}") from exc
    models = _as_list(raw["models"], "models", where, str, ", ".join(MODELS))
    for m in models:
        if m not in MODELS:
            raise ConfigError(f"{where}: key 'models' has '{m}'; allowed: {', '.join(MODELS)}")
    batch_sizes = _batch_sizes(raw["batch_sizes"], where)
    settings = settings_from_mapping({k: v for k, v in raw.items() if k in _SETTING_FIELDS}, where)
    check_batch_sizes(batch_sizes, settings, where)
    sweep = _sweep(raw.get("sweep", {}), settings, where)
    repeats = raw.get("repeats", 1)
    if not isinstance(repeats, int) or isinstance(repeats, bool) or not 1 <= repeats <= 100:
        raise ConfigError(f"{where}: key 'repeats' is {repeats!r}; allowed: an integer from 1 to 100")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where}: key 'description' is {type(description).__name__}; allowed: a string")
    profile = raw.get("profile", False)
    if not isinstance(profile, bool):
        raise ConfigError(f"{where}: key 'profile' is {profile!r}; allowed: true or false")
    tune = None
    if "tune" in raw:
        from .tuning import parse_tune  # optuna is imported only by files that tune

        tune = parse_tune(raw["tune"], where)
    variants: tuple[Any, ...] = ()
    if "variants" in raw:
        from .variants import parse_variant

        specs = raw["variants"]
        if not isinstance(specs, list) or not specs:
            raise ConfigError(f"{where}: key 'variants' is {specs!r}; allowed: {_GRID_KEYS['variants']}")
        tuned_dir = raw.get("tuned_params_dir")
        variants = tuple(parse_variant(v, where, tuned_params_dir=Path(tuned_dir) if tuned_dir else None) for v in specs)
        names = [v.name for v in variants]
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}: key 'variants' names a variant twice: {names}")
    return StudyConfig(study, tuple(hardware), tuple(models), tuple(batch_sizes), settings, description, where,
                       tuple((k, tuple(v)) for k, v in sweep.items()), repeats, profile, tune, variants)


def doubling_range(start: int, stop: int) -> list[int]:
    """start, 2*start, 4*start, ... up to stop (inclusive)."""
    out, b = [], start
    while b <= stop:
        out.append(b)
        b *= 2
    return out


def _batch_sizes(value: Any, where: str) -> list[int]:
    if isinstance(value, dict):
        if set(value) != {"from", "to"}:
            raise ConfigError(f"{where}: key 'batch_sizes' range has keys {sorted(value)}; allowed: {{from: A, to: B}}")
        a, b = value["from"], value["to"]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (a, b)) or a > b:
            raise ConfigError(f"{where}: key 'batch_sizes' range from {a!r} to {b!r}; allowed: integers 1 <= from <= to")
        return doubling_range(a, b)
    return _as_list(value, "batch_sizes", where, int, "integers >= 1")


_NOT_SWEEPABLE = {"dataset", "data_path", "variant", "seed"}


def _sweep(value: Any, settings: RunSettings, where: str) -> dict[str, list[Any]]:
    """Validated sweep: each key a run setting, each value a non-empty list of valid values."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: key 'sweep' is {type(value).__name__}; allowed: {_GRID_KEYS['sweep']}")
    out: dict[str, list[Any]] = {}
    for key, values in value.items():
        if key not in _SETTING_FIELDS or key in _NOT_SWEEPABLE:
            allowed = ", ".join(k for k in _SETTING_FIELDS if k not in _NOT_SWEEPABLE)
            raise ConfigError(f"{where}: key 'sweep.{key}' cannot be swept; allowed: {allowed} (seeds: use 'repeats')")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: key 'sweep.{key}' is {values!r}; allowed: a non-empty list of values")
        typed = [coerce_setting(key, v, where) for v in values]
        if len(set(map(repr, typed))) != len(typed):
            raise ConfigError(f"{where}: key 'sweep.{key}' lists a value twice: {values}")
        for v in typed:
            _check_settings_consistency(dataclasses.replace(settings, **{key: v}), where)
        out[key] = typed
    return out


def load_study(path: str | Path, *, check_devices: bool = True) -> StudyConfig:
    """Read and validate a study params file (safe YAML: data only, no code)."""
    p = Path(path)
    where = str(path)
    if not p.is_file():
        raise ConfigError(f"{where}: params file not found; give a YAML file such as params/default.yaml")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML{at}: {problem}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not a text file ({exc.reason}); expected UTF-8 YAML") from exc
    return parse_study(raw, where, check_devices=check_devices)


def settings_as_params(s: RunSettings) -> dict[str, Any]:
    """The settings as plain values: the papermill parameters of the benchmark notebook."""
    return dataclasses.asdict(s)


def setting_names() -> list[str]:
    return list(_SETTING_FIELDS)
