"""Hyperparameter tuning: one Optuna study per hardware/model pair, exported as a ``*-tuned`` variant.

A study searches what its :class:`~benchlib.spec.tune.SearchSpace` names with a seeded TPE sampler. Each
trial trains the pair epoch by epoch with the engine's own set-up and training step (the variant's knobs
applied), evaluates test accuracy after every epoch and reports it, so a median pruner can stop a
hopeless trial early. Objectives: final test ``accuracy``, training ``throughput`` (samples/s over timed
steps, warmup excluded, as in the benchmark), or ``both`` (maximized together; the result is a Pareto front).

Studies live in one storage file per results folder (:mod:`benchlib.store.tuning_storage`: SQLite for
one process, a journal file once parallel workers share the studies); running the same pair again
continues its study, and workers on a cluster each add their share of trials to the same one. The best
trial is exported to ``tuning/<cpu|gpu>-tuned.yaml``, the file the ``cpu-tuned`` / ``gpu-tuned`` variants read.
"""
from __future__ import annotations

import dataclasses
import gc
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from ..errors import missing
from ..log import ProgressFn, progress_of

try:
    import optuna
    from optuna.trial import FrozenTrial, TrialState
except ImportError as _exc:
    raise missing("optuna", "tuning (benchlib tune, the tune notebook)") from _exc

from ..engine.setup import build, check_runs, configuration, wrap
from ..engine.step import Trainer
from ..engine.train import TrainResult, evaluate, train
from ..env.devices import resolve_hardware
from ..env.manifest import machine_name
from ..errors import ConfigError, MeasurementOutcome
from ..spec.settings import RunConfig, RunSettings
from ..spec.tune import OBJECTIVE_METRICS, OBJECTIVES, SearchSpace, check_space, default_params
from ..store.atomic import atomic_write_text
from ..store.layout import ResultsLayout
from ..store.tuning_storage import open_storage
from .outcome import error_text, failure_status

# Trials that end this way are recorded as FAIL and the study goes on; any other exception is a bug and stops it.
TRIAL_FAILURES: tuple[type[Exception], ...] = (MeasurementOutcome, MemoryError, torch.OutOfMemoryError)
_PRUNER_STARTUP_TRIALS = 2
_PRUNER_WARMUP_STEPS = 0


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
    return batch, s.updated(**changes)


# ---------------------------------------------------------------- one trial (no Optuna inside)

@dataclass
class EpochReport:
    epoch: int
    test_accuracy: float
    train_samples_per_s: float  # over the timed steps so far (nan while all steps were warmup)


def train_by_epoch(cfg: RunConfig, epochs: int, device: torch.device,
                   on_epoch: Callable[[EpochReport], None]) -> EpochReport:
    """Train ``cfg`` for ``epochs`` epochs with the engine's training step, evaluating after each.

    ``on_epoch`` sees every epoch's figures (and may raise to stop, as pruning does). Step times leave out
    the first ``warmup_steps`` steps and the wait for data, as the benchmark's do.
    """
    s = dataclasses.replace(cfg.settings, epochs=epochs, train_steps=None)
    check_runs(s, str(device))
    with configuration(device, s):
        built = build(dataclasses.replace(cfg, settings=s), device, cfg.batch_size)
        train_net, infer_net = wrap(built.model, s, device)
        reports: list[EpochReport] = []

        def after_epoch(epoch: int, so_far: TrainResult) -> None:
            accuracy = evaluate(infer_net, built.loaders.test, device, s.knobs).accuracy
            reports.append(EpochReport(epoch, accuracy, so_far.samples_per_s))
            on_epoch(reports[-1])
            train_net.train()

        train(Trainer.of(train_net, built.model, s, device), built.loaders.train, s, built.per_epoch,
              after_epoch=after_epoch)
    return reports[-1] if reports else EpochReport(-1, math.nan, math.nan)


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


def storage_path(results_dir: str | Path) -> Path:
    return ResultsLayout.of(results_dir).tuning_storage


def hardware_kind(device: torch.device | str) -> str:
    """``cpu`` or ``gpu`` (cuda*, mps): the prefix of the tuned variant a study exports."""
    return "cpu" if torch.device(device).type == "cpu" else "gpu"


def study_name_for(base: RunConfig, machine: str | None = None) -> str:
    hardware = resolve_hardware(base.hardware) if base.hardware == "auto" else base.hardware
    return f"{base.study}__{machine or machine_name()}__{hardware}__{base.model}"


def median_pruner() -> optuna.pruners.MedianPruner:
    """Single-objective pruner: below the median of completed trials at the same epoch, once 2 completed."""
    return optuna.pruners.MedianPruner(n_startup_trials=_PRUNER_STARTUP_TRIALS, n_warmup_steps=_PRUNER_WARMUP_STEPS)


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


def trial_share(n_trials: int, workers: int, worker: int) -> int:
    """Trials worker ``worker`` of ``workers`` adds: ``n_trials`` split as evenly as whole trials allow."""
    return n_trials // workers + (1 if worker < n_trials % workers else 0)


def tune_pair(base: RunConfig, space: SearchSpace, *, n_trials: int, objective: str, results_dir: str | Path,
              seed: int = 0, pruning: bool = True, epochs_per_trial: int | None = None,
              progress: ProgressFn | None = None, worker: int | None = None, workers: int = 1) -> TuneOutcome:
    """Run ``n_trials`` more trials of the pair's study (created on first use) and export its best trial.

    Args:
        base: the pair and the run settings every trial starts from (``epochs`` unless ``epochs_per_trial``).
        space: what to search.
        n_trials: trials to add in this call (0: none, only export the best of those stored); a study
            that already exists keeps its trials.
        objective: ``accuracy``, ``throughput`` or ``both`` (Pareto front of the two).
        results_dir: the study's results folder; the storage and the export go under ``tuning/``.
        seed: seed of the TPE sampler (offset by the trials already in the study so a continued study
            does not repeat its first suggestions, and by the worker so workers do not repeat each other's).
        pruning: stop trials whose per-epoch figure falls below the median (single objective only).
        epochs_per_trial: epochs each trial trains (default: ``base.settings.epochs``).
        progress: receives one line per event.
        worker: this process is worker ``worker`` (0-based) of ``workers`` that share the study at once:
            it adds its trials and exports nothing (the run after them all does, with ``n_trials=0``).
            Only worker 0 queues the default trial, so it runs once. ``None``: the only process on the
            study; trials a dead worker left running are marked failed, and the best is exported.

    Raises:
        ConfigError: bad objective, empty or impossible search space, or a study of this name that
            optimizes another objective.
    """
    say = progress_of(progress)
    where = f"tuning {base.hardware}/{base.model}"
    if objective not in OBJECTIVES:
        raise ConfigError(f"{where}: key 'objective' is {objective!r}; allowed: one of: {', '.join(OBJECTIVES)}")
    if n_trials < 0:
        raise ConfigError(f"{where}: key 'n_trials' is {n_trials!r}; allowed: an integer >= 0")
    epochs = base.settings.epochs if epochs_per_trial is None else epochs_per_trial
    if epochs < 1:
        raise ConfigError(f"{where}: key 'epochs_per_trial' is {epochs!r}; allowed: an integer >= 1")
    check_space(space, base.settings, where)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    device = torch.device(resolve_hardware(base.hardware))
    study = _open(base, space, objective=objective, results_dir=Path(results_dir), pruning=pruning, where=where,
                  parallel=workers > 1, queue_default=n_trials > 0 and (worker or 0) == 0, say=say)
    n_before = len(study.trials)
    if worker is None:
        _fail_abandoned(study, say)
    if n_trials:
        liar = workers > 1  # parallel TPE: pending trials count as poor, so workers spread out
        study.sampler = optuna.samplers.TPESampler(seed=seed + n_before + _WORKER_SEED_STRIDE * (worker or 0),
                                                   constant_liar=liar)
        who = f"worker {worker} of {workers}, " if worker is not None else ""
        say(f"{study.study_name}: {who}{n_before} trial(s) stored; adding {n_trials} ({objective}, {epochs} "
            f"epoch(s) each, {'median pruning' if _prunes(pruning, objective) else 'no pruning'}) in "
            f"{ResultsLayout.of(results_dir).tuning_storage}")
        _optimize(study, base, space, n_trials=n_trials, objective=objective, epochs=epochs, device=device, say=say)
    return _outcome(study, base, space, objective, Path(results_dir), device, say, export=worker is None)


_WORKER_SEED_STRIDE = 1009  # worker w samples with seed + 1009 w: no two workers draw the same start points


def _prunes(pruning: bool, objective: str) -> bool:
    return pruning and len(OBJECTIVE_METRICS[objective]) == 1


def _open(base: RunConfig, space: SearchSpace, *, objective: str, results_dir: Path, pruning: bool, where: str,
          parallel: bool, queue_default: bool, say: ProgressFn) -> optuna.Study:
    """The pair's study, created on first use with its objective recorded.

    With ``queue_default`` the default trial is queued unless the study has one (queued, run or running):
    of parallel workers only one may queue it, or two would run it.
    """
    name = study_name_for(base)
    metrics = OBJECTIVE_METRICS[objective]
    if pruning and len(metrics) > 1:
        say(f"{name}: pruning is off: Optuna cannot prune multi-objective studies (objective 'both')")
    pruner = median_pruner() if _prunes(pruning, objective) else optuna.pruners.NopPruner()
    ResultsLayout.of(results_dir).tuning_dir.mkdir(parents=True, exist_ok=True)
    storage = open_storage(results_dir, parallel=parallel)
    study = optuna.create_study(storage=storage, study_name=name, load_if_exists=True, pruner=pruner,
                                directions=["maximize"] * len(metrics))
    known = study.user_attrs.get("objective")
    if known is not None and known != objective:
        raise ConfigError(f"{where}: study '{name}' in {ResultsLayout.of(results_dir).tuning_storage} optimizes "
                          f"'{known}', not '{objective}'; allowed: objective '{known}' to continue it, or another "
                          "results folder for a new study")
    if known is None:
        study.set_user_attr("objective", objective)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(metrics))
    has_default = any(t.user_attrs.get("default") for t in study.get_trials(deepcopy=False))
    if queue_default and not has_default:
        study.enqueue_trial(default_params(space, base), user_attrs={"default": True})
    return study


def _fail_abandoned(study: optuna.Study, say: ProgressFn) -> None:
    """Mark trials still ``RUNNING`` as failed: with no other process on the study, their worker died."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study.tell(t.number, state=TrialState.FAIL)
        say(f"{study.study_name}: trial {t.number} was left running by a worker that ended without finishing it "
            "(killed, preempted or out of time): marked failed")


def _optimize(study: optuna.Study, base: RunConfig, space: SearchSpace, *, n_trials: int, objective: str,
              epochs: int, device: torch.device, say: ProgressFn) -> None:
    name = study.study_name
    metrics = OBJECTIVE_METRICS[objective]
    multi = len(metrics) > 1

    def run_trial(trial: optuna.Trial) -> float | tuple[float, ...]:
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


def _outcome(study: optuna.Study, base: RunConfig, space: SearchSpace, objective: str, results_dir: Path,
             device: torch.device, say: ProgressFn, *, export: bool) -> TuneOutcome:
    """The study's counts and best trial(s); with ``export``, the best written as the ``*-tuned`` params."""
    name = study.study_name
    metrics = OBJECTIVE_METRICS[objective]
    layout = ResultsLayout.of(results_dir)
    trials = study.get_trials(deepcopy=False)
    best = _best_trials(study)
    exported = None
    if best and export:
        exported = _export(layout.tuned_export(hardware_kind(device)), best[0], base, space, metrics, name,
                           layout.tuning_storage)
        say(f"{name}: best trial {best[0].number} {dict(zip(metrics, best[0].values))} exported to {exported}")
    elif export:
        say(f"{name}: no trial completed: nothing exported")
    return TuneOutcome(
        study_name=name, storage_path=layout.tuning_storage, n_trials_total=len(trials),
        n_complete=sum(t.state == TrialState.COMPLETE for t in trials),
        n_pruned=sum(t.state == TrialState.PRUNED for t in trials),
        best=[_trial_summary(t) for t in best], exported_path=exported,
        n_failed=sum(t.state == TrialState.FAIL for t in trials),
    )


# ---------------------------------------------------------------- reading studies back

