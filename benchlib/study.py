"""A study: every hardware/model pair through the benchmark notebook, then the summary and HTML.

Pairs run one after another, each in its own kernel (papermill), so a pair that crashes its kernel
costs only itself: it leaves its executed notebook and failure rows, and the study goes on. Rows are
written one per configuration as each finishes, so a re-run resumes: complete rows are kept and only
the missing (or failed) configurations run again.
"""
from __future__ import annotations

import datetime as dt
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from papermill.exceptions import PapermillExecutionError

from . import publish
from .config import RunConfig, StudyConfig, settings_as_params
from .devices import resolve_hardware
from .manifest import machine_name
from .results import read_results, remove_stale_temp_files, safe_name, write_row, write_table
from .roofline import ensure_ceilings
from .profiling import profile_dir
from .runner import completed_row, error_text, failure_row
from .variants import variant_spec


@dataclass(frozen=True)
class StudyPaths:
    results: Path
    reports: Path

    @classmethod
    def for_study(cls, study: str, results_root: Path, reports_root: Path) -> "StudyPaths":
        return cls(results_root / study, reports_root / study)

    @property
    def runs(self) -> Path:
        return self.reports / "runs"


@dataclass(frozen=True)
class StudyOutcome:
    pairs_run: int
    pairs_skipped: int
    pairs_failed: int
    configs_failed: int
    profiles_failed: int = 0

    @property
    def ok(self) -> bool:
        return self.pairs_failed == 0 and self.configs_failed == 0 and self.profiles_failed == 0


def _log(msg: str) -> None:
    print(f"[benchlib] {msg}", file=sys.stderr, flush=True)


def pair_notebook_name(hardware: str, model: str) -> str:
    return f"{safe_name(hardware)}__{model}.ipynb"


def move_aside(paths: StudyPaths) -> list[Path]:
    """``--fresh``: move the study's old results and reports aside (never delete them)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    moved = []
    for folder in (paths.results, paths.reports):
        if folder.exists():
            target = folder.with_name(f"{folder.name}.old-{stamp}")
            shutil.move(str(folder), str(target))
            moved.append(target)
    return moved


def _record_pair_failure(configs: list[RunConfig], results: Path, exc: BaseException) -> int:
    """Failure rows for the pair's configurations that have no complete row."""
    machine = machine_name()
    written = 0
    for run in configs:
        if completed_row(results, run, machine) is None:
            write_row(results, failure_row(run, exc, machine))
            written += 1
    return written


def _pair_params(cfg: StudyConfig, hardware: str, model: str, paths: StudyPaths) -> dict:
    return {"study": cfg.study, "hardware": hardware, "model": model, "batch_sizes": list(cfg.batch_sizes),
            "sweep": {k: list(v) for k, v in cfg.sweep}, "repeats": cfg.repeats, "resume": True,
            "variants": [variant_spec(v) for v in cfg.variants],
            "results_dir": str(paths.results), "figures_dir": str(paths.reports / "figures"),
            **settings_as_params(cfg.settings)}


def run_study(cfg: StudyConfig, *, results_root: Path = Path("results"), reports_root: Path = Path("reports"),
              cell_timeout_s: int | None = 3600, cwd: Path | None = None, fresh: bool = False,
              only_pair: int | None = None, summary: bool = True) -> StudyOutcome:
    """Run (or resume) every pair (or only pair number ``only_pair``), then the summary."""
    cwd = (cwd or Path.cwd()).resolve()
    paths = StudyPaths.for_study(cfg.study, results_root.resolve(), reports_root.resolve())
    if fresh:
        for old in move_aside(paths):
            _log(f"--fresh: moved old output to {old}")
    paths.results.mkdir(parents=True, exist_ok=True)
    paths.runs.mkdir(parents=True, exist_ok=True)
    if removed := remove_stale_temp_files(paths.results):
        _log(f"removed {removed} temporary file(s) an interrupted run left behind")
    bench = publish.notebooks_dir() / "benchmark.ipynb"
    pairs = cfg.pairs() if only_pair is None else [cfg.pairs()[only_pair]]
    machine = machine_name()
    for hardware in dict.fromkeys(resolve_hardware(h) for h, _ in pairs):
        _log(f"ceilings of {hardware} (matmul and copy, for the roofline)")
        ensure_ceilings(paths.results, hardware)
    run = skipped = failed = 0
    t_study = time.perf_counter()
    for i, (hardware, model) in enumerate(pairs, 1):
        configs = cfg.configs(hardware, model)
        todo = [c for c in configs if completed_row(paths.results, c, machine) is None]
        if not todo:
            _log(f"pair {i}/{len(pairs)}: {hardware} / {model}: all {len(configs)} configuration(s) have rows: skipped")
            skipped += 1
            continue
        _log(f"pair {i}/{len(pairs)}: {hardware} / {model}: {len(todo)} of {len(configs)} configuration(s) to run")
        out = paths.runs / pair_notebook_name(hardware, model)
        t0 = time.perf_counter()
        run += 1
        try:
            publish.execute(bench, out, _pair_params(cfg, hardware, model, paths), cwd=cwd, cell_timeout_s=cell_timeout_s)
        except (PapermillExecutionError, RuntimeError, TimeoutError) as exc:  # cell error, dead kernel, timeout
            failed += 1
            n = _record_pair_failure(configs, paths.results, exc)
            _log(f"pair {hardware} / {model} failed ({type(exc).__name__}); {n} failure row(s) written; going on")
        if out.exists():
            publish.render_html(out)
        _log(f"pair {i}/{len(pairs)} done in {time.perf_counter() - t0:.0f} s")
    profiles_failed = 0
    if cfg.profile:
        for hardware, model in pairs:
            profiles_failed += not _profile_pair(cfg, hardware, model, paths, cwd, cell_timeout_s)
    if summary:
        summarize([paths.results], paths.reports, title=f"benchlib study: {cfg.study}", cwd=cwd,
                  cell_timeout_s=cell_timeout_s)
    rows = read_results([paths.results])
    mine = rows[(rows["study"] == cfg.study) & (rows["machine"] == machine)]
    configs_failed = int((mine["status"] == "failed").sum())
    _log(f"study '{cfg.study}' done in {time.perf_counter() - t_study:.0f} s: {run} pair(s) run, {skipped} already "
         f"complete, {failed} failed; {configs_failed} failed configuration(s); "
         f"report {reports_root.resolve() / 'index.html'}")
    return StudyOutcome(run, skipped, failed, configs_failed, profiles_failed)


def _profile_pair(cfg: StudyConfig, hardware: str, model: str, paths: StudyPaths, cwd: Path,
                  cell_timeout_s: int | None) -> bool:
    """Run the profile notebook for one pair at its first batch size (skipped when already profiled)."""
    run = RunConfig(cfg.study, hardware, model, cfg.batch_sizes[0], cfg.settings)
    if (profile_dir(paths.results, machine_name(), run) / "profile.json").exists():
        _log(f"profile {hardware} / {model}: already recorded, skipped")
        return True
    _log(f"profile {hardware} / {model} (batch {run.batch_size})")
    out = paths.reports / "profile" / pair_notebook_name(hardware, model)
    params = {k: v for k, v in _pair_params(cfg, hardware, model, paths).items()
              if k not in ("batch_sizes", "sweep", "repeats", "resume", "variants")}
    params["batch_size"] = run.batch_size
    try:
        publish.execute(publish.notebooks_dir() / "profile.ipynb", out, params, cwd=cwd, cell_timeout_s=cell_timeout_s)
        return True
    except (PapermillExecutionError, RuntimeError, TimeoutError) as exc:
        _log(f"profile {hardware} / {model} failed: {error_text(exc)}")
        return False
    finally:
        if out.exists():
            publish.render_html(out)


def summarize(results_dirs: list[Path], report_dir: Path, *, title: str, cwd: Path | None = None,
              cell_timeout_s: int | None = 3600, notebook: str = "summary") -> Path:
    """Run an analysis notebook (``summary``, ``sweep``) over ``results_dirs`` into ``report_dir``.

    Publishes its HTML and refreshes the reports index.
    """
    for d in results_dirs:
        write_table(d)
    report_dir.mkdir(parents=True, exist_ok=True)
    out = report_dir / f"{notebook}.ipynb"
    params = {"results_dirs": [str(Path(d).resolve()) for d in results_dirs],
              "figures_dir": str((report_dir / "figures").resolve()), "title": title}
    _log(f"{notebook} of {len(results_dirs)} results folder(s) -> {out}")
    try:
        publish.execute(publish.notebooks_dir() / f"{notebook}.ipynb", out, params, cwd=(cwd or Path.cwd()),
                        cell_timeout_s=cell_timeout_s)
    finally:
        if out.exists():
            publish.render_html(out)
        publish.write_index(report_dir.parent)
    return out.with_suffix(".html")


def run_tuning(cfg: StudyConfig, *, results_root: Path = Path("results"), reports_root: Path = Path("reports"),
               cell_timeout_s: int | None = 3600, cwd: Path | None = None) -> int:
    """One Optuna study per pair through the tune notebook; returns the number of pairs that failed."""
    from .errors import ConfigError

    if cfg.tune is None:
        raise ConfigError(f"{cfg.source}: key 'tune' is missing; allowed: a mapping with search_space "
                          "(and n_trials, objective, pruning, epochs_per_trial, seed)")
    cwd = (cwd or Path.cwd()).resolve()
    paths = StudyPaths.for_study(cfg.study, results_root.resolve(), reports_root.resolve())
    paths.results.mkdir(parents=True, exist_ok=True)
    failed = 0
    for i, (hardware, model) in enumerate(cfg.pairs(), 1):
        _log(f"tuning pair {i}/{len(cfg.pairs())}: {hardware} / {model} ({cfg.tune.n_trials} trial(s), {cfg.tune.objective})")
        params = {k: v for k, v in _pair_params(cfg, hardware, model, paths).items()
                  if k not in ("sweep", "repeats", "resume", "variants")}
        params.update(cfg.tune.as_params())
        out = paths.reports / "tune" / pair_notebook_name(hardware, model)
        try:
            publish.execute(publish.notebooks_dir() / "tune.ipynb", out, params, cwd=cwd, cell_timeout_s=cell_timeout_s)
        except (PapermillExecutionError, RuntimeError, TimeoutError) as exc:
            failed += 1
            _log(f"tuning {hardware} / {model} failed: {error_text(exc)}")
        finally:
            if out.exists():
                publish.render_html(out)
    publish.write_index(paths.reports.parent)
    tuned_dir = results_root.resolve() / "tuned"
    for exported in sorted((paths.results / "tuning").glob("*-tuned.yaml")):
        tuned_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(exported, tuned_dir / exported.name)
        _log(f"{exported.name} copied to {tuned_dir}: the *-tuned variants read it from there")
    return failed
