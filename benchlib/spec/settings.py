"""Run settings and configurations: what one measured configuration is, validated, torch-free.

A :class:`RunSettings` is everything a configuration needs besides hardware, model and batch size; it
holds its variant's :class:`~benchlib.spec.knobs.Knobs`. Outside the package settings are flat (a study
file's keys, a notebook's parameters, ``--set KEY=VALUE``): :func:`settings_from_mapping` and
:meth:`RunSettings.flat` convert, and knob names route into ``knobs``.

A :class:`RunConfig` is one point of a study grid. Its ``run_id`` is readable and covers every setting
that changes the measurement: the readable parts plus a digest of all other settings, so a changed image
size, learning rate or data set is a new configuration, never a silent reuse of an old row.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..store.identity import digest, run_id_of, settings_digest_of, stable_flat
from .fields import Rule, coerce, rules_of, setting
from .knobs import Knobs
from .vocab import (
    DATASETS,
    DATASETS_NEEDING_PATH,
    DIGITS_TRAIN_SAMPLES,
    NAME_PATTERN,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PYTHON_DATA_REF,
    did_you_mean,
)

# Bounds of what the consumers take: numpy seeds below 2**32; counts a run could finish; a byte count that
# fits a 64-bit integer with room to spare.
SEED_MAX = 2**32 - 1
LARGE = 10**9
MANY = 10**6
# The run id's tail (see RunConfig.run_id): what repeats of one configuration differ in (the seed), and what a
# comparison of two folders of other settings leaves out (the settings digest and the seed; DDP kept).
SEED_SUFFIX = re.compile(r"__seed\d+$")
DIGEST_AND_SEED = re.compile(r"__[0-9a-f]{8}((?:__ddp\d+)?)__seed\d+$")


@dataclass(frozen=True)
class RunSettings:
    """Everything one configuration needs besides hardware, model and batch size."""

    dataset: str = setting("digits", "data set", choices=DATASETS, pattern=PYTHON_DATA_REF)
    data_path: str | None = setting(None, "folder of the data set on disk (cifar10, tinyimagenet, imagefolder)")
    image_size: int = setting(32, "square input size in pixels", min=8, max=1024)
    train_subset: int | None = setting(None, "train on a seeded random subset of this many images", min=1, max=LARGE)
    test_subset: int | None = setting(None, "evaluate on a seeded random subset of this many images", min=1, max=LARGE)
    synthetic_samples: int = setting(1024, "samples per epoch of the synthetic data set", min=1, max=LARGE)
    synthetic_classes: int = setting(10, "classes of the synthetic data set", min=2, max=1_000_000)
    augment: bool = setting(True, "training augmentation where the data set defines one")
    num_workers: int = setting(0, "DataLoader worker processes", min=0, max=256)
    pin_memory: bool | None = setting(None, "DataLoader pin_memory (default: on for CUDA, so host-to-device "
                                            "copies run asynchronously)")
    persistent_workers: bool = setting(False, "keep DataLoader workers between epochs (needs num_workers > 0)")
    pretrained: bool = setting(False, "start from torchvision's ImageNet weights (transfer learning)")
    freeze_backbone: bool = setting(False, "train only the new classifier head (needs pretrained)")
    weights_path: str | None = setting(None, "local .pth state_dict to use instead of the torch hub cache")
    optimizer: str = setting("sgd", "optimizer", choices=OPTIMIZERS)
    optimizer_impl: str = setting("auto", "optimizer kernels: auto (fused on CUDA, SGD's momentum zeroed before "
                                          "its first step; torch's default elsewhere), for_loop, foreach, fused",
                                  choices=OPTIMIZER_IMPLS)
    lr: float = setting(0.01, "learning rate", min_exclusive=0.0, max=10.0)
    momentum: float = setting(0.9, "SGD momentum", min=0.0, max_exclusive=1.0)
    nesterov: bool = setting(False, "SGD with Nesterov momentum (what timm's 'sgd' optimizer trains)")
    weight_decay: float = setting(5e-4, "weight decay", min=0.0, max=1.0)
    grad_scaler: bool = setting(True, "amp_fp16 training scales the loss (torch's GradScaler) so small gradients do "
                                      "not underflow; false trains it unscaled, as timm's benchmark.py does")
    epochs: int = setting(1, "training epochs", min=1, max=10_000)
    max_train_batches: int | None = setting(None, "cap on training batches per epoch", min=1, max=LARGE)
    train_steps: int | None = setting(None, "train exactly this many timed steps (after warmup), across epochs as "
                                            "needed", min=1, max=LARGE)
    warmup_steps: int = setting(5, "first training steps left out of the step statistics", min=0, max=MANY)
    infer_warmup_batches: int = setting(10, "inference batches run before latency is timed", min=0, max=MANY)
    latency_repeats: int = setting(50, "timed inference repeats: the least latency passes at batch 1 and at the "
                                       "working batch, the most throughput repeats", min=3, max=MANY)
    latency_budget_s: float = setting(2.0, "seconds each inference series may go on past its minimum: latency "
                                           "(batch 1, working batch) past latency_repeats toward the samples an "
                                           "honest p99 needs; throughput past 5 repeats toward latency_repeats "
                                           "(0: the minimums only)", min=0.0, max=3600.0)
    seed: int = setting(0, "random seed for weights, data order and subsets", min=0, max=SEED_MAX)
    telemetry: bool = setting(True, "sample CPU/GPU telemetry in a background thread while measuring")
    telemetry_interval_s: float = setting(0.1, "seconds between telemetry samples (CPU, memory, GPU via NVML)",
                                          min=0.01, max=60.0)
    interference_threshold_pct: float = setting(10.0, "flag a row interfered when other processes (or the "
                                                      "hypervisor) took more than this % of the usable CPUs",
                                                min=0.0, max=100.0)
    memory_limit_bytes: int | None = setting(None, "CPU memory ceiling: a configuration whose RSS passes it is "
                                                   "recorded as oom", min=1, max=2**50)
    variant: str = setting("default", "name of the variant this configuration measures", pattern=NAME_PATTERN)
    knobs: Knobs = field(default_factory=Knobs)

    def flat(self) -> dict[str, Any]:
        """Every setting by its flat name (knobs included): a notebook's parameters, a study file's keys."""
        out = {name: getattr(self, name) for name in _PLAIN_RULES}
        out.update({name: getattr(self.knobs, name) for name in _KNOB_RULES})
        return out

    def get(self, name: str) -> Any:
        """One setting by its flat name."""
        return getattr(self.knobs if name in _KNOB_RULES else self, name)

    def updated(self, **values: Any) -> RunSettings:
        """A copy with settings replaced by their flat names (values already validated)."""
        unknown = [k for k in values if k not in SETTING_RULES]
        if unknown:
            raise TypeError(f"unknown settings: {', '.join(unknown)}")
        knobs = {k: v for k, v in values.items() if k in _KNOB_RULES}
        plain = {k: v for k, v in values.items() if k in _PLAIN_RULES}
        return dataclasses.replace(self, **plain, knobs=dataclasses.replace(self.knobs, **knobs))

    @classmethod
    def of(cls, **values: Any) -> RunSettings:
        """Settings from flat names (unvalidated: for code and tests; files go through settings_from_mapping)."""
        return cls().updated(**values)


_PLAIN_RULES: dict[str, Rule] = rules_of(RunSettings)
_KNOB_RULES: dict[str, Rule] = rules_of(Knobs)
SETTING_RULES: dict[str, Rule] = {**_PLAIN_RULES, **_KNOB_RULES}
KNOB_NAMES: tuple[str, ...] = tuple(_KNOB_RULES)


def setting_names() -> list[str]:
    """Every flat setting name, in the order notebooks and docs list them."""
    return list(SETTING_RULES)


def setting_defaults() -> dict[str, Any]:
    """Every flat setting with its default (what a notebook's parameters cell declares)."""
    return RunSettings().flat()


# ---------------------------------------------------------------- identity

# Settings that only change how an already trained model is evaluated or observed: trained weights are
# shared across configurations that differ only in these.
INFERENCE_ONLY_SETTINGS: tuple[str, ...] = ("quantization", "variant", "latency_repeats", "latency_budget_s",
                                            "infer_warmup_batches",
                                            "telemetry", "telemetry_interval_s",
                                            "interference_threshold_pct")


def settings_digest(s: RunSettings) -> str:
    """Hash of every setting except the seed: repeats of a configuration share it, any other change does not."""
    return settings_digest_of(s.flat())


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
        """Stable, readable id of the configuration on one machine (resume reuses a row only under it).

        ``cpu__resnet18__bs64__default__fp32__<digest>__seed0``: hardware, model, batch size, variant,
        precision, the values of swept settings, the settings digest, ``__ddpN`` for N data-parallel
        processes, and the seed.
        """
        s = self.settings
        return run_id_of(self.hardware, self.model, self.batch_size, s.variant, s.knobs.precision,
                         [(k, s.get(k)) for k in self.swept], settings_digest(s), self.world_size, s.seed)

    @property
    def training_key(self) -> str:
        """Hash of everything that decides the trained weights (inference-only settings left out)."""
        flat = {k: v for k, v in stable_flat(self.settings.flat()).items() if k not in INFERENCE_ONLY_SETTINGS}
        return digest({"model": self.model, "hardware": self.hardware, "batch_size": self.batch_size,
                       "world_size": self.world_size, "settings": flat}, length=16)

    @property
    def evaluates_only(self) -> bool:
        """True for a configuration that evaluates trained weights but trains nothing (a quantized one)."""
        return not self.settings.knobs.trains


# ---------------------------------------------------------------- validation

def unknown_key_message(key: str, where: str, allowed: Sequence[str], what: str = "key") -> str:
    return f"{where}: unknown {what} '{key}'{did_you_mean(key, allowed)}; allowed keys: {', '.join(allowed)}"


def coerce_setting(name: str, value: Any, where: str, *, allowed_keys: Sequence[str] | None = None,
                   what: str = "key") -> Any:
    """Check one flat run setting against its type, choices and range; return the typed value (``what``: how the
    caller names it, a study file's ``key`` or a notebook's ``parameter``)."""
    if name not in SETTING_RULES:
        raise ConfigError(unknown_key_message(name, where, allowed_keys or setting_names(), what))
    return coerce(name, value, SETTING_RULES[name], where, what=what)


def settings_from_mapping(values: Mapping[str, Any], where: str, *,
                          allowed_keys: Sequence[str] | None = None) -> RunSettings:
    """Validated RunSettings from a mapping of flat setting names (unknown names refused)."""
    typed = {k: coerce_setting(k, v, where, allowed_keys=allowed_keys) for k, v in values.items()}
    settings = RunSettings().updated(**typed)
    check_consistency(settings, where)
    return settings


CUDA_GRAPH_COMPILE_MODES = frozenset({"reduce-overhead", "max-autotune"})  # they capture CUDA graphs


def compile_warm_calls(mode: str) -> int:
    """Untimed calls a compile mode needs before its calls run what it compiled: one to compile, and with CUDA
    graphs one more to record the graph (replays start at the third)."""
    return 2 if mode in CUDA_GRAPH_COMPILE_MODES else 1


def check_consistency(s: RunSettings, where: str) -> None:
    """Settings that are each valid but not together."""
    if s.freeze_backbone and not s.pretrained:
        raise ConfigError(f"{where}: key 'freeze_backbone' is true but 'pretrained' is false; allowed: "
                          "freeze_backbone only with pretrained: true")
    if s.nesterov and (s.optimizer != "sgd" or s.momentum <= 0):
        raise ConfigError(f"{where}: key 'nesterov' is true with optimizer {s.optimizer}, momentum {s.momentum}; "
                          "allowed: nesterov only with optimizer sgd and momentum > 0")
    if s.persistent_workers and s.num_workers == 0:
        raise ConfigError(f"{where}: key 'persistent_workers' is true with num_workers 0; allowed: "
                          "persistent_workers only with num_workers >= 1")
    if s.knobs.compile != "off":
        warm = compile_warm_calls(s.knobs.compile)
        why = ("the first call compiles, the second records the CUDA graph that later calls replay" if warm > 1 else
               "the first call compiles")
        for key in ("warmup_steps", "infer_warmup_batches"):
            if getattr(s, key) < warm:
                raise ConfigError(f"{where}: key '{key}' is {getattr(s, key)} with compile '{s.knobs.compile}'; "
                                  f"allowed: {key} >= {warm} with that mode ({why}; timing them would put "
                                  "compilation in the measured times)")
    if s.dataset in DATASETS_NEEDING_PATH and not s.data_path:
        raise ConfigError(f"{where}: key 'data_path' is missing; dataset '{s.dataset}' needs the folder that holds "
                          "it on disk")


def train_samples_known(s: RunSettings) -> int | None:
    """Training-set size where it is known without reading the data."""
    if s.dataset == "synthetic":
        return s.synthetic_samples
    if s.dataset == "digits":
        return min(s.train_subset or DIGITS_TRAIN_SAMPLES, DIGITS_TRAIN_SAMPLES)
    return s.train_subset


def check_batch_sizes(batch_sizes: Sequence[int], s: RunSettings, where: str) -> None:
    samples = train_samples_known(s)
    for b in batch_sizes:
        if b < 1:
            raise ConfigError(f"{where}: key 'batch_sizes' has {b}; allowed: integers >= 1")
        if samples is not None and b > samples:
            raise ConfigError(f"{where}: key 'batch_sizes' has {b}, larger than the {samples} training samples of "
                              f"'{s.dataset}'; allowed: 1..{samples}")
