"""``benchlib tune``: one Optuna study per pair, in one process or shared by workers on a cluster.

In one process each pair runs through ``notebooks/tune.ipynb``: its trials, the best against the default
trial, Optuna's figures and the exported ``*-tuned`` params. On a cluster N workers (SLURM array tasks)
each add their share of every pair's trials, in-process and without a notebook; one run after them all
(:func:`run_tuning` with ``n_trials=0``) exports each pair's best and builds the report once.
"""
from __future__ import annotations

from pathlib import Path

from ..env.threads import apply_threads
from ..errors import ConfigError
from ..run.outcome import error_text
from ..run.tune import trial_share, tune_pair
from ..spec.settings import RunConfig
from ..spec.study import StudyConfig
from ..spec.tune import TuneSpec
from ..store.atomic import atomic_copy
from ..store.layout import StudyPaths, pair_notebook_name, tuned_params_dir
from . import progress, publish
from .study import GRID_ONLY, PAIR_FAILURES, execute, pair_params

_log = progress.log


def tune_spec(cfg: StudyConfig) -> TuneSpec:
    """The study's ``tune:`` section, or one line saying it is missing."""
    if cfg.tune is None:
        raise ConfigError(f"{cfg.source}: key 'tune' is missing; allowed: a mapping with search_space "
                          "(and n_trials, objective, pruning, epochs_per_trial, seed, workers)")
    return cfg.tune


def run_tuning(cfg: StudyConfig, *, results_root: Path = Path("results"), reports_root: Path = Path("reports"),
               cell_timeout_s: int | None = 3600, cwd: Path | None = None, n_trials: int | None = None) -> int:
    """Each pair through the tune notebook; returns the number of pairs that failed.

    ``n_trials`` overrides the file's (0: add none; export each pair's best and report its stored study,
    what the job after a cluster's workers does).
    """
    tune = tune_spec(cfg)
    cwd = (cwd or Path.cwd()).resolve()
    paths = StudyPaths.for_study(cfg.study, results_root.resolve(), reports_root.resolve())
    paths.results.root.mkdir(parents=True, exist_ok=True)
    trials = tune.n_trials if n_trials is None else n_trials
    failed = 0
    for i, (hardware, model) in enumerate(cfg.pairs(), 1):
        what = f"{trials} trial(s), {tune.objective}" if trials else "no new trials: export and report"
        _log(f"tuning pair {i}/{len(cfg.pairs())}: {hardware} / {model} ({what})")
        params = {k: v for k, v in pair_params(cfg, hardware, model, paths).items() if k not in GRID_ONLY}
        params.update(tune.as_params())
        params["n_trials"] = trials
        out = paths.reports.tune_dir / pair_notebook_name(hardware, model)
        try:
            execute(publish.notebooks_dir() / "tune.ipynb", out, params, cwd=cwd, cell_timeout_s=cell_timeout_s,
                    label=f"tuning {hardware} / {model}")
        except PAIR_FAILURES as exc:
            failed += 1
            _log(f"tuning {hardware} / {model} failed: {error_text(exc)}")
        finally:
            if out.exists():
                publish.render_html(out, publish.pair_title("tuning", hardware, model, cfg.study), paths.reports,
                                    summary_link=False)
    publish.write_index(paths.reports.reports_root)
    tuned_dir = tuned_params_dir(results_root.resolve())
    for exported in paths.results.tuned_exports():
        tuned_dir.mkdir(parents=True, exist_ok=True)
        atomic_copy(exported, tuned_dir / exported.name)
        _log(f"{exported.name} copied to {tuned_dir}: the *-tuned variants read it from there")
    return failed


def check_workers(cfg: StudyConfig, workers: int, flag: str) -> None:
    """Workers that each get at least one trial of every pair."""
    tune = tune_spec(cfg)
    if not 1 <= workers <= tune.n_trials:
        raise ConfigError(f"{flag} {workers}; allowed: 1..{tune.n_trials} (each worker runs at least one of the "
                          f"{tune.n_trials} trial(s) of tune.n_trials)")


def run_worker(cfg: StudyConfig, worker: int, workers: int, *, results_root: Path = Path("results")) -> int:
    """Worker ``worker`` of ``workers``: its share of every pair's trials; returns the pairs that failed.

    Runs in this process (no notebook, nothing exported): the run after all workers reports.
    """
    tune = tune_spec(cfg)
    check_workers(cfg, workers, "--slurm")
    if not 0 <= worker < workers:
        raise ConfigError(f"command line: --worker {worker}; allowed: 0..{workers - 1}")
    apply_threads(cfg.settings.knobs.threads, cfg.settings.knobs.interop_threads)
    results = results_root.resolve() / cfg.study
    share = trial_share(tune.n_trials, workers, worker)
    failed = 0
    for hardware, model in cfg.pairs():
        base = RunConfig(cfg.study, hardware, model, cfg.batch_sizes[0], cfg.settings)
        try:
            outcome = tune_pair(base, tune.search_space, n_trials=share, objective=tune.objective,
                                results_dir=results, seed=tune.seed, pruning=tune.pruning,
                                epochs_per_trial=tune.epochs_per_trial, progress=_log, worker=worker, workers=workers)
        except (RuntimeError, MemoryError) as exc:  # a pair that cannot run at all; the worker goes on
            failed += 1
            _log(f"worker {worker}: tuning {hardware} / {model} failed: {error_text(exc)}")
            continue
        _log(f"worker {worker}: {outcome.study_name}: {outcome.n_trials_total} trial(s) stored "
             f"({outcome.n_complete} complete, {outcome.n_pruned} pruned, {outcome.n_failed} failed)")
    return failed
