"""A study file: the grid (hardware x models x batch sizes x variants x swept settings x seeds) and its settings.

A study file is flat YAML: the grid keys plus any run setting. :func:`study_from_file` reads and validates it
without touching torch, devices or data folders; whether the devices are present and the data folders
hold what they should is checked by the preflight (:mod:`benchlib.run.preflight`) before any work starts.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, first_line
from . import yamlfile
from .repeats import AutoRepeats, parse_repeats
from .settings import (
    SETTING_RULES,
    RunConfig,
    RunSettings,
    check_batch_sizes,
    check_consistency,
    coerce_setting,
    settings_from_mapping,
    unknown_key_message,
)
from .tune import TuneSpec, parse_tune
from .variants import Variant, apply_variant, parse_variant, tuned_batch_size
from .vocab import (
    HARDWARE_CHOICES,
    MODEL_FORMS,
    MODELS,
    NAME_MAX_CHARS,
    NAME_PATTERN,
    NAME_WORDS,
    did_you_mean,
    is_valid_hardware_name,
    model_problem,
)

GRID_KEYS: dict[str, str] = {
    "study": "name of the study (results/<study>/)",
    "description": "free text",
    "hardware": f"list of: {HARDWARE_CHOICES}",
    "models": f"list of model references, each {MODEL_FORMS}",
    "batch_sizes": "list of integers >= 1, or {from: A, to: B} for the doubling range A, 2A, ... <= B",
    "sweep": "mapping of run settings to lists of values, e.g. {threads: [1, 2]}",
    "repeats": "integer >= 1: run each configuration with this many seeds (seed, seed+1, ...), each round of seeds "
               "in a fresh process; or auto (or {until_pct: 3, max_runs: 10, max_minutes: 10}): add rounds until "
               "every figure and ratio is known within ±until_pct% or a budget is spent; {target_change: 5%}: until "
               "every comparison can tell a 5% change",
    "profile": "true or false: also profile each pair (torch.profiler) at its first batch size",
    "layers": "true or false: also measure each configuration's training step layer by layer against the roofline "
              "(benchlib layers) at the first batch size (each variant and repeat a run), on CPU or CUDA",
    "predict_on": "list of machines to predict each configuration on (needs layers: true): each a ceilings file "
                  "measured there by benchlib roofline, or MACHINE[:DEVICE] of the machine cache",
    "calibrate": "true or false (default: when the study compares devices, variants, batch sizes or swept values "
                 "at one run a side): measure this machine's run-to-run noise floor (benchlib calibrate; kept per "
                 "machine and reused while fresh), so comparisons of one run a side can be judged",
    "ceilings_at_end": "true (default) or false: measure the roofline ceilings once more at the end of the study and "
                       "keep the higher of each (a roof is a maximum); false keeps those measured or loaded at its "
                       "start (about 3 s less a study on a 2-core CPU; each task of a SLURM array is a study)",
    "interleave": "true (default) or false: run a pair's configurations in rounds (seed, then batch size), every "
                  "variant and swept value of a round back to back, so slow drift spreads over all of them",
    "variants": "list of variant presets (cpu-default, cpu-quantized, gpu-amp, ...) or mappings of knobs",
    "tuned_params_dir": "folder with the <cpu|gpu>-tuned.yaml files benchlib tune exported (default results/tuned)",
    "tune": "mapping for benchlib tune: n_trials, objective, pruning, epochs_per_trial, seed, search_space",
}
ALLOWED_KEYS: tuple[str, ...] = tuple(GRID_KEYS) + tuple(SETTING_RULES)
NOT_SWEEPABLE = ("dataset", "data_path", "variant", "seed")


def expand_configs(study: str, hardware: str, model: str, batch_sizes: Sequence[int], settings: RunSettings,
                   sweep: Mapping[str, Sequence[Any]] | None = None, repeats: int = 1) -> list[RunConfig]:
    """Every configuration of one hardware/model pair: batch sizes x swept settings x repeat seeds."""
    sweep = dict(sweep or {})
    keys = tuple(sweep)
    out = []
    for b in batch_sizes:
        for values in itertools.product(*(sweep[k] for k in keys)):
            point = settings.updated(**dict(zip(keys, values)))
            for r in range(repeats):
                out.append(RunConfig(study, hardware, model, b, point.updated(seed=settings.seed + r), keys))
    return out


def schedule(configs: Sequence[RunConfig], interleave: bool = True, fresh_rounds: bool = False) -> list[RunConfig]:
    """The order configurations run in: training ones before those that evaluate their weights, and with
    ``interleave`` in rounds (seed, then batch size) so variants and swept values alternate A B A B
    instead of all of A then all of B: thermal drift or other load then lands on every side alike.

    An evaluate-only variant stays after the training twin of its round (same seed and batch), whose
    weights it evaluates. Configurations without cuDNN autotuning run before those with it in the process
    they share: the plans ``cudnn_benchmark: true`` finds stay in the process's plan cache, which torch cannot
    clear and which a later ``false`` configuration would use (autotuned kernels in a row that says it ran
    without them). ``fresh_rounds``: each round (seed) runs in a process of its own (a study's repeats), so that
    order holds within each round and the rounds stay interleaved; otherwise one process runs them all and
    every configuration without autotuning goes first.
    """
    batches = list(dict.fromkeys(c.batch_size for c in configs))
    if fresh_rounds:
        return sorted(configs, key=lambda c: (c.settings.seed, c.settings.knobs.cudnn_benchmark,
                                              batches.index(c.batch_size) if interleave else 0, c.evaluates_only))
    if not interleave:  # stable: the study's order otherwise
        return sorted(configs, key=lambda c: (c.settings.knobs.cudnn_benchmark, c.evaluates_only))
    return sorted(configs, key=lambda c: (c.settings.knobs.cudnn_benchmark, c.settings.seed,
                                          batches.index(c.batch_size), c.evaluates_only))


def expand_variants(study: str, hardware: str, model: str, batch_sizes: Sequence[int], settings: RunSettings,
                    sweep: Mapping[str, Sequence[Any]] | None, repeats: int,
                    variants: Sequence[Variant]) -> list[RunConfig]:
    """Every configuration of the pair: per variant (a tuned one brings its own batch size), the grid."""
    if not variants:
        return expand_configs(study, hardware, model, batch_sizes, settings, sweep, repeats)
    out = []
    for v in variants:
        tuned = tuned_batch_size(v)
        out += expand_configs(study, hardware, model, (tuned,) if tuned else batch_sizes, apply_variant(settings, v),
                              sweep, repeats)
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
    tune: TuneSpec | None = None
    variants: tuple[Variant, ...] = ()
    interleave: bool = True
    calibrate: bool | None = None  # the noise floor measured (or a fresh one reused); None: where floor_needed says
    auto_repeats: AutoRepeats | None = None  # repeats: auto (then ``repeats`` is its max_runs)
    layers: bool = False  # every configuration's step layer by layer (benchlib layers) at the first batch size
    ceilings_at_end: bool = True  # the ceilings measured once more at the end, the higher of each kept
    predict_on: tuple[str, ...] = ()  # targets each configuration is predicted on (ceilings files or cache machines)

    def pairs(self) -> list[tuple[str, str]]:
        """(hardware, model) pairs in the order they run: one notebook each."""
        return [(h, m) for h in self.hardware for m in self.models]

    def configs(self, hardware: str, model: str) -> list[RunConfig]:
        """The pair's configurations in the order they run (see ``schedule``)."""
        return schedule(expand_variants(self.study, hardware, model, self.batch_sizes, self.settings,
                                        dict(self.sweep), self.repeats, self.variants), self.interleave,
                        fresh_rounds=self.repeats > 1)  # a study runs each round in a fresh process

    def all_configs(self) -> list[RunConfig]:
        return [c for h, m in self.pairs() for c in self.configs(h, m)]

    def floor_needed(self) -> str | None:
        """Why this study's comparisons need the machine's noise floor ("2 devices compared at one run a side"),
        or None: ``calibrate: true`` always, ``false`` never; by default where it compares devices, variants, batch
        sizes or swept values at one run a side (with repeats, runs are compared with runs and need no floor)."""
        if self.calibrate is not None:
            return "calibrate: true" if self.calibrate else None
        if self.repeats > 1 or self.auto_repeats is not None:
            return None
        compared = [f"{n} {what}" for n, what in ((len(set(self.hardware)), "devices"),
                                                  (len(self.variants), "variants"),
                                                  (len(self.batch_sizes), "batch sizes"),
                                                  *((len(v), f"values of {k}") for k, v in self.sweep)) if n > 1]
        return f"{', '.join(compared)} compared at one run a side" if compared else None


# ---------------------------------------------------------------- validation

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
            raise ConfigError(
                f"{where}: key 'batch_sizes' range from {a!r} to {b!r}; allowed: integers 1 <= from <= to"
            )
        return doubling_range(a, b)
    return _as_list(value, "batch_sizes", where, int, "integers >= 1")


def check_grid_value(key: str, value: Any, where: str) -> None:
    """One value of the grid as a notebook names it (``study``, ``hardware``, ``model``, ``batch_size``,
    ``batch_sizes``), checked as a study file's key is; one line naming what is allowed otherwise."""
    if key == "study" and (not isinstance(value, str) or len(value) > NAME_MAX_CHARS or not NAME_PATTERN.match(value)):
        raise ConfigError(f"{where}: key 'study' is {value!r}; allowed: {NAME_WORDS}")
    if key == "hardware" and not (isinstance(value, str) and is_valid_hardware_name(value)):
        raise ConfigError(f"{where}: key 'hardware' is {value!r}; allowed: one of {HARDWARE_CHOICES}")
    if key == "model" and (not isinstance(value, str) or model_problem(value)):
        near = did_you_mean(value, MODELS) if isinstance(value, str) else ""
        raise ConfigError(f"{where}: key 'model' is {value!r}{near}; allowed: {MODEL_FORMS}")
    if key == "batch_size" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError(f"{where}: key 'batch_size' is {value!r}; allowed: an integer >= 1")
    if key == "batch_sizes":
        _batch_sizes(value, where)


def _listed(raw: Mapping[str, Any], key: str, where: str) -> Any:
    """A grid key of a study file that must be a list (``models: resnet18`` is refused, not read as one model)."""
    value = raw[key]
    if isinstance(value, list) or key == "batch_sizes" and isinstance(value, dict):
        return value
    example = {"hardware": "[cpu]", "models": "[resnet18]", "batch_sizes": "[32, 64]"}[key]
    raise ConfigError(f"{where}: key '{key}' is {value!r} ({type(value).__name__}); allowed: {GRID_KEYS[key]}, "
                      f"e.g. {key}: {example}")


def _papermill_text(value: Any, key: str, where: str) -> Any:
    """A list or mapping papermill's ``-p`` passed as text (``'[8, 16]'``), read as YAML; other values as given."""
    if isinstance(value, tuple):
        return list(value)
    if not isinstance(value, str):
        return value
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: {key} is the text {value!r}, not valid YAML ({first_line(exc)}); "
                          f"allowed: {GRID_KEYS.get(key, 'a list')}, e.g. -p {key} '[8, 16]' or -y '{key}: [8, 16]'"
                          ) from exc


def pair_parameters(batch_sizes: Any, sweep: Any, variants: Any, settings: RunSettings,
                    where: str = "notebook parameters") -> tuple[list[int], dict[str, list[Any]], list[Any]]:
    """The pair's grid as a notebook received it, checked as a study file's would be.

    papermill's ``-p batch_sizes '[8]'`` passes the text ``'[8]'``: it is read as YAML, never split into the
    "configurations" ``[``, ``8`` and ``]``; anything else that is not a list of batch sizes is one line.
    """
    sizes = _batch_sizes(_papermill_text(batch_sizes, "batch_sizes", where), where)
    check_batch_sizes(sizes, settings, where)
    swept = _sweep(_papermill_text(sweep, "sweep", where) or {}, settings, where)
    chosen = _papermill_text(variants, "variants", where)
    chosen = [] if chosen is None else [chosen] if isinstance(chosen, (str, dict)) else chosen
    if not isinstance(chosen, list):
        raise ConfigError(f"{where}: variants is {type(chosen).__name__}; allowed: a list of preset names or "
                          "knob mappings")
    return sizes, swept, chosen


def _sweep(value: Any, settings: RunSettings, where: str) -> dict[str, list[Any]]:
    """Validated sweep: each key a run setting, each value a non-empty list of valid values."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: key 'sweep' is {type(value).__name__}; allowed: {GRID_KEYS['sweep']}")
    out: dict[str, list[Any]] = {}
    for key, values in value.items():
        if key not in SETTING_RULES or key in NOT_SWEEPABLE:
            allowed = ", ".join(k for k in SETTING_RULES if k not in NOT_SWEEPABLE)
            raise ConfigError(f"{where}: key 'sweep.{key}' cannot be swept; allowed: {allowed} (seeds: use 'repeats')")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: key 'sweep.{key}' is {values!r}; allowed: a non-empty list of values")
        typed = [coerce_setting(key, v, where) for v in values]
        if len(set(map(repr, typed))) != len(typed):
            raise ConfigError(f"{where}: key 'sweep.{key}' lists a value twice: {values}")
        for v in typed:
            check_consistency(settings.updated(**{key: v}), where)
        out[key] = typed
    return out


def _variants(raw: Mapping[str, Any], where: str) -> tuple[Variant, ...]:
    specs = raw["variants"]
    if not isinstance(specs, list) or not specs:
        raise ConfigError(f"{where}: key 'variants' is {specs!r}; allowed: {GRID_KEYS['variants']}")
    tuned_dir = raw.get("tuned_params_dir")
    variants = tuple(parse_variant(v, where, tuned_params_dir=Path(tuned_dir) if tuned_dir else None) for v in specs)
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: key 'variants' names a variant twice: {names}")
    return variants


def _flag(raw: Mapping[str, Any], key: str, where: str, default: bool = False) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: key '{key}' is {value!r}; allowed: true or false")
    return value


def parse_study(raw: Any, where: str) -> StudyConfig:
    """Validate a parsed YAML document into a StudyConfig (structure and values; no devices, no files)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of keys at the top level, got {type(raw).__name__}; "
                          f"allowed keys: {', '.join(ALLOWED_KEYS)}")
    for key in raw:
        if not isinstance(key, str) or key not in ALLOWED_KEYS:
            raise ConfigError(unknown_key_message(str(key), where, ALLOWED_KEYS))
    for key in ("study", "hardware", "models", "batch_sizes"):
        if key not in raw:
            raise ConfigError(f"{where}: key '{key}' is missing; allowed: {GRID_KEYS[key]}")
    study = raw["study"]
    if isinstance(study, str) and len(study) > NAME_MAX_CHARS:
        raise ConfigError(f"{where}: key 'study' is {len(study)} characters long; allowed: {NAME_WORDS}")
    if not isinstance(study, str) or not NAME_PATTERN.match(study):
        raise ConfigError(f"{where}: key 'study' is {study!r}; allowed: {NAME_WORDS}")
    hardware = _as_list(_listed(raw, "hardware", where), "hardware", where, str, HARDWARE_CHOICES)
    for h in hardware:
        if not is_valid_hardware_name(h):
            raise ConfigError(f"{where}: key 'hardware' has '{h}'; allowed: {HARDWARE_CHOICES}")
    models = _as_list(_listed(raw, "models", where), "models", where, str, MODEL_FORMS)
    for m in models:
        if model_problem(m):
            raise ConfigError(f"{where}: key 'models' has '{m}'{did_you_mean(m, MODELS)}; allowed: {MODEL_FORMS}")
    batch_sizes = _batch_sizes(_listed(raw, "batch_sizes", where), where)
    settings = settings_from_mapping({k: v for k, v in raw.items() if k in SETTING_RULES}, where,
                                     allowed_keys=ALLOWED_KEYS)
    check_batch_sizes(batch_sizes, settings, where)
    sweep = _sweep(raw.get("sweep", {}), settings, where)
    repeats, auto = parse_repeats(raw.get("repeats", 1), where)
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where}: key 'description' is {type(description).__name__}; allowed: a string")
    tune = parse_tune(raw["tune"], where) if "tune" in raw else None
    variants = _variants(raw, where) if "variants" in raw else ()
    for v in variants:
        applied = apply_variant(settings, v)
        check_consistency(applied, f"{where}: variant '{v.name}'")
        tuned = tuned_batch_size(v)
        if tuned is not None:
            check_batch_sizes([tuned], applied, f"{where}: variant '{v.name}'")
    return StudyConfig(study, tuple(hardware), tuple(models), tuple(batch_sizes), settings, description, where,
                       tuple((k, tuple(v)) for k, v in sweep.items()), repeats, _flag(raw, "profile", where), tune,
                       variants, _flag(raw, "interleave", where, default=True),
                       _flag(raw, "calibrate", where) if "calibrate" in raw else None, auto,
                       _flag(raw, "layers", where),
                       _flag(raw, "ceilings_at_end", where, default=True), _predict_on(raw, where))


def _predict_on(raw: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The study's prediction targets: text only here (whether each names a ceilings file or a cached machine is
    the preflight's to say); a prediction needs per-layer tables, so ``layers: true``."""
    if "predict_on" not in raw:
        return ()
    targets = _as_list(raw["predict_on"], "predict_on", where, str, GRID_KEYS["predict_on"])
    if raw.get("layers") is not True:
        raise ConfigError(f"{where}: key 'predict_on' needs per-layer tables to predict from; allowed: predict_on "
                          "with layers: true")
    if blank := [t for t in targets if not t.strip()]:
        raise ConfigError(f"{where}: key 'predict_on' has {blank[0]!r}; allowed: {GRID_KEYS['predict_on']}")
    return tuple(targets)


def read_study_file(path: str | Path) -> Any:
    """The parsed YAML of a study file (safe YAML: data only, no code), or one line saying what is wrong."""
    p = Path(path)
    where = str(path)
    if p.is_dir():
        raise ConfigError(f"{where}: is a directory; give a YAML file such as params/default.yaml")
    if not p.is_file():
        raise ConfigError(f"{where}: params file not found; give a YAML file such as params/default.yaml")
    try:
        return yamlfile.load(p.read_text(encoding="utf-8"))
    except yamlfile.DuplicateKeyError as exc:
        raise ConfigError(f"{where}: not valid YAML: {exc}; allowed: each key once per mapping") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or first_line(exc)
        raise ConfigError(f"{where}: not valid YAML{at}: {problem}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not a text file ({exc.reason}); expected UTF-8 YAML") from exc


def study_from_file(path: str | Path, overrides: Mapping[str, Any] | None = None) -> StudyConfig:
    """Read and validate a study params file (what to run; the preflight checks it can run here).

    ``overrides`` (``benchlib study --set key=value``) replace the file's top-level keys before validation,
    so a bad value is refused as the file's own would be, and the source names them.
    """
    raw = read_study_file(path)
    if not overrides:
        return parse_study(raw, str(path))
    if not isinstance(raw, dict):
        return parse_study(raw, str(path))  # parse_study words what is wrong with the file itself
    return parse_study({**raw, **overrides}, f"{path} with --set {', '.join(overrides)}")


