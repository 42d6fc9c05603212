"""Named variants of a configuration: presets, knob mappings, and the ``*-tuned`` files tuning exports.

A :class:`Variant` is a name, a set of :class:`~benchlib.spec.knobs.Knobs`, and (for tuned variants) the
run settings a tuning study chose. Applying it to run settings is pure data; what the knobs do to a
model on a device is the engine's business (:mod:`benchlib.engine.knobs`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, first_line
from ..store.layout import tuned_params_dir as default_tuned_dir
from . import yamlfile
from .fields import Rule, coerce
from .knobs import Knobs
from .settings import SETTING_RULES, RunSettings, coerce_setting, unknown_key_message
from .vocab import NAME_PATTERN, NAME_WORDS, did_you_mean

TUNED_SUFFIX = "-tuned"


@dataclass(frozen=True)
class Variant:
    """One named combination of knobs; ``overrides`` carries tuned run settings (lr, batch_size, ...)."""

    name: str = "default"
    knobs: Knobs = field(default_factory=Knobs)
    overrides: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def trains(self) -> bool:
        return self.knobs.trains


def _preset(name: str, **knobs: Any) -> Variant:
    return Variant(name, Knobs(**knobs))


# Every preset of one device runs under the same backend settings, so a preset's speed-up is its own
# knob's: on GPUs cuDNN autotunes (what users run) and fp32 stays strict fp32 (TF32 off).
GPU_BACKEND: dict[str, Any] = {"cudnn_benchmark": True, "tf32": False}

# The *-tuned entries are placeholders: parse_variant reads their knobs from the tuning study's export.
PRESETS: dict[str, Variant] = {v.name: v for v in (
    _preset("cpu-default"),
    _preset("cpu-quantized", quantization="static_int8"),
    _preset("cpu-compiled", compile="default"),
    _preset("cpu-tuned"),
    _preset("gpu-default", **GPU_BACKEND),
    _preset("gpu-amp", precision="amp_fp16", **GPU_BACKEND),
    _preset("gpu-bf16", precision="amp_bf16", **GPU_BACKEND),
    _preset("gpu-channels-last", memory_format="channels_last", **GPU_BACKEND),
    _preset("gpu-compiled", compile="default", **GPU_BACKEND),
    _preset("gpu-tuned", **GPU_BACKEND),
)}

# Run settings a tuned variant may override, plus the batch size (a grid value, not a setting).
SETTING_OVERRIDES: tuple[str, ...] = ("lr", "optimizer", "weight_decay", "momentum")
_NAME_RULE = Rule(str, False, "name of the variant (part of the run id)", pattern=NAME_PATTERN)
_KNOB_NAMES = tuple(f.name for f in dataclasses.fields(Knobs))
VARIANT_KEYS: tuple[str, ...] = ("name", *_KNOB_NAMES, *SETTING_OVERRIDES, "batch_size")


def _coerce_override(key: str, value: Any, where: str) -> Any:
    if key in SETTING_OVERRIDES:
        return coerce_setting(key, value, where)
    return coerce(key, value, Rule(int, False, "batch size a tuning study chose", min=1), where, what="variant key")


def _variant_from_mapping(values: Mapping[str, Any], where: str, *, name: str | None = None) -> Variant:
    """Validate knobs and run-setting overrides; ``name`` (when given) wins over a name in the mapping."""
    knobs: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    given_name = None
    for key, value in values.items():
        if key == "name":
            given_name = coerce(key, value, _NAME_RULE, where, what="variant key")
        elif key in _KNOB_NAMES:
            knobs[key] = coerce(key, value, SETTING_RULES[key], where, what="variant key")
        elif key in SETTING_OVERRIDES or key == "batch_size":
            overrides[key] = _coerce_override(key, value, where)
        else:
            raise ConfigError(unknown_key_message(str(key), where, VARIANT_KEYS, what="variant key"))
    final = name or given_name
    if final is None:
        raise ConfigError(f"{where}: variant key 'name' is missing; allowed: {NAME_WORDS}")
    return Variant(final, Knobs(**knobs), overrides)


def tuned_params_path(preset: str, tuned_dir: Path | None = None) -> Path:
    """Where a tuning study exports the parameters of ``preset`` (e.g. results/tuned/cpu-tuned.yaml)."""
    return Path(tuned_dir if tuned_dir is not None else default_tuned_dir()) / f"{preset}.yaml"


def _load_tuned(preset: str, where: str, tuned_dir: Path | None) -> Variant:
    """Read ``<kind>-tuned.yaml``: a flat YAML mapping of knobs and run settings chosen by ``benchlib tune``."""
    path = tuned_params_path(preset, tuned_dir)
    if not path.is_file():
        raise ConfigError(f"{where}: no tuning study has exported {preset} yet: run `benchlib tune PARAMS.yaml` "
                          f"first (looked for {path})")
    try:
        raw = yamlfile.load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {first_line(exc)}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of variant keys, got {type(raw).__name__}; "
                          f"allowed keys: {', '.join(VARIANT_KEYS)}")
    raw = {k: v for k, v in raw.items() if k != "source"}  # provenance written by benchlib tune
    base = GPU_BACKEND if preset.startswith("gpu-") else {}  # a tuned preset keeps its device's backend settings
    return _variant_from_mapping({**base, **raw}, str(path), name=preset)


def parse_variant(spec: str | Mapping[str, Any], where: str, *, tuned_params_dir: Path | None = None) -> Variant:
    """A preset name (``cpu-quantized``), a ``*-tuned`` preset read from its exported file, or a mapping of keys."""
    if isinstance(spec, str):
        if spec.endswith(TUNED_SUFFIX) and spec in PRESETS:
            return _load_tuned(spec, where, tuned_params_dir)
        if spec in PRESETS:
            return PRESETS[spec]
        raise ConfigError(
            f"{where}: key 'variant' is '{spec}'{did_you_mean(spec, list(PRESETS))}; allowed: {', '.join(PRESETS)} "
            f"or a mapping of keys {', '.join(VARIANT_KEYS)}"
        )
    if isinstance(spec, Mapping):
        return _variant_from_mapping(spec, where)
    raise ConfigError(f"{where}: key 'variant' is {spec!r} ({type(spec).__name__}); allowed: {', '.join(PRESETS)} "
                      f"or a mapping of keys {', '.join(VARIANT_KEYS)}")


def apply_variant(settings: RunSettings, v: Variant) -> RunSettings:
    """Settings with the variant's name, knobs (threads kept where it sets none) and tuned run settings.

    A tuned batch size stays out: it is a grid value (see :meth:`Variant.batch_size`).
    """
    overrides = {k: val for k, val in v.overrides.items() if k != "batch_size"}
    return dataclasses.replace(settings, variant=v.name, knobs=v.knobs.over(settings.knobs)).updated(**overrides)


def tuned_batch_size(v: Variant) -> int | None:
    """The batch size a tuning study chose for this variant, if any."""
    value = v.overrides.get("batch_size")
    return int(value) if value is not None else None


def variant_spec(v: Variant) -> dict[str, Any]:
    """A plain mapping that ``parse_variant`` turns back into ``v`` (for notebook parameters)."""
    spec: dict[str, Any] = {"name": v.name, **dataclasses.asdict(v.knobs), **v.overrides}
    return {k: val for k, val in spec.items() if val is not None}
