"""Hyperparameter tuning: one Optuna study per hardware/model pair, exported as a ``*-tuned`` variant.

A study searches batch size, learning rate, optimizer, weight decay and momentum (whichever the
:class:`SearchSpace` names) with a seeded TPE sampler. Each trial trains the pair epoch by epoch with
benchlib's own loaders, model and optimizer, evaluates test accuracy after every epoch and reports it,
so a median pruner can stop a hopeless trial early. Objectives: final test ``accuracy``, training
``throughput`` (samples/s over timed steps, warmup excluded, as in the benchmark), or ``both``
(maximized together; the result is a Pareto front).

Studies live in one SQLite file, ``<results_dir>/tuning/optuna.sqlite3``; running the same pair again
continues its study. The best trial is exported to ``<results_dir>/tuning/<cpu|gpu>-tuned.yaml``, the
file the ``cpu-tuned`` / ``gpu-tuned`` variants read.
"""
from __future__ import annotations

import dataclasses
import difflib
import gc
import math
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import optuna
import pandas as pd
import torch
import yaml
from optuna.trial import FrozenTrial, TrialState
from torch import nn

from .config import OPTIMIZERS, RunConfig, RunSettings, train_samples_known
from .devices import resolve_hardware
from .errors import ConfigError
from .loaders import batches_per_epoch, build_loaders
from .manifest import machine_name
from .models import build_model
from .results import atomic_write_text, safe_name
from .runner import error_text, failure_status, seed_everything
from .timing import StepTimer
from .train import MemoryCeilingError, NonFiniteLossError, _check_step, evaluate, make_optimizer

ProgressFn = Callable[[str], None]

OBJECTIVES = ("accuracy", "throughput", "both")
# What each objective maximizes, under the row column names of the benchmark.
OBJECTIVE_METRICS: dict[str, tuple[str, ...]] = {
    "accuracy": ("test_accuracy",),
    "throughput": ("train_samples_per_s",),
    "both": ("test_accuracy", "train_samples_per_s"),
}
STORAGE_FILE = "optuna.sqlite3"
TUNING_DIR = "tuning"
# Trials that end this way are recorded as FAIL and the study goes on; any other exception is a bug and stops it.
TRIAL_FAILURES: tuple[type[BaseException], ...] = (NonFiniteLossError, MemoryCeilingError, MemoryError,
                                                   torch.OutOfMemoryError)
_PRUNER_STARTUP_TRIALS = 2
_PRUNER_WARMUP_STEPS = 0


# ---------------------------------------------------------------- search space


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
# PyYAML reads YAML 1.1, where ``1e-4`` (no dot) is a string: accept that spelling of a number.
_EXPONENT_RE = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and _EXPONENT_RE.match(value.strip()):
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
        raise ConfigError(f"{where}: key 'search_space' is {raw!r}; allowed: a non-empty mapping of keys {allowed_keys}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _RANGES:
            values[key] = _parse_range(key, value, where)
        elif key in _LISTS:
            values[key] = _parse_list(key, value, where)
        else:
            close = difflib.get_close_matches(str(key), SEARCH_SPACE_KEYS, n=1)
            hint = f" (did you mean 'search_space.{close[0]}'?)" if close else ""
            raise ConfigError(f"{where}: unknown key 'search_space.{key}'{hint}; allowed keys: {allowed_keys}")
    return SearchSpace(**values)


def _check_space(space: SearchSpace, s: RunSettings, where: str) -> None:
    if not space.searched():
        raise ConfigError(f"{where}: key 'search_space' searches nothing; allowed keys: {', '.join(SEARCH_SPACE_KEYS)}")
    samples = train_samples_known(s)
    for b in space.batch_size or ():
        if samples is not None and b > samples:
            raise ConfigError(f"{where}: key 'search_space.batch_size' has {b}, larger than the {samples} training "
                              f"samples of '{s.dataset}'; allowed: 1..{samples}")


def _suggest(trial: optuna.Trial, space: SearchSpace, base: RunConfig) -> tuple[int, RunSettings]:
    """(batch size, run settings) of one trial: the base with the searched values replaced."""
    s = base.settings
    batch = base.batch_size
    if space.batch_size is not None:
        batch = int(trial.suggest_categorical("batch_size", list(space.batch_size)))
    changes: dict[str, Any] = {}
    if space.lr is not None:
        changes["lr"] = trial.suggest_float("lr", *space.lr, log=True)
    if space.optimizer is not None:
        changes["optimizer"] = trial.suggest_categorical("optimizer", list(space.optimizer))
    if space.weight_decay is not None:
        changes["weight_decay"] = trial.suggest_float("weight_decay", *space.weight_decay, log=True)
    if space.momentum is not None and changes.get("optimizer", s.optimizer) == "sgd":
        changes["momentum"] = trial.suggest_float("momentum", *space.momentum)  # Adam has none: conditional
    return batch, dataclasses.replace(s, **changes)


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


# ---------------------------------------------------------------- one trial (no Optuna inside)


@dataclass
class EpochReport:
    epoch: int
    test_accuracy: float
    train_samples_per_s: float  # over the timed steps so far (nan while all steps were warmup)


def train_by_epoch(cfg: RunConfig, epochs: int, device: torch.device,
                   on_epoch: Callable[[EpochReport], None]) -> EpochReport:
    """Train ``cfg`` for ``epochs`` epochs with the benchmark's training step, evaluating after each.

    ``on_epoch`` sees every epoch's figures (and may raise to stop, as pruning does). Step times
    leave out the first ``warmup_steps`` steps and the wait for data, as :func:`benchlib.train.train` does.
    """
    s = cfg.settings
    seed_everything(s.seed)
    loaders = build_loaders(s, cfg.batch_size, device)
    model = build_model(cfg.model, loaders.num_classes, pretrained=s.pretrained,
                        freeze_backbone=s.freeze_backbone, weights_path=s.weights_path).to(device)
    per_epoch = batches_per_epoch(loaders.train, s.max_train_batches)
    if per_epoch < 1:
        raise ValueError(f"batch size {cfg.batch_size} leaves no full training batch in {loaders.train_samples} samples")
    criterion = nn.CrossEntropyLoss()
    optimizer = make_optimizer(model, s)
    timer = StepTimer(device)
    step, timed_s, timed_samples = 0, 0.0, 0
    report = EpochReport(-1, math.nan, math.nan)
    for epoch in range(epochs):
        model.train()
        batch_sizes: list[int] = []
        batches = iter(loaders.train)
        for _ in range(per_epoch):
            x, y = next(batches)
            timer.start()
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            timer.stop()
            _check_step(loss, step, s.memory_limit_bytes)
            batch_sizes.append(int(y.shape[0]))
            step += 1
        del batches
        times = timer.collect()
        first = step - len(times)
        for i, t in enumerate(times):
            if first + i >= s.warmup_steps:
                timed_s += t
                timed_samples += batch_sizes[i]
        accuracy = evaluate(model, loaders.test, device).accuracy
        report = EpochReport(epoch, accuracy, timed_samples / timed_s if timed_s > 0 else math.nan)
        on_epoch(report)
    return report


# ---------------------------------------------------------------- the study


@dataclass(frozen=True)
class TuneOutcome:
    study_name: str
    storage_path: Path
    n_trials_total: int
    n_complete: int
    n_pruned: int
    best: list[dict[str, Any]]  # {"number", "values", "params"} of the best trial(s); the Pareto front for "both"
    exported_path: Path | None  # the params file of the *-tuned variant (None when no trial completed)
    n_failed: int = 0


def storage_path(results_dir: Path) -> Path:
    return Path(results_dir) / TUNING_DIR / STORAGE_FILE


def _storage_url(path: Path) -> str:
    return f"sqlite:///{path.resolve()}"


def hardware_kind(device: torch.device | str) -> str:
    """``cpu`` or ``gpu`` (cuda*, mps): the prefix of the tuned variant a study exports."""
    return "cpu" if torch.device(device).type == "cpu" else "gpu"


def study_name_for(base: RunConfig, machine: str | None = None) -> str:
    hardware = resolve_hardware(base.hardware) if base.hardware == "auto" else base.hardware
    return f"{base.study}__{machine or machine_name()}__{hardware}__{base.model}"


def median_pruner() -> optuna.pruners.MedianPruner:
    """The pruner of single-objective studies: below the median of completed trials at the same epoch, once 2 completed."""
    return optuna.pruners.MedianPruner(n_startup_trials=_PRUNER_STARTUP_TRIALS, n_warmup_steps=_PRUNER_WARMUP_STEPS)


def _quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _open_study(results_dir: Path, study_name: str) -> optuna.Study:
    _quiet_optuna()
    path = storage_path(results_dir)
    if not path.is_file():
        raise FileNotFoundError(f"no tuning studies in '{results_dir}': {path} does not exist")
    return optuna.load_study(study_name=study_name, storage=_storage_url(path))


def _trial_summary(t: FrozenTrial) -> dict[str, Any]:
    return {"number": t.number, "values": [float(v) for v in t.values], "params": dict(t.params)}


def _best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The best trial (single objective) or the Pareto front (highest accuracy first); [] when none completed."""
    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return []
    if len(study.directions) == 1:
        return [study.best_trial]
    return sorted(study.best_trials, key=lambda t: (-t.values[0], -t.values[1], t.number))


def _export(path: Path, trial: FrozenTrial, base: RunConfig, space: SearchSpace, metrics: tuple[str, ...],
            study_name: str, storage: Path) -> Path:
    """Write the run settings a trial chose as a flat mapping the ``*-tuned`` variants read, plus its source."""
    params: dict[str, Any] = {}
    for key in space.searched():
        if key in trial.params:
            value = trial.params[key]
            params[key] = int(value) if key == "batch_size" else str(value) if key == "optimizer" else float(value)
    params["source"] = {"study_name": study_name, "trial_number": trial.number,
                        "values": [float(v) for v in trial.values], "metrics": list(metrics),
                        "storage": str(storage), "model": base.model, "hardware": base.hardware}
    atomic_write_text(path, yaml.safe_dump(params, sort_keys=False))
    return path


def tune_pair(base: RunConfig, space: SearchSpace, *, n_trials: int, objective: str, results_dir: Path,
              seed: int = 0, pruning: bool = True, epochs_per_trial: int | None = None,
              progress: ProgressFn | None = None) -> TuneOutcome:
    """Run ``n_trials`` more trials of the pair's study (created on first use) and export its best trial.

    Args:
        base: the pair and the run settings every trial starts from (``epochs`` unless ``epochs_per_trial``).
        space: what to search.
        n_trials: trials to add in this call; a study that already exists keeps its trials.
        objective: ``accuracy``, ``throughput`` or ``both`` (Pareto front of the two).
        results_dir: the study's results folder; the SQLite file and the export go under ``tuning/``.
        seed: seed of the TPE sampler (offset by the trials already in the study so a continued study
            does not repeat its first suggestions).
        pruning: stop trials whose per-epoch figure falls below the median (single objective only).
        epochs_per_trial: epochs each trial trains (default: ``base.settings.epochs``).
        progress: receives one line per event.

    Raises:
        ConfigError: bad objective, empty or impossible search space, or a study of this name that
            optimizes another objective.
    """
    say = progress or (lambda _msg: None)
    where = f"tuning {base.hardware}/{base.model}"
    if objective not in OBJECTIVES:
        raise ConfigError(f"{where}: key 'objective' is {objective!r}; allowed: one of: {', '.join(OBJECTIVES)}")
    if n_trials < 1:
        raise ConfigError(f"{where}: key 'n_trials' is {n_trials!r}; allowed: an integer >= 1")
    epochs = base.settings.epochs if epochs_per_trial is None else epochs_per_trial
    if epochs < 1:
        raise ConfigError(f"{where}: key 'epochs_per_trial' is {epochs!r}; allowed: an integer >= 1")
    _check_space(space, base.settings, where)
    _quiet_optuna()
    device = torch.device(resolve_hardware(base.hardware))
    threads_before = torch.get_num_threads()
    if base.settings.threads:
        torch.set_num_threads(base.settings.threads)
    try:
        return _run_study(base, space, n_trials=n_trials, objective=objective, results_dir=Path(results_dir),
                          seed=seed, pruning=pruning, epochs=epochs, device=device, where=where, say=say)
    finally:
        torch.set_num_threads(threads_before)


def _run_study(base: RunConfig, space: SearchSpace, *, n_trials: int, objective: str, results_dir: Path, seed: int,
               pruning: bool, epochs: int, device: torch.device, where: str, say: ProgressFn) -> TuneOutcome:
    name = study_name_for(base)
    path = storage_path(results_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    metrics = OBJECTIVE_METRICS[objective]
    multi = len(metrics) > 1
    use_pruner = pruning and not multi
    if pruning and multi:
        say(f"{name}: pruning is off: Optuna cannot prune multi-objective studies (objective 'both')")
    pruner = median_pruner() if use_pruner else optuna.pruners.NopPruner()
    study = optuna.create_study(storage=_storage_url(path), study_name=name, load_if_exists=True,
                                pruner=pruner, directions=["maximize"] * len(metrics))
    known = study.user_attrs.get("objective")
    if known is not None and known != objective:
        raise ConfigError(f"{where}: study '{name}' in {path} optimizes '{known}', not '{objective}'; allowed: "
                          f"objective '{known}' to continue it, or another results folder for a new study")
    if known is None:
        study.set_user_attr("objective", objective)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(metrics))
    n_before = len(study.trials)
    study.sampler = optuna.samplers.TPESampler(seed=seed + n_before)
    if n_before == 0:
        study.enqueue_trial(default_params(space, base), user_attrs={"default": True})
    say(f"{name}: {'continuing with' if n_before else 'new study,'} {n_before} trial(s) stored; adding {n_trials} "
        f"({objective}, {epochs} epoch(s) each, {'median pruning' if use_pruner else 'no pruning'}) in {path}")

    def run_trial(trial: optuna.Trial) -> float | tuple[float, float]:
        batch, settings = _suggest(trial, space, base)
        trial.set_user_attr("objective", objective)
        cfg = dataclasses.replace(base, batch_size=batch, settings=settings)

        def on_epoch(r: EpochReport) -> None:
            trial.set_user_attr(f"test_accuracy_epoch{r.epoch}", r.test_accuracy)
            if multi:
                return
            value = r.test_accuracy if objective == "accuracy" else r.train_samples_per_s
            if math.isnan(value):
                return
            trial.report(value, r.epoch)
            if trial.should_prune():
                raise optuna.TrialPruned(f"{metrics[0]} {value:.4g} after epoch {r.epoch + 1} is below the median")

        t0 = time.perf_counter()
        try:
            final = train_by_epoch(cfg, epochs, device, on_epoch)
        except TRIAL_FAILURES as exc:
            trial.set_user_attr("status", failure_status(exc))
            trial.set_user_attr("error", error_text(exc))
            raise
        finally:
            trial.set_user_attr("train_s", time.perf_counter() - t0)
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
        trial.set_user_attr("test_accuracy", final.test_accuracy)
        trial.set_user_attr("train_samples_per_s", final.train_samples_per_s)
        if "train_samples_per_s" in metrics and math.isnan(final.train_samples_per_s):
            trial.set_user_attr("error", f"no timed steps: warmup_steps {settings.warmup_steps} covers every step")
        values = tuple(final.test_accuracy if m == "test_accuracy" else final.train_samples_per_s for m in metrics)
        return values if multi else values[0]  # nan (no timed steps) makes Optuna record the trial as FAIL

    def after_trial(_study: optuna.Study, t: FrozenTrial) -> None:
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.params.items())
        if t.state == TrialState.COMPLETE:
            outcome = ", ".join(f"{m} {v:.4g}" for m, v in zip(metrics, t.values))
        elif t.state == TrialState.FAIL:
            outcome = t.user_attrs.get("error", "failed")
        else:
            outcome = f"after {len(t.intermediate_values)} epoch(s)"
        say(f"{name}: trial {t.number} {t.state.name.lower()} ({shown}): {outcome}")

    study.optimize(run_trial, n_trials=n_trials, catch=TRIAL_FAILURES, callbacks=[after_trial], gc_after_trial=False)

    trials = study.get_trials(deepcopy=False)
    best = _best_trials(study)
    exported = None
    if best:
        exported = _export(path.parent / f"{hardware_kind(device)}-tuned.yaml", best[0], base, space, metrics, name, path)
        say(f"{name}: best trial {best[0].number} {dict(zip(metrics, best[0].values))} exported to {exported}")
    else:
        say(f"{name}: no trial completed: nothing exported")
    return TuneOutcome(
        study_name=name, storage_path=path, n_trials_total=len(trials),
        n_complete=sum(t.state == TrialState.COMPLETE for t in trials),
        n_pruned=sum(t.state == TrialState.PRUNED for t in trials),
        best=[_trial_summary(t) for t in best], exported_path=exported,
        n_failed=sum(t.state == TrialState.FAIL for t in trials),
    )


# ---------------------------------------------------------------- reading studies back


def list_studies(results_dir: Path) -> list[str]:
    """Names of the studies stored under ``results_dir`` (none when nothing was tuned there)."""
    path = storage_path(results_dir)
    if not path.is_file():
        return []
    _quiet_optuna()
    return sorted(optuna.get_all_study_names(_storage_url(path)))


def _metric_names(study: optuna.Study) -> list[str]:
    names = study.metric_names
    return list(names) if names else [f"value_{i}" for i in range(len(study.directions))]


def study_frame(results_dir: Path, study_name: str) -> pd.DataFrame:
    """Every trial of a study as a row: number, state, values, one column per metric, params, duration_s.

    Params come both as a ``params`` dict and flattened to ``params_<name>`` columns; ``status`` and
    ``error`` say why a trial failed.
    """
    study = _open_study(results_dir, study_name)
    metrics = _metric_names(study)
    rows = []
    for t in study.get_trials(deepcopy=False):
        done = t.state == TrialState.COMPLETE and t.values is not None
        row: dict[str, Any] = {"number": t.number, "state": t.state.name, "is_default": bool(t.user_attrs.get("default")),
                               "values": list(t.values) if done else None}
        for i, m in enumerate(metrics):
            row[m] = t.values[i] if done else None
        last = max(t.intermediate_values) if t.intermediate_values else None
        row["last_reported"] = t.intermediate_values[last] if last is not None else None  # where a pruned trial stopped
        row["params"] = dict(t.params)
        row.update({f"params_{k}": v for k, v in t.params.items()})
        row["epochs_reported"] = len(t.intermediate_values)
        row["duration_s"] = t.duration.total_seconds() if t.duration is not None else None
        row["status"] = t.user_attrs.get("status")
        row["error"] = t.user_attrs.get("error")
        rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else ["number", "state", "values", *metrics, "params", "duration_s"])


def _save_axes(ax: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig = ax.figure if not hasattr(ax, "shape") else ax.flat[0].figure  # some plots return an array of axes
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(path, dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


def tuning_figures(results_dir: Path, study_name: str, figures_dir: Path,
                   progress: ProgressFn | None = None) -> list[Path]:
    """Optimization history, parameter importances and (two objectives) the Pareto front, as PNG files.

    A figure the study cannot support yet (too few complete trials, a single parameter) is skipped with
    a reason sent to ``progress``; this never raises for a small study.
    """
    from optuna.visualization import matplotlib as ovm

    say = progress or (lambda _msg: None)
    study = _open_study(results_dir, study_name)
    metrics = _metric_names(study)
    multi = len(metrics) > 1
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    stem = f"tune__{safe_name(study_name)}"
    out: list[Path] = []
    # Two objectives: history and importances follow the first (accuracy). PED-ANOVA, Optuna's importance
    # evaluator, ranks parameters by how they reach *low* target values, so the maximized target is negated.
    history_kw: dict[str, Any] = {"target_name": metrics[0]}
    importance_kw: dict[str, Any] = {"target_name": metrics[0]}
    if multi:
        history_kw["target"] = lambda t: t.values[0]
        importance_kw.update(target=lambda t: -t.values[0], target_name=f"-{metrics[0]}")

    def attempt(kind: str, draw: Callable[[], Any]) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                warnings.filterwarnings("ignore", message="PedAnovaImportanceEvaluator computes the importances")
                ax = draw()
            out.append(_save_axes(ax, Path(figures_dir) / f"{stem}__{kind}.png"))
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            say(f"{study_name}: {kind} figure skipped: {type(exc).__name__}: {exc}")

    if not complete:
        say(f"{study_name}: no complete trial yet: no figures")
        return out
    attempt("history", lambda: ovm.plot_optimization_history(study, **history_kw))
    varied = {k for k in {k for t in complete for k in t.params}
              if len({repr(t.params.get(k)) for t in complete}) > 1}
    if len(complete) < 2 or len(varied) < 2:
        say(f"{study_name}: importances figure skipped: needs >= 2 complete trials varying >= 2 parameters "
            f"(has {len(complete)} trial(s), {len(varied)} varied parameter(s))")
    else:
        attempt("importances", lambda: ovm.plot_param_importances(study, **importance_kw))
    if multi:
        attempt("pareto", lambda: ovm.plot_pareto_front(study, target_names=metrics[:2]))
    return out


# ---------------------------------------------------------------- the `tune:` section of a study file

_TUNE_KEYS = {"n_trials": "an integer >= 1", "objective": f"one of: {', '.join(OBJECTIVES)}", "pruning": "true or false",
              "epochs_per_trial": "an integer >= 1", "seed": "an integer >= 0",
              "search_space": f"a mapping of: {', '.join(SEARCH_SPACE_KEYS)}"}


@dataclass(frozen=True)
class TuneSpec:
    """How ``benchlib tune`` searches each pair of a study."""

    search_space: SearchSpace
    n_trials: int = 10
    objective: str = "accuracy"
    pruning: bool = True
    epochs_per_trial: int | None = None
    seed: int = 0

    def as_params(self) -> dict[str, Any]:
        """Plain values for the tune notebook's parameters."""
        space = {k: (list(v) if k in _LISTS else {"low": v[0], "high": v[1]})
                 for k, v in dataclasses.asdict(self.search_space).items() if v is not None}
        return {"n_trials": self.n_trials, "objective": self.objective, "pruning": self.pruning,
                "epochs_per_trial": self.epochs_per_trial, "tune_seed": self.seed, "search_space": space}


def parse_tune(raw: Any, where: str) -> TuneSpec:
    """Validate a study file's ``tune:`` mapping (one line naming ``tune.<key>`` on a bad value)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: key 'tune' is {type(raw).__name__}; allowed: a mapping of {', '.join(_TUNE_KEYS)}")
    for key in raw:
        if key not in _TUNE_KEYS:
            raise ConfigError(f"{where}: unknown key 'tune.{key}'; allowed keys: {', '.join(_TUNE_KEYS)}")
    if "search_space" not in raw:
        raise ConfigError(f"{where}: key 'tune.search_space' is missing; allowed: {_TUNE_KEYS['search_space']}")

    def integer(key: str, default: int | None, low: int) -> int | None:
        v = raw.get(key, default)
        if v is None and default is None:
            return None
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ConfigError(f"{where}: key 'tune.{key}' is {v!r}; allowed: {_TUNE_KEYS[key]}")
        return v

    objective = raw.get("objective", "accuracy")
    if objective not in OBJECTIVES:
        raise ConfigError(f"{where}: key 'tune.objective' is {objective!r}; allowed: {_TUNE_KEYS['objective']}")
    pruning = raw.get("pruning", True)
    if not isinstance(pruning, bool):
        raise ConfigError(f"{where}: key 'tune.pruning' is {pruning!r}; allowed: true or false")
    return TuneSpec(parse_search_space(raw["search_space"], where), integer("n_trials", 10, 1), objective, pruning,
                    integer("epochs_per_trial", None, 1), integer("seed", 0, 0))
