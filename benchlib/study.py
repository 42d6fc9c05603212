"""A study: every hardware/model pair through the benchmark notebook, then the summary and HTML.

Pairs run one after another, each in its own kernel (papermill), so a pair that crashes its kernel
costs only itself: it leaves its executed notebook and failure rows, and the study goes on.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from papermill.exceptions import PapermillExecutionError

from . import publish
from .config import StudyConfig, settings_as_params
from .manifest import machine_name
from .results import read_results, safe_name, write_row, write_table
from .devices import resolve_hardware
from .roofline import ensure_ceilings
from .runner import failure_row


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


def _log(msg: str) -> None:
    print(f"[benchlib] {msg}", file=sys.stderr, flush=True)


def pair_notebook_name(hardware: str, model: str) -> str:
    return f"{safe_name(hardware)}__{model}.ipynb"


def _record_pair_failure(cfg: StudyConfig, hardware: str, model: str, results: Path, exc: BaseException,
                         since: float) -> int:
    """Failure rows for the pair's configurations that wrote no row after ``since``."""
    machine = machine_name()
    written = 0
    for run in cfg.configs(hardware, model):
        row_file = results / "rows" / f"{safe_name(machine + '__' + run.run_id)}.json"
        if row_file.exists() and row_file.stat().st_mtime >= since:
            continue
        write_row(results, failure_row(run, exc, machine))
        written += 1
    return written


def run_study(cfg: StudyConfig, *, results_root: Path = Path("results"), reports_root: Path = Path("reports"),
              cell_timeout_s: int | None = 3600, cwd: Path | None = None) -> int:
    """Run every pair, then the summary; returns the number of pairs that failed."""
    cwd = (cwd or Path.cwd()).resolve()
    paths = StudyPaths.for_study(cfg.study, results_root.resolve(), reports_root.resolve())
    paths.results.mkdir(parents=True, exist_ok=True)
    paths.runs.mkdir(parents=True, exist_ok=True)
    bench = publish.notebooks_dir() / "benchmark.ipynb"
    pairs = cfg.pairs()
    for hardware in dict.fromkeys(resolve_hardware(h) for h in cfg.hardware):
        _log(f"ceilings of {hardware} (matmul and copy, for the roofline)")
        ensure_ceilings(paths.results, hardware)
    failed = 0
    t_study = time.perf_counter()
    for i, (hardware, model) in enumerate(pairs, 1):
        _log(f"pair {i}/{len(pairs)}: {hardware} / {model} (batch sizes {list(cfg.batch_sizes)})")
        params = {"study": cfg.study, "hardware": hardware, "model": model, "batch_sizes": list(cfg.batch_sizes),
                  "results_dir": str(paths.results),
                  "figures_dir": str(paths.reports / "figures"), **settings_as_params(cfg.settings)}
        out = paths.runs / pair_notebook_name(hardware, model)
        since = time.time()
        t0 = time.perf_counter()
        try:
            publish.execute(bench, out, params, cwd=cwd, cell_timeout_s=cell_timeout_s)
        except (PapermillExecutionError, RuntimeError, TimeoutError) as exc:  # kernel death or cell error
            failed += 1
            n = _record_pair_failure(cfg, hardware, model, paths.results, exc, since)
            _log(f"pair {hardware} / {model} failed ({type(exc).__name__}); {n} failure row(s) written; going on")
        if out.exists():
            publish.render_html(out)
        _log(f"pair {i}/{len(pairs)} done in {time.perf_counter() - t0:.0f} s")
    summarize([paths.results], paths.reports, title=f"benchlib study: {cfg.study}", cwd=cwd,
              cell_timeout_s=cell_timeout_s)
    _log(f"study '{cfg.study}' done in {time.perf_counter() - t_study:.0f} s: "
         f"{len(pairs) - failed}/{len(pairs)} pairs ran; report {reports_root.resolve() / 'index.html'}")
    return failed


def summarize(results_dirs: list[Path], report_dir: Path, *, title: str, cwd: Path | None = None,
              cell_timeout_s: int | None = 3600) -> Path:
    """Run the summary notebook over ``results_dirs`` into ``report_dir`` and publish HTML and index."""
    for d in results_dirs:
        read_results([d])  # fail early on a missing folder
        write_table(d)
    report_dir.mkdir(parents=True, exist_ok=True)
    out = report_dir / "summary.ipynb"
    params = {"results_dirs": [str(Path(d).resolve()) for d in results_dirs],
              "figures_dir": str((report_dir / "figures").resolve()), "title": title}
    _log(f"summary of {len(results_dirs)} results folder(s) -> {out}")
    try:
        publish.execute(publish.notebooks_dir() / "summary.ipynb", out, params, cwd=(cwd or Path.cwd()),
                        cell_timeout_s=cell_timeout_s)
    finally:
        if out.exists():
            publish.render_html(out)
        publish.write_index(report_dir.parent)
    return out.with_suffix(".html")
