"""Where every file of a study lives: the one place that builds paths under ``results/`` and ``reports/``.

A results folder (``results/<study>/``)::

    rows/<machine>__<run_id>.json          one row per configuration (a flat JSON object)
    samples/<machine>__<run_id>.csv        the raw per-step / per-repeat samples behind the row
    telemetry/<machine>__<run_id>.csv      the telemetry time series sampled while it ran
    manifests/<manifest_id>.json           the environment a row was measured in
    ceilings/<machine>__<device>.json      the measured roofline ceilings of one device
    noise_floor/<machine>__<device>.json   how far two runs of identical settings differ on this machine
    weights/<machine>__<model>__<key>.pt   trained weights shared with inference-only variants
    profiles/<machine>__<run_id>/          torch.profiler tables, trace.json, tensorboard/, profile.json
    layers/<machine>__<run_id>.json        a configuration's step layer by layer, with its layers' shapes
    shapes/<machine>__<device>.json        layer shapes timed alone here (``benchlib roofline --shapes-of``)
    targets/<machine>__<device>.json       the machines a study predicts on (``predict_on``): their ceilings
    predictions.csv                        every configuration predicted on each target
    tuning/optuna.sqlite3                  Optuna studies of ``benchlib tune`` in one process, or
    tuning/optuna.journal                  once parallel workers shared them (then the studies live here);
                                           tuning/<cpu|gpu>-tuned.yaml
    superseded/<stamp>/rows|samples|telemetry|layers|profiles/
                                           rows measured with settings the study no longer has
    results.csv                            every row of the folder, rebuilt from rows/
    run_rules.json                         repeats, seeds, warmup and every run that did not count

``results/tuned/`` (beside the study folders) holds the ``*-tuned.yaml`` files the tuned variants read.
A report folder (``reports/<study>/``) holds the executed notebooks (``runs/``, ``profile/``, ``tune/``),
their HTML, ``summary``/``sweep`` pages, ``figures/``, each profile's trace beside its page
(``profile/<hardware>__<model>.trace.json.gz``), a copy of the data the pages were made from (``data/<results
folder>/``: results.csv, run_rules.json, manifests/, ceilings/, noise_floor/) so the folder can be published on its own,
and ``report.json`` (title, description, results folders). ``reports/index.html`` links them all, beside
``reports/columns.html`` (the data dictionary) and ``reports/measurement.html`` (how benchlib measures).

One file per row means concurrent writers never share a file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .atomic import safe_name

TUNED_DIR_NAME = "tuned"
DEFAULT_RESULTS_ROOT = Path("results")
DEFAULT_REPORTS_ROOT = Path("reports")


def row_key(machine: str, run_id: str) -> str:
    """The file stem of a row and of everything that belongs to it."""
    return safe_name(f"{machine}__{run_id}")


def from_project_root(cwd: Path | None = None) -> Path | None:
    """Run a notebook opened in a project's ``notebooks/`` (JupyterLab's working folder) as from the project's
    root, where ``params/``, ``results/`` and ``reports/`` are: changes the working folder there and returns it;
    None (nothing changed) anywhere else, as under ``benchlib study``, which runs notebooks from the root."""
    here = (cwd or Path.cwd()).resolve()
    if here.name != "notebooks" or not (here.parent / "params").is_dir():
        return None
    os.chdir(here.parent)
    return here.parent


def reports_index(reports_root: Path = DEFAULT_REPORTS_ROOT) -> Path:
    """The page that links every study's report."""
    return Path(reports_root) / "index.html"


def reports_page(reports_root: Path, name: str) -> Path:
    """A page every study's report shares, at the top of the reports folder (``columns``, ``measurement``)."""
    return Path(reports_root) / f"{name}.html"


def tuned_params_dir(results_root: Path = DEFAULT_RESULTS_ROOT) -> Path:
    """Folder of the exported ``<cpu|gpu>-tuned.yaml`` files the ``*-tuned`` variants read."""
    return Path(results_root) / TUNED_DIR_NAME


# Both layouts are rows of small properties that look alike by shape: each names one path, in one place.
@dataclass(frozen=True)
class ResultsLayout:
    """Every path under one study's results folder."""

    root: Path

    @classmethod
    def of(cls, root: str | Path) -> ResultsLayout:
        return cls(Path(root))

    # -- rows and what belongs to each
    @property
    def rows_dir(self) -> Path:
        return self.root / "rows"

    def row_path(self, machine: str, run_id: str) -> Path:
        return self.rows_dir / f"{row_key(machine, run_id)}.json"

    def samples_path(self, machine: str, run_id: str) -> Path:
        return self.root / "samples" / f"{row_key(machine, run_id)}.csv"

    def telemetry_path(self, machine: str, run_id: str) -> Path:
        return self.root / "telemetry" / f"{row_key(machine, run_id)}.csv"

    def row_files(self) -> list[Path]:
        return sorted(self.rows_dir.glob("*.json"))

    @property
    def holds_rows(self) -> bool:
        """Whether this is a results folder benchlib wrote (it has ``rows/``)."""
        return self.rows_dir.is_dir()

    def lock_path(self, scope: str = "study") -> Path:
        """The lock a process holds while it writes here (``store.lock``): a whole study's, or one pair's."""
        return self.root / f".benchlib-{scope}.lock"

    def lock_files(self) -> list[Path]:
        return sorted(self.root.glob(".benchlib-*.lock"))

    def benchmark_figure(self, model: str, device: str) -> Path:
        """The throughput chart ``benchlib.benchmark`` draws for one model on one device."""
        return self.figures_dir / f"benchmark-{safe_name(model)}-{safe_name(device)}.png"

    @property
    def figures_dir(self) -> Path:
        """Figures the Python API draws for a result it returns (``benchlib.benchmark``'s throughput chart)."""
        return self.root / "figures"

    @property
    def results_csv(self) -> Path:
        return self.root / "results.csv"

    @property
    def results_parquet(self) -> Path:
        """The same table as Parquet (typed columns), written beside the CSV where pyarrow is installed."""
        return self.root / "results.parquet"

    def superseded_dir(self, stamp: str) -> Path:
        return self.root / "superseded" / stamp

    def superseded_row_files(self) -> list[Path]:
        """Rows a study set aside (measured with settings it no longer has), every stamp's."""
        return sorted(self.root.glob("superseded/*/rows/*.json"))

    @property
    def run_rules_path(self) -> Path:
        return self.root / "run_rules.json"

    # -- the environment and the roof
    def manifest_path(self, manifest_id: str) -> Path:
        return self.root / "manifests" / f"{manifest_id}.json"

    def manifest_files(self) -> list[Path]:
        return sorted((self.root / "manifests").glob("*.json"))

    def ceilings_path(self, machine: str, device: str) -> Path:
        return self.root / "ceilings" / f"{safe_name(machine)}__{safe_name(device)}.json"

    def ceilings_files(self) -> list[Path]:
        return sorted((self.root / "ceilings").glob("*.json"))

    def noise_floor_path(self, machine: str, device: str = "cpu") -> Path:
        """This machine's run-to-run noise floor on one device type (``benchlib calibrate``)."""
        return self.root / "noise_floor" / f"{safe_name(machine)}__{safe_name(device)}.json"

    def noise_floor_files(self) -> list[Path]:
        return sorted((self.root / "noise_floor").glob("*.json"))

    def shapes_path(self, machine: str, device: str) -> Path:
        """Layer shapes timed alone on one device of this machine (``benchlib roofline --shapes-of``)."""
        return self.root / "shapes" / f"{safe_name(machine)}__{safe_name(device)}.json"

    def target_path(self, machine: str, device: str) -> Path:
        """A machine the study predicts on (``predict_on``): its ceilings, copied here from where they were measured."""
        return self.root / "targets" / f"{safe_name(machine)}__{safe_name(device)}.json"

    def target_files(self) -> list[Path]:
        return sorted((self.root / "targets").glob("*.json"))

    @property
    def predictions_csv(self) -> Path:
        """Every configuration predicted on each target (``pipeline.predict.COLUMNS``), one row per figure."""
        return self.root / "predictions.csv"

    # -- trained weights, profiles, tuning
    def weights_path(self, machine: str, model: str, training_key: str) -> Path:
        return self.root / "weights" / f"{safe_name(f'{machine}__{model}__{training_key}')}.pt"

    def profile_dir(self, machine: str, run_id: str) -> Path:
        return self.root / "profiles" / row_key(machine, run_id)

    def layers_path(self, machine: str, run_id: str) -> Path:
        """One configuration's per-layer table and its checks (``benchlib layers``), as JSON."""
        return self.root / "layers" / f"{row_key(machine, run_id)}.json"

    def layers_files(self) -> list[Path]:
        return sorted(self.root.glob("layers/*.json"))

    def profile_meta_files(self) -> list[Path]:
        return sorted(self.root.glob("profiles/*/profile.json"))

    @property
    def tuning_dir(self) -> Path:
        return self.root / "tuning"

    @property
    def tuning_sqlite(self) -> Path:
        """The Optuna storage of studies tuned in one process."""
        return self.tuning_dir / "optuna.sqlite3"

    @property
    def tuning_journal(self) -> Path:
        """The Optuna journal file that parallel workers share (SQLite locks up under concurrent writers)."""
        return self.tuning_dir / "optuna.journal"

    @property
    def tuning_storage(self) -> Path:
        """The storage file in use: the journal once parallel workers have used it, else the SQLite file."""
        return self.tuning_journal if self.tuning_journal.is_file() else self.tuning_sqlite

    @property
    def tuning_storage_url(self) -> str:
        """The SQLAlchemy URL of the SQLite storage (an absolute path: papermill kernels run elsewhere)."""
        return f"sqlite:///{self.tuning_sqlite.resolve()}"

    def tuned_export(self, kind: str) -> Path:
        """Where a tuning study exports its best trial (``kind``: cpu or gpu)."""
        return self.tuning_dir / f"{kind}-tuned.yaml"

    def tuned_exports(self) -> list[Path]:
        return sorted(self.tuning_dir.glob("*-tuned.yaml"))


@dataclass(frozen=True)
class ReportLayout:
    """Every path under one study's report folder (``reports/<study>/``)."""

    root: Path

    @property
    def reports_root(self) -> Path:
        return self.root.parent

    @property
    def index(self) -> Path:
        return reports_index(self.reports_root)

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def profiles_dir(self) -> Path:
        return self.root / "profile"

    @property
    def tune_dir(self) -> Path:
        return self.root / "tune"

    @property
    def figures_dir(self) -> Path:
        return self.root / "figures"

    def analysis_notebook(self, name: str) -> Path:
        """``summary.ipynb`` / ``sweep.ipynb`` of the study."""
        return self.root / f"{name}.ipynb"

    @property
    def meta_path(self) -> Path:
        """``report.json``: the report's title, its study's description and the results folders it shows."""
        return self.root / "report.json"

    def inputs_stamp(self, name: str) -> Path:
        """What an analysis page (``summary``, ``sweep``) was last made from: a page whose inputs are unchanged
        is not made again."""
        return self.root / f".{name}-inputs.json"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def data_copy(self, results_dir_name: str) -> Path:
        """Where the data of one results folder is copied (results.csv, run_rules.json, manifests, ceilings)."""
        return self.data_dir / safe_name(results_dir_name)

    def profile_trace(self, hardware: str, model: str) -> Path:
        """A profiled pair's Chrome/Perfetto trace, gzipped, beside the pair's profile page."""
        return self.profiles_dir / f"{pair_stem(hardware, model)}.trace.json.gz"


def pair_stem(hardware: str, model: str) -> str:
    """The file stem of everything one hardware/model pair publishes (``cpu__resnet18``)."""
    return f"{safe_name(hardware)}__{safe_name(model)}"  # timm:x, pkg.mod:f: no ':' in a file name or link


def pair_notebook_name(hardware: str, model: str) -> str:
    """The executed notebook of one hardware/model pair (``cpu__resnet18.ipynb``)."""
    return f"{pair_stem(hardware, model)}.ipynb"


@dataclass(frozen=True)
class StudyPaths:
    """A study's results folder and report folder, under their roots."""

    results: ResultsLayout
    reports: ReportLayout

    @classmethod
    def for_study(cls, study: str, results_root: Path = DEFAULT_RESULTS_ROOT,
                  reports_root: Path = DEFAULT_REPORTS_ROOT) -> StudyPaths:
        return cls(ResultsLayout(Path(results_root) / study), ReportLayout(Path(reports_root) / study))
