"""What ``benchlib tune`` searches: the ``tune:`` section of a study file, validated, torch- and optuna-free.

A :class:`SearchSpace` names what a study searches (batch size, learning rate, optimizer, weight decay,
momentum); a :class:`TuneSpec` adds how (trials, objective, pruning, epochs per trial, sampler seed).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .fields import FLOAT_TEXT, Rule, coerce
from .settings import RunConfig, RunSettings, train_samples_known
from .vocab import OPTIMIZERS, did_you_mean

OBJECTIVES: tuple[str, ...] = ("accuracy", "throughput", "both")
# What each objective maximizes, under the row column names of the benchmark.
OBJECTIVE_METRICS: dict[str, tuple[str, ...]] = {
    "accuracy": ("test_accuracy",),
    "throughput": ("train_samples_per_s",),
    "both": ("test_accuracy", "train_samples_per_s"),
}


@dataclass(frozen=True)
class SearchSpace:
    """What a study searches; a field left ``None`` keeps the base configuration's value."""

    batch_size: tuple[int, ...] | None = None  # categorical choices
    lr: tuple[float, float] | None = None  # log-uniform (low, high)
    optimizer: tuple[str, ...] | None = None  # subset of OPTIMIZERS
    weight_decay: tuple[float, float] | None = None  # log-uniform, low > 0
    momentum: tuple[float, float] | None = None  # uniform; searched only in trials that use SGD

    def searched(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None]

    def as_params(self) -> dict[str, Any]:
        """The plain YAML/notebook form that :func:`parse_search_space` reads back."""
        return {k: (list(v) if k in _LISTS else {"low": v[0], "high": v[1]})
                for k, v in dataclasses.asdict(self).items() if v is not None}


# key -> (allowed form, check of (low, high)) for the range keys
_RANGES: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    "lr": ("{low: A, high: B} with 0 < A <= B <= 10 (searched log-uniform)", lambda a, b: 0.0 < a <= b <= 10.0),
    "weight_decay": ("{low: A, high: B} with 0 < A <= B <= 1 (searched log-uniform; leave the key out for none)",
                     lambda a, b: 0.0 < a <= b <= 1.0),
    "momentum": ("{low: A, high: B} with 0 <= A <= B < 1 (searched uniform)", lambda a, b: 0.0 <= a <= b < 1.0),
}
_LISTS = {
    "batch_size": "a list of distinct integers >= 1, e.g. [16, 32, 64]",
    "optimizer": f"a list of distinct names from: {', '.join(OPTIMIZERS)}",
}
SEARCH_SPACE_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SearchSpace))


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and FLOAT_TEXT.match(value.strip()):
        return float(value)
    return None


def _parse_range(key: str, value: Any, where: str) -> tuple[float, float]:
    allowed, ok = _RANGES[key]
    bad = ConfigError(f"{where}: key 'search_space.{key}' is {value!r}; allowed: {allowed}")
    if not isinstance(value, Mapping) or set(value) != {"low", "high"}:
        raise bad
    low, high = _number(value["low"]), _number(value["high"])
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)) or not ok(low, high):
        raise bad
    return low, high


def _parse_list(key: str, value: Any, where: str) -> tuple[Any, ...]:
    allowed = _LISTS[key]
    items = value if isinstance(value, list) else None
    if not items:
        raise ConfigError(f"{where}: key 'search_space.{key}' is {value!r}; allowed: {allowed}")
    for item in items:
        good = (isinstance(item, int) and not isinstance(item, bool) and item >= 1 if key == "batch_size"
                else item in OPTIMIZERS)
        if not good:
            raise ConfigError(f"{where}: key 'search_space.{key}' has {item!r}; allowed: {allowed}")
    if len(set(items)) != len(items):
        raise ConfigError(f"{where}: key 'search_space.{key}' lists a value twice: {items}; allowed: {allowed}")
    return tuple(items)


def parse_search_space(raw: Any, where: str) -> SearchSpace:
    """Validate a YAML mapping such as ``{batch_size: [16, 32], lr: {low: 1e-4, high: 1e-1}}``.

    Raises:
        ConfigError: one line naming ``search_space.<key>`` and the allowed form.
    """
    allowed_keys = ", ".join(SEARCH_SPACE_KEYS)
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(
            f"{where}: key 'search_space' is {raw!r}; allowed: a non-empty mapping of keys {allowed_keys}"
        )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _RANGES:
            values[key] = _parse_range(key, value, where)
        elif key in _LISTS:
            values[key] = _parse_list(key, value, where)
        else:
            hint = did_you_mean(str(key), SEARCH_SPACE_KEYS, prefix="search_space.")
            raise ConfigError(f"{where}: unknown key 'search_space.{key}'{hint}; allowed keys: {allowed_keys}")
    return SearchSpace(**values)


def check_space(space: SearchSpace, s: RunSettings, where: str) -> None:
    """A space that searches something and only batch sizes the data set can fill."""
    if not space.searched():
        raise ConfigError(f"{where}: key 'search_space' searches nothing; allowed keys: {', '.join(SEARCH_SPACE_KEYS)}")
    samples = train_samples_known(s)
    for b in space.batch_size or ():
        if samples is not None and b > samples:
            raise ConfigError(f"{where}: key 'search_space.batch_size' has {b}, larger than the {samples} training "
                              f"samples of '{s.dataset}'; allowed: 1..{samples}")


def default_params(space: SearchSpace, base: RunConfig) -> dict[str, Any]:
    """The base configuration's values of the searched keys that lie inside the space.

    A new study runs them as its first trial, so "best against the default" compares like with like:
    same study, same epochs, same data.
    """
    s = base.settings
    out: dict[str, Any] = {}
    if space.batch_size is not None and base.batch_size in space.batch_size:
        out["batch_size"] = base.batch_size
    for key in ("lr", "weight_decay", "momentum"):
        bounds = getattr(space, key)
        if bounds is not None and bounds[0] <= getattr(s, key) <= bounds[1]:
            out[key] = getattr(s, key)
    if space.optimizer is not None and s.optimizer in space.optimizer:
        out["optimizer"] = s.optimizer
    if out.get("optimizer", s.optimizer) != "sgd":
        out.pop("momentum", None)
    return out


# ---------------------------------------------------------------- the `tune:` section of a study file

_TUNE_RULES: dict[str, Rule] = {
    "n_trials": Rule(int, False, "trials added by a run (a stored study continues)", min=1),
    "objective": Rule(str, False, "what to maximize", choices=OBJECTIVES),
    "pruning": Rule(bool, False, "median pruning on per-epoch figures (single objective)"),
    "epochs_per_trial": Rule(int, True, "epochs each trial trains (default: epochs)", min=1),
    "seed": Rule(int, False, "seed of the TPE sampler", min=0),
    "workers": Rule(int, False, "SLURM array tasks that share each pair's study, splitting its trials (more than "
                    "1: benchlib tune submits them)", min=1, max=1000),
}
_TUNE_KEYS = (*_TUNE_RULES, "search_space")


@dataclass(frozen=True)
class TuneSpec:
    """How ``benchlib tune`` searches each pair of a study."""

    search_space: SearchSpace
    n_trials: int = 10
    objective: str = "accuracy"
    pruning: bool = True
    epochs_per_trial: int | None = None
    seed: int = 0
    workers: int = 1

    def as_params(self) -> dict[str, Any]:
        """Plain values for the tune notebook's parameters."""
        return {"n_trials": self.n_trials, "objective": self.objective, "pruning": self.pruning,
                "epochs_per_trial": self.epochs_per_trial, "tune_seed": self.seed,
                "search_space": self.search_space.as_params()}


def parse_tune(raw: Any, where: str) -> TuneSpec:
    """Validate a study file's ``tune:`` mapping (one line naming ``tune.<key>`` on a bad value)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: key 'tune' is {type(raw).__name__}; allowed: a mapping of {', '.join(_TUNE_KEYS)}")
    for key in raw:
        if key not in _TUNE_KEYS:
            raise ConfigError(f"{where}: unknown key 'tune.{key}'; allowed keys: {', '.join(_TUNE_KEYS)}")
    if "search_space" not in raw:
        raise ConfigError(f"{where}: key 'tune.search_space' is missing; allowed: a mapping of: "
                          f"{', '.join(SEARCH_SPACE_KEYS)}")
    values = {k: coerce(f"tune.{k}", raw[k], _TUNE_RULES[k], where) for k in _TUNE_RULES if k in raw}
    return TuneSpec(parse_search_space(raw["search_space"], where), **values)


