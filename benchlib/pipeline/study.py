"""A study: every hardware/model pair through the benchmark notebook, then the summary and HTML.

Pairs run one after another, each in its own kernel (papermill), so a pair that crashes its kernel
costs only itself: it leaves its executed notebook and failure rows, and the study goes on. Rows are
written one per configuration as each finishes, so a re-run resumes: complete rows measured with the
same settings are kept, rows of settings the file no longer has are kept aside, and only the missing
(or failed) configurations run again.

What is measured of the machine is measured only for work that needs it: the ceilings before the first
notebook that measures (from the machine cache where it has them), the noise floor after the pairs and only
where the study's comparisons rest on it (``StudyConfig.floor_needed``). A study whose every row is complete
and whose summary was made from the very same files measures nothing and starts no kernel.
"""
from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from papermill.exceptions import PapermillExecutionError

from .. import log as messages
from ..env.devices import resolve_hardware
from ..env.manifest import machine_name
from ..errors import CalibrationFailed, ConfigError, DiskFull
from ..report.evidence.rules import run_rules
from ..report.findings import caveats
from ..report.readback.folders import superseded_rows
from ..roofline.cache import ensure_ceilings, raised, remeasure_ceilings
from ..run.outcome import error_text
from ..run.record import record_pair_failure, refresh_roofs, set_aside_stale_rows
from ..spec.settings import RunConfig
from ..spec.study import StudyConfig
from ..spec.variants import variant_spec
from ..store.atomic import atomic_write_text, json_text, remove_stale_temp_files, write_if_changed
from ..store.layout import ReportLayout, ResultsLayout, StudyPaths, pair_notebook_name
from ..store.lock import folder_lock
from ..store.rows import complete_row, read_results, write_table
from . import progress, publish
from .calibrate import ensure_noise_floor
from .predict import keep_targets, save_predictions, study_targets
from .rounds import RoundKeeper

# torch's C++ log warns in every profile that memory allocated before profiling is not followed: its page
# says what that means for the memory columns instead.
PROFILE_KERNEL_ENV = {"TORCH_CPP_LOG_LEVEL": "ERROR"}
# Errors of a pair notebook that end the pair, not the study: a raising cell, a dead kernel, a timeout.
PAIR_FAILURES = (PapermillExecutionError, RuntimeError, TimeoutError)


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


_log = progress.log


def execute(notebook: Path, out: Path, params: dict[str, Any], *, cwd: Path, cell_timeout_s: int | None,
            label: str, kernel_env: dict[str, str] | None = None) -> None:
    """One notebook through papermill: its bar at a terminal, else a plain line a minute (``label``); the
    kernel's own progress lines relayed as they come."""
    with progress.heartbeat(label), progress.relay(label):
        publish.execute(notebook, out, params, cwd=cwd, cell_timeout_s=cell_timeout_s,
                        progress=progress.interactive(), kernel_env=kernel_env)


def move_aside(paths: StudyPaths, keep: tuple[Path, ...] = ()) -> list[Path]:
    """``--fresh``: move the study's old results and reports aside (never delete them); ``keep`` stays put."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    moved = []
    for folder in (paths.results.root, paths.reports.root):
        if folder.exists():
            target = folder.with_name(f"{folder.name}.old-{stamp}")
            target.mkdir(parents=True)
            for item in folder.iterdir():
                if item not in keep:
                    shutil.move(str(item), str(target / item.name))
            moved.append(target)
    return moved


GRID_ONLY = ("sweep", "repeats", "only_round", "resume", "variants", "interleave")  # the benchmark notebook's alone


def pair_params(cfg: StudyConfig, hardware: str, model: str, paths: StudyPaths) -> dict[str, Any]:
    return {"study": cfg.study, "hardware": hardware, "model": model, "batch_sizes": list(cfg.batch_sizes),
            "sweep": {k: list(v) for k, v in cfg.sweep}, "repeats": cfg.repeats, "resume": True,
            "interleave": cfg.interleave,
            "variants": [variant_spec(v) for v in cfg.variants],
            "results_dir": str(paths.results.root), "figures_dir": str(paths.reports.figures_dir),
            **cfg.settings.flat()}


def writable_folder(folder: Path, flag: str) -> None:
    """Create ``folder`` (and its parents), or say in one line why it cannot be (a file, read-only, no space)."""
    for parent in (folder, *folder.parents):
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"{flag} '{parent}' is a file; allowed: a folder (it is created when missing)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{flag}: results folder '{folder}' cannot be written ({exc.strerror}); allowed: a "
                          "writable folder") from exc


def run_study(cfg: StudyConfig, *, results_root: str | Path = "results", reports_root: str | Path = "reports",
              cell_timeout_s: int | None = 3600, cwd: Path | None = None, fresh: bool = False,
              only_pair: int | None = None, summary: bool = True) -> StudyOutcome:
    """Run (or resume) every pair (or only pair number ``only_pair``), then the summary (``benchlib study``;
    from Python: ``benchlib.run_study(benchlib.load_study("params/x.yaml"))``).

    The study holds its results folder's lock while it runs (``store.lock``): a second study on the same
    folder refuses instead of measuring under the first one's load; a SLURM array task holds it shared with
    the other pairs' tasks and its own pair's alone, so a whole study and a pair task never measure side by side.
    """
    if fresh and only_pair is not None:
        raise ConfigError("--fresh with --pair: a pair task would move aside the results the other pairs' tasks "
                          "are writing; allowed: --fresh on a whole study, or move the folder aside before the array")
    cwd = (cwd or Path.cwd()).resolve()
    paths = StudyPaths.for_study(cfg.study, Path(results_root).resolve(), Path(reports_root).resolve())
    writable_folder(paths.results.root, "--results-root")
    writable_folder(paths.reports.runs_dir, "--reports-root")
    with folder_lock(paths.results.root, only_pair):
        return _run_study(cfg, paths, cwd=cwd, cell_timeout_s=cell_timeout_s, fresh=fresh, only_pair=only_pair,
                          summary=summary)


def _run_study(cfg: StudyConfig, paths: StudyPaths, *, cwd: Path, cell_timeout_s: int | None, fresh: bool,
               only_pair: int | None, summary: bool) -> StudyOutcome:
    targets = study_targets(cfg.predict_on)  # neither a file nor a cached machine: refused before anything moves
    if fresh:
        for old in move_aside(paths, keep=tuple(paths.results.lock_files())):
            _log(f"--fresh: moved old output to {old}")
        writable_folder(paths.results.root, "--results-root")
        writable_folder(paths.reports.runs_dir, "--reports-root")
    keep_targets(paths.results.root, targets)
    # a notebook being run saves to a temporary file that may wait long for its next save: the report's are
    # removed only where no pair task of the study can be running one (a whole study holds the folder alone)
    removed = remove_stale_temp_files(paths.results.root)
    if only_pair is None:
        removed += remove_stale_temp_files(paths.reports.root)
    if removed:
        _log(f"removed {removed} temporary file(s) an interrupted run left behind")
    bench = publish.notebooks_dir() / "benchmark.ipynb"
    pairs = cfg.pairs() if only_pair is None else [cfg.pairs()[only_pair]]
    machine = machine_name()
    devices = list(dict.fromkeys(resolve_hardware(h) for h, _ in pairs))
    t_study = time.perf_counter()
    for hardware, model in pairs:
        set_aside_stale_rows(paths.results.root, cfg.configs(hardware, model), machine, _log)
    ceilings = CeilingsFirst(paths.results.root, devices)
    keeper = RoundKeeper(cfg.auto_repeats, cfg.repeats)
    run = skipped = failed = 0
    while keeper.another(paths.results, cfg.study, machine):
        r = keeper.done
        if cfg.repeats > 1:
            _log(f"round {r + 1}/{cfg.repeats if cfg.auto_repeats is None else f'at most {cfg.repeats}'} (seed "
                 f"{cfg.settings.seed + r}, fresh processes)" + (f"; {keeper.precision.worst_pct:.1f}% so far"
                                                                  if keeper.precision is not None else ""))
        for i, (hardware, model) in enumerate(pairs, 1):
            outcome = _run_pair_round(cfg, hardware, model, paths, bench, cwd=cwd, cell_timeout_s=cell_timeout_s,
                                      label=f"pair {i}/{len(pairs)}", only_round=r if cfg.repeats > 1 else None,
                                      before=ceilings.ensure)
            run += outcome == "run"
            skipped += outcome == "skipped"
            failed += outcome == "failed"
        keeper.done += 1
    if keeper.auto is not None:
        _log(f"repeats: auto stopped after {keeper.done} round(s): {keeper.stopped}")
    if cfg.ceilings_at_end and ceilings.ready:  # rows were measured under them: a roof is a maximum
        for hardware in devices:
            _log(f"ceilings of {hardware} once more at the end of the study (a roof is a maximum: the higher is "
                 "kept)")
            now, before = remeasure_ceilings(paths.results.root, hardware)
            if what := raised(before, now):
                n = refresh_roofs(paths.results.root, machine, torch.device(now.device), now)
                _log(f"the roof rose ({what}): {n} row(s) placed under it again")
    calibrate(paths.results.root, devices, why=cfg.floor_needed(), measure=bool(run or failed))
    profiles_failed = 0
    if cfg.profile or cfg.layers:
        for hardware, model in pairs:
            profiles_failed += not _profile_pair(cfg, hardware, model, paths, cwd, cell_timeout_s, ceilings.ensure)
    rows = read_results([paths.results.root])
    mine = rows[(rows["study"] == cfg.study) & (rows["machine"] == machine)]
    ran = {c.run_id for h, m in pairs for c in cfg.configs(h, m)}  # an array task answers for its own pair only
    configs_failed = int(((mine["status"] == "failed") & mine["run_id"].isin(ran)).sum())
    rules = run_rules(mine[mine["study"] == cfg.study], superseded_rows([paths.results.root]))
    rules_text = json_text({"study": cfg.study, "params": cfg.source, "description": cfg.description,
                            "interleave": cfg.interleave, **rules, "rounds": keeper.record()}, indent=1) + "\n"
    write_if_changed(paths.results.run_rules_path, rules_text)  # before the summary, which shows them
    if summary:
        summarize([paths.results.root], paths.reports.root, title=f"benchlib study: {cfg.study}", cwd=cwd,
                  cell_timeout_s=cell_timeout_s, description=cfg.description, reuse=True)
    measured = mine[mine["status"] == "ok"]
    for warning in (caveats.interference_warning(measured), caveats.drift_warning(measured)):
        if warning:
            messages.warning(warning)
    _log(f"study '{cfg.study}' done in {time.perf_counter() - t_study:.0f} s: {run} pair(s) run, {skipped} already "
         f"complete, {failed} failed; {configs_failed} failed configuration(s); report {paths.reports.index}")
    return StudyOutcome(run, skipped, failed, configs_failed, profiles_failed)


class CeilingsFirst:
    """The study's ceilings, made ready (the folder's, the machine cache's, else measured) before the first
    notebook that measures, and not at all when every row is complete."""

    def __init__(self, results_dir: Path, devices: list[str]) -> None:
        self.results_dir, self.devices, self.ready = results_dir, devices, False

    def ensure(self) -> None:
        if not self.ready:
            for hardware in self.devices:
                ensure_ceilings(self.results_dir, hardware, progress=_log)
            self.ready = True


def calibrate(results_dir: Path, hardware: list[str], *, why: str | None = "calibrate: true",
              measure: bool = True) -> None:
    """The machine's noise floor once per device type of the study, reused while fresh (the folder's, else the
    machine cache's, copied in). Measured only where the study's comparisons need it (``why``,
    ``StudyConfig.floor_needed``) and this run measured rows (``measure``); a calibration that fails is said in
    one line and the study goes on (its single-run comparisons stay inconclusive)."""
    first: dict[str, str] = {}  # device type -> the study's first hardware of it
    for h in hardware:
        first.setdefault(torch.device(resolve_hardware(h)).type, resolve_hardware(h))
    for kind, name in first.items():
        try:
            floor = ensure_noise_floor(results_dir, name, progress=_log if why else None,
                                       measure=measure and why is not None)
        except CalibrationFailed as exc:
            _log(f"noise floor of {kind} not measured: {exc}; single-run comparisons stay inconclusive; going on")
            continue
        if floor is None and why:
            _log(f"noise floor of {kind}: none measured ({why}, but this run measured no row); its single-run "
                 f"comparisons stay inconclusive until `benchlib calibrate --results-dir {results_dir}`")


def _run_pair_round(cfg: StudyConfig, hardware: str, model: str, paths: StudyPaths, bench: Path, *, cwd: Path,
                    cell_timeout_s: int | None, label: str, only_round: int | None,
                    before: Callable[[], None] = lambda: None) -> str:
    """One pair's configurations of one round (all of them without repeats) in a fresh kernel: "run",
    "skipped" (every row complete) or "failed" (failure rows written for what has no row). ``before`` runs
    first where there is work (the ceilings made ready)."""
    machine = machine_name()
    configs = [c for c in cfg.configs(hardware, model)
               if only_round is None or c.settings.seed == cfg.settings.seed + only_round]
    todo = [c for c in configs if complete_row(paths.results, machine, c.run_id) is None]
    if not todo:
        _log(f"{label}: {hardware} / {model}: all {len(configs)} configuration(s) have rows measured with these "
             "settings: skipped")
        return "skipped"
    before()
    _log(f"{label}: {hardware} / {model}: {len(todo)} of {len(configs)} configuration(s) to run")
    out = paths.reports.runs_dir / pair_notebook_name(hardware, model)
    t0 = time.perf_counter()
    params = {**pair_params(cfg, hardware, model, paths), "only_round": -1 if only_round is None else only_round}
    outcome = "run"
    try:
        execute(bench, out, params, cwd=cwd, cell_timeout_s=cell_timeout_s, label=f"{label} ({hardware} / {model})")
    except PAIR_FAILURES as exc:
        if getattr(exc, "ename", "") == "DiskFull":  # the kernel ran out of disk: stop, say how to resume
            raise DiskFull(str(getattr(exc, "evalue", exc))) from exc
        outcome = "failed"
        n = record_pair_failure(configs, paths.results.root, exc, machine)
        _log(f"pair {hardware} / {model} failed ({type(exc).__name__}); {n} failure row(s) written; going on")
    if out.exists():
        publish.render_html(out, publish.pair_title("measurements", hardware, model, cfg.study), paths.reports)
    _log(f"{label} done in {time.perf_counter() - t0:.0f} s")
    return outcome


def layer_configs(cfg: StudyConfig, hardware: str, model: str) -> list[RunConfig]:
    """The configurations a study with ``layers: true`` measures layer by layer: every one (each batch size, each
    variant and each repeat, a run each, so a comparison's split has runs to resample, two batch sizes are
    compared per sample, and a quantized variant's int8 forward against its baseline's), but those that compile
    (no layer owns a fused kernel) or sweep a setting (the profile notebook takes no swept names, so its run id
    would not be the row's)."""
    return [c for c in cfg.configs(hardware, model) if c.settings.knobs.compile == "off" and not c.swept]


def _profile_pair(cfg: StudyConfig, hardware: str, model: str, paths: StudyPaths, cwd: Path,
                  cell_timeout_s: int | None, before: Callable[[], None] = lambda: None) -> bool:
    """Run the profile notebook for one pair at its first batch size: the torch.profiler tables (``profile``) of
    the study's own settings, and the per-layer table (``layers``, CPU and CUDA) of each of ``layer_configs``,
    each in a fresh kernel (a run of its own) and each skipped when already recorded."""
    run = RunConfig(cfg.study, hardware, model, cfg.batch_sizes[0], cfg.settings)
    machine = machine_name()
    torch_profile = cfg.profile and not (paths.results.profile_dir(machine, run.run_id) / "profile.json").exists()
    todo = [c for c in layer_configs(cfg, hardware, model) if cfg.layers
            and not paths.results.layers_path(machine, c.run_id).exists()]
    if todo and torch.device(resolve_hardware(hardware)).type not in ("cpu", "cuda"):
        _log(f"layers {hardware} / {model}: not measured (per-layer times are attributed on CPU and CUDA only)")
        todo = []
    if not (torch_profile or todo):
        _log(f"profile {hardware} / {model}: already recorded, skipped")
        return True
    before()
    jobs = ([(run, True, any(c.run_id == run.run_id for c in todo))] if torch_profile else []) + [
        (c, False, True) for c in todo if not (torch_profile and c.run_id == run.run_id)]
    return all([_profile_notebook(cfg, c, paths, cwd, cell_timeout_s, torch_profile=tp, layers=la, first=i == 0)
                for i, (c, tp, la) in enumerate(jobs)])


def _profile_notebook(cfg: StudyConfig, run: RunConfig, paths: StudyPaths, cwd: Path, cell_timeout_s: int | None, *,
                      torch_profile: bool, layers: bool, first: bool) -> bool:
    """One execution of the profile notebook for ``run``; the pair's first one is its published page."""
    hardware, model = run.hardware, run.model
    what = " and ".join(w for w, on in (("profile", torch_profile), ("layers", layers)) if on)
    _log(f"{what} {hardware} / {model} (batch {run.batch_size}, {run.settings.variant}, seed {run.settings.seed})")
    name = pair_notebook_name(hardware, model)
    out = paths.reports.profiles_dir / (name if first else name.replace(".ipynb", f"__{run.run_id}.ipynb"))
    params = {k: v for k, v in pair_params(cfg, hardware, model, paths).items()
              if k not in ("batch_sizes", *GRID_ONLY)}
    params.update(run.settings.flat(), batch_size=run.batch_size, torch_profile=torch_profile, layers=layers)
    try:
        execute(publish.notebooks_dir() / "profile.ipynb", out, params, cwd=cwd, cell_timeout_s=cell_timeout_s,
                label=f"profile {hardware} / {model}", kernel_env=PROFILE_KERNEL_ENV)
        return True
    except PAIR_FAILURES as exc:
        _log(f"{what} {hardware} / {model} failed: {error_text(exc)}")
        return False
    finally:
        if first:
            trace = paths.results.profile_dir(machine_name(), run.run_id) / "trace.json"
            publish.publish_trace(trace, paths.reports.profile_trace(hardware, model))
        if out.exists() and first:
            publish.render_html(out, publish.pair_title("profile", hardware, model, cfg.study), paths.reports)


def summarize(results_dirs: list[Path], report_dir: Path, *, title: str, cwd: Path | None = None,
              cell_timeout_s: int | None = 3600, notebook: str = "summary", description: str | None = None,
              reuse: bool = False) -> Path:
    """Run an analysis notebook (``summary``, ``sweep``) over ``results_dirs`` into ``report_dir``.

    Publishes its HTML with a copy of the data it shows, and refreshes the reports index. ``description``
    (the study's) defaults to the one its last study recorded in ``run_rules.json``. ``reuse``: a page made
    from the very same files, notebook, title and benchlib (``publish.page_inputs``) is kept, and no kernel
    starts.
    """
    report = ReportLayout(report_dir)
    out = report.analysis_notebook(notebook)
    for d in results_dirs:  # before the page's inputs are read: the predictions are one of them
        save_predictions(Path(d), _log)
    description = description if description is not None else _recorded_description(results_dirs)
    inputs = publish.page_inputs([Path(d) for d in results_dirs], notebook, title, description)
    if reuse and publish.up_to_date(report, notebook, inputs):
        _log(f"{notebook}: up to date, made from these very rows, rules, ceilings and floors: "
             f"{out.with_suffix('.html')}")
        if not report.index.exists():
            publish.write_index(report.reports_root)
        return out.with_suffix(".html")
    report.inputs_stamp(notebook).unlink(missing_ok=True)
    for d in results_dirs:
        write_table(d)
    report.root.mkdir(parents=True, exist_ok=True)
    publish.copy_data([Path(d) for d in results_dirs], report)
    publish.write_meta(report, title, description, [Path(d) for d in results_dirs])
    params = {"results_dirs": [str(Path(d).resolve()) for d in results_dirs],
              "figures_dir": str(report.figures_dir.resolve()), "title": title}
    _log(f"{notebook} of {len(results_dirs)} results folder(s) -> {out}")
    try:
        execute(publish.notebooks_dir() / f"{notebook}.ipynb", out, params, cwd=(cwd or Path.cwd()),
                cell_timeout_s=cell_timeout_s, label=notebook)
    finally:
        if out.exists():
            publish.render_html(out, title, report)
        publish.write_index(report.reports_root)
    atomic_write_text(report.inputs_stamp(notebook), json_text(inputs))
    return out.with_suffix(".html")


def _recorded_description(results_dirs: list[Path]) -> str:
    """The description a study wrote into its results folder's ``run_rules.json`` (empty when none did)."""
    found = []
    for d in results_dirs:
        try:
            text = json.loads(ResultsLayout.of(d).run_rules_path.read_text(encoding="utf-8")).get("description")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(text, str) and text and text not in found:
            found.append(text)
    return "; ".join(found)

