"""Issue 37's soak: a study run as an adversary would run it, its invariants checked after each scenario.

    python benchmarks/soak.py [--quick] [--scenarios kill,disk,lock,term,tamper] [--seed 1] [--size full|tiny]
                              [--kills N] [--cache DIR] [--work DIR] [--json out.json]

The study: two tiny CNNs defined here (``soak:narrow_cnn``, ``soak:wide_cnn``, a few hundred parameters) at
batch 4 and 8, each in three CPU variants (default, channels-last, a lower learning rate): twelve
configurations on digits at 16x16, two timed steps each, two pairs. Every run is ``benchlib study`` in a fresh
process (``python -m benchlib``), each scenario in folders of its own, with a machine cache of ceilings seeded
once (``--cache`` to reuse one). The scenarios:

1. ``kill``: SIGKILL of the study's process group at ten random moments (three with ``--quick``), each resumed
   at once, then a last resume to the end;
2. ``disk``: results and reports on a tmpfs (``mount -t tmpfs``; where none can be mounted, a ``sitecustomize``
   that fails writes under the folder with ENOSPC past a byte budget, as ``tests/full_disk.py`` does) too small
   for the study, at sizes that fill it at different stages; then the space freed and the study resumed;
3. ``lock``: two whole studies started at the same instant on one folder (one must refuse in one line, exit 2),
   and a whole study beside a SLURM pair task (``--pair 0``) of it (one refuses), then resumed to the end;
4. ``term``: SIGTERM of the driver while a pair's kernel runs (and, without ``--quick``, while the summary
   runs): exit 143, ``benchlib: terminated`` its last stderr line, the lock released; then resumed;
5. ``tamper``: in a complete copy, one row's figure edited to a plausible value, one set to "fast", one row
   file copied under another configuration's name, garbage appended to one samples file; a report made
   before the resume and the resume's own must draw none of them, and the resume must list and re-measure each.

After each scenario: every configuration has exactly one row (row files counted per run id; ``superseded/``
holds only set-aside copies of configurations that have their row), none was measured twice, no process the
scenario started is left (each carries ``BENCHLIB_SOAK_RUN`` in its environment, the kernels too), no torn
file (every .json .ipynb .csv .html .png .parquet .gz under results and reports reads whole, also between
kills while the next run writes), no visible temporary file, no row that fails its check. One table is
printed (``--json`` writes it with every trial's details); the exit code is 1 when a scenario fails.
The whole soak takes about 9 minutes on a busy 2-core VM (load 3 to 4), ``--quick`` about 6.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))  # the benchlib of this tree, as the processes the soak starts use

from benchlib.spec.study import study_from_file  # noqa: E402
from benchlib.store.lock import folder_lock  # noqa: E402
from benchlib.store.rows import invalid_rows  # noqa: E402

MACHINE = "soak"  # BENCHLIB_MACHINE of every process: the rows' machine and file names
STUDY = "soak"
TAG = "BENCHLIB_SOAK_RUN"  # in the environment of every process a run starts (kernels inherit it)
SCENARIOS = ("kill", "disk", "lock", "term", "tamper")
SETTINGS = {"dataset": "digits", "image_size": 16, "train_subset": 32, "test_subset": 16, "train_steps": 2,
            "warmup_steps": 1, "latency_repeats": 3, "latency_budget_s": 0, "infer_warmup_batches": 1,
            "calibrate": False, "ceilings_at_end": False}
SIZES = {
    "full": {"models": ["soak:narrow_cnn", "soak:wide_cnn"], "batch_sizes": [4, 8],
             "variants": ["cpu-default", {"name": "cpu-channels-last", "memory_format": "channels_last"},
                          {"name": "lr-low", "lr": 0.01}]},
    "tiny": {"models": ["soak:narrow_cnn"], "batch_sizes": [4], "variants": ["cpu-default"]},
}
KILLS = {"full": 10, "quick": 3}
# tmpfs sizes as fractions of a complete study's results and reports: filled while measuring, while the pair
# notebooks are saved, while the summary's figures and pages are written
DISK_FRACTIONS = {"full": (0.05, 0.3, 0.7), "quick": (0.3,)}
DISK_REFERENCE_BYTES = 5_500_000  # a complete full-size study here, where no scenario before measured one
FREED_DISK = "256m"
TERM_MOMENTS = {"full": ("pair", "summary"), "quick": ("pair",)}
# How far into it (a random moment of this range, seconds): a kernel takes longer than this to start and measure
# a tiny study's one configuration on any machine; a summary to draw and publish its pages
TERM_INTO_S = {"pair": (0.3, 2.0), "summary": (0.5, 3.0)}
# Where the kills land (``Soak._kill_moment``): within a run's start (imports, the lock, ceilings from the cache,
# a kernel starting: about 10 s on a busy 2-core VM), at most this many rows on, or within its summary's seconds.
START_S, KILL_ROWS_AHEAD, SUMMARY_S = 10.0, 3, 15.0
GRACE_S = 15.0  # a kernel whose driver died sees it within a second (ipykernel's parent poller) and exits
EXIT_WAIT_S = 60.0  # a study told to stop (SIGTERM) stops its kernel and leaves within this
RUN_TIMEOUT_S = 600.0
TAMPERED_FIGURE = "train_samples_per_s"


# ---------------------------------------------------------------- the study's models (imported by its kernels)

def narrow_cnn(num_classes: int = 10) -> Any:
    """One 3x3 convolution (3 -> 8), global pooling and a linear head: 314 parameters."""
    from torch import nn

    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, num_classes))


def wide_cnn(num_classes: int = 10) -> Any:
    """Two 3x3 convolutions (3 -> 16 -> 16) with batch norm and a max pool, then the same head."""
    from torch import nn

    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(16, num_classes))


# ---------------------------------------------------------------- what a scenario found

@dataclass
class Outcome:
    """One line of the table, and what stands behind it."""

    scenario: str
    trials: int = 0
    expected: int = 0
    rows_found: int = 0
    duplicates: int = 0
    torn_files: int = 0
    leftover_processes: int = 0
    tampered_drawn: int = 0
    failures: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def verdict(self) -> str:
        bad = (self.rows_found != self.expected or self.duplicates or self.torn_files or self.leftover_processes
               or self.tampered_drawn or self.failures)
        return "FAIL" if bad else "pass"

    def fail(self, why: str) -> None:
        self.failures.append(why)

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


# ---------------------------------------------------------------- processes

def tagged(prefix: str) -> list[psutil.Process]:
    """Running processes (not zombies) whose BENCHLIB_SOAK_RUN starts with ``prefix``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get(TAG, "").startswith(prefix) \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def outlived(prefix: str, grace_s: float = GRACE_S) -> list[str]:
    """Processes tagged ``prefix`` still running ``grace_s`` on, named (``pid command``) and then killed."""
    deadline = time.monotonic() + grace_s
    while (left := tagged(prefix)) and time.monotonic() < deadline:
        time.sleep(0.2)
    named = []
    for proc in left:
        try:
            named.append(f"{proc.pid} {' '.join(proc.cmdline())[:160]}")
            proc.kill()
        except psutil.Error:
            continue
    return named


def kernels_of(tag: str) -> list[psutil.Process]:
    found = []
    for proc in tagged(tag):
        try:
            if "ipykernel" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


_MEASURED = re.compile(r"configuration \d+/\d+ (\S+)$")


class Run:
    """One ``benchlib study`` process, in a session of its own; stdout and stderr to files."""

    def __init__(self, cmd: list[str], env: dict[str, str], tag: str, folder: Path) -> None:
        self.tag, self.cmd = tag, cmd
        name = tag.rsplit("/", 1)[-1]
        self.err_path, self.out_path = folder / f"{name}.stderr", folder / f"{name}.stdout"
        with open(self.err_path, "w") as err, open(self.out_path, "w") as out:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env={**env, TAG: tag}, stdout=out, stderr=err,
                                         start_new_session=True)
        self.started = time.monotonic()
        self.code: int | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout_s: float) -> int | None:
        """The exit code, or None when it still runs after ``timeout_s``."""
        try:
            self.code = self.proc.wait(timeout=max(0.0, timeout_s))
        except subprocess.TimeoutExpired:
            return None
        return self.code

    def finish(self, timeout_s: float = RUN_TIMEOUT_S) -> int:
        """Wait for the end (killed, group and all, past ``timeout_s``); the exit code."""
        if self.wait(timeout_s) is None:
            self.kill()
            self.code = -int(signal.SIGKILL)
        return int(self.code if self.code is not None else -1)

    def kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.code = self.proc.wait()

    def stderr_lines(self) -> list[str]:
        try:
            return [ln for ln in self.err_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return []

    def last_line(self) -> str:
        lines = self.stderr_lines()
        return lines[-1] if lines else ""

    def measured(self) -> list[str]:
        """The run ids this run's kernels started to measure (not those it found complete)."""
        return [m.group(1) for ln in self.stderr_lines() if (m := _MEASURED.search(ln))]

    def said(self, words: str) -> bool:
        return any(words in ln for ln in self.stderr_lines())

    def stage(self) -> str:
        """Where the run was, from its last line: what a kill interrupted."""
        line = self.last_line()
        for words, stage in (("summary of", "summary"), ("timing inference", "inference"),
                             ("evaluating", "evaluation"), ("epoch", "training"), ("set up on", "set-up"),
                             ("configuration", "configuration start"), ("configuration(s) to run", "kernel start"),
                             ("done in", "between pairs"), ("ceilings", "ceilings"), ("up to date", "summary")):
            if words in line:
                return stage
        return "start" if not line else line[-60:]


# ---------------------------------------------------------------- files

TEMP_NAME = re.compile(r"\.tmp(\.|$)|~$|\.part$")


def _reads_whole(path: Path) -> str | None:
    """Why ``path`` is not a whole file of its kind (None when it is, or when it is gone)."""
    try:
        data = path.read_bytes()
        suffix = path.suffix
        if suffix == ".json":
            json.loads(data)
        elif suffix == ".ipynb":
            import nbformat

            nbformat.reads(data.decode("utf-8"), as_version=4)
        elif suffix == ".csv":
            text = data.decode("utf-8")
            if text and not text.endswith("\n"):
                return "its last line is cut"
            rows = list(csv.reader(text.splitlines()))
            widths = {len(r) for r in rows if r}
            if len(widths) > 1:
                return f"lines of {sorted(widths)} fields"
        elif suffix == ".html":
            if not data.decode("utf-8").rstrip().endswith("</html>"):
                return "no </html> at its end"
        elif suffix == ".png":
            from PIL import Image

            with Image.open(path) as image:
                image.load()
        elif suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.read_table(path)
        elif suffix == ".gz":
            gzip.decompress(data)
    except FileNotFoundError:  # replaced or set aside between the listing and the reading
        return None
    except Exception as exc:  # noqa: BLE001 (any failure to read it whole is the finding)
        return f"{type(exc).__name__}: {str(exc)[:120]}"
    return None


def files_under(roots: Iterable[Path]) -> list[Path]:
    return [p for root in roots if root.exists() for p in sorted(root.rglob("*")) if p.is_file()]


def torn_files(roots: Iterable[Path], tampered: frozenset[str] = frozenset()) -> list[str]:
    """Every file under ``roots`` that does not read whole, temporary files apart, and the ``tampered`` files
    (names) a resume kept aside under ``superseded/``: what the soak itself wrote into them."""
    return [f"{p}: {why}" for p in files_under(roots)
            if not TEMP_NAME.search(p.name) and not (p.name in tampered and "superseded" in p.parts)
            and (why := _reads_whole(p)) is not None]


def temp_files(roots: Iterable[Path]) -> tuple[list[str], list[str]]:
    """(visible, hidden) temporary files under ``roots``: a writer's ``.NAME.RANDOM.tmp`` is hidden, and one a
    killed run leaves is removed by a later run once 10 minutes old; a visible one passes for a result."""
    temps = [p for p in files_under(roots) if TEMP_NAME.search(p.name)]
    return [str(p) for p in temps if not p.name.startswith(".")], [str(p) for p in temps if p.name.startswith(".")]


# ---------------------------------------------------------------- a study's folders

@dataclass
class Census:
    """What the rows folder holds, by the run ids the rows name."""

    found: int
    duplicates: int
    missing: list[str]
    not_ok: list[str]
    extra: list[str]
    superseded: list[str]
    stray_superseded: list[str]


class Study:
    """The soak's study in folders of one scenario (``data`` elsewhere, e.g. on a tmpfs)."""

    def __init__(self, soak: Soak, name: str, data: Path | None = None) -> None:
        self.soak, self.name = soak, name
        self.root = soak.work / name
        self.root.mkdir(parents=True, exist_ok=True)
        data = data or self.root
        self.results_root, self.reports_root = data / "results", data / "reports"
        self.results, self.reports = self.results_root / STUDY, self.reports_root / STUDY
        self.params = self.root / "soak.yaml"
        self.params.write_text(json.dumps({"study": STUDY, "hardware": ["cpu"], **SIZES[soak.size], **SETTINGS}))
        self.expected = [c.run_id for c in study_from_file(self.params).all_configs()]
        self.runs: list[Run] = []
        self.tampered: frozenset[str] = frozenset()  # files the soak wrote into on purpose
        self.torn_seen: set[str] = set()  # torn files already counted (met between runs)

    @property
    def folders(self) -> tuple[Path, Path]:
        return self.results_root, self.reports_root

    def start(self, *extra: str, env: dict[str, str] | None = None) -> Run:
        if self.soak.size == "tiny" and "--no-summary" not in extra:
            extra = (*extra, "--no-summary")  # the plumbing check: the seconds of a summary show it nothing more
        cmd = [sys.executable, "-m", "benchlib", "study", str(self.params), "--results-root", str(self.results_root),
               "--reports-root", str(self.reports_root), *extra]
        run = Run(cmd, env or self.soak.env, f"{self.soak.id}/{self.name}/run{len(self.runs) + 1}", self.root)
        self.runs.append(run)
        return run

    def row_file(self, run_id: str) -> Path:
        from benchlib.store.layout import ResultsLayout

        return ResultsLayout.of(self.results).row_path(MACHINE, run_id)

    def samples_file(self, run_id: str) -> Path:
        from benchlib.store.layout import ResultsLayout

        return ResultsLayout.of(self.results).samples_path(MACHINE, run_id)

    def census(self) -> Census:
        counts: Counter[str] = Counter()
        status: dict[str, str] = {}
        for path in sorted((self.results / "rows").glob("*.json")):
            try:
                row = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # a torn row: the torn-file check names it
            counts[str(row.get("run_id"))] += 1
            status[str(row.get("run_id"))] = str(row.get("status"))
        superseded = sorted(self.results.glob("superseded/*/rows/*.json"))
        # a set-aside copy is of a configuration of the study that has its one row again
        stray = [p for p in superseded if counts[p.stem.removeprefix(f"{MACHINE}__")] != 1
                 or p.stem.removeprefix(f"{MACHINE}__") not in self.expected]
        found = sum(1 for r in self.expected if counts[r] == 1 and status.get(r) == "ok")
        return Census(found=found, duplicates=sum(n - 1 for n in counts.values() if n > 1),
                      missing=[r for r in self.expected if counts[r] == 0],
                      not_ok=[r for r in self.expected if counts[r] and status.get(r) != "ok"],
                      extra=[r for r in counts if r not in self.expected],
                      superseded=[str(p.relative_to(self.results)) for p in superseded],
                      stray_superseded=[str(p.relative_to(self.results)) for p in stray])

    def invalid(self) -> list[str]:
        if not (self.results / "rows").is_dir():
            return []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bad = invalid_rows([self.results])
        return [f"{Path(p).name}: {r}" for p, r in zip(bad["path"], bad["reason"], strict=True)]

    def lock_left(self) -> str | None:
        """Why the results folder's lock is not free (None when no lock file is left and it can be taken)."""
        left = sorted(p.name for p in self.results.glob(".benchlib-*.lock"))
        if left:
            return f"lock file(s) left: {', '.join(left)}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with folder_lock(self.results):
                    pass
        except Exception as exc:  # noqa: BLE001 (a lock that cannot be taken, whatever the way)
            return f"the lock cannot be taken: {exc}"
        return None


def settle(out: Outcome, study: Study, *, final: Run | None) -> None:
    """The invariants every scenario ends on, into ``out``: rows, duplicates, torn and temporary files, rows
    that fail their check, the lock, processes left."""
    census = study.census()
    out.expected += len(study.expected)
    out.rows_found += census.found
    out.duplicates += census.duplicates
    if final is not None and final.code != 0:
        out.fail(f"{study.name}: the last run exited {final.code}: {final.last_line()[-200:]}")
    for what, items in (("missing", census.missing), ("not ok", census.not_ok), ("rows of no configuration",
                        census.extra), ("superseded rows that are no set-aside copy", census.stray_superseded)):
        if items:
            out.fail(f"{study.name}: {what}: {', '.join(items[:4])}{' ...' if len(items) > 4 else ''}")
    left = outlived(f"{study.soak.id}/{study.name}/")
    out.leftover_processes += len(left)
    torn = torn_files(study.folders, study.tampered)
    out.torn_files += len(set(torn) - study.torn_seen)
    visible, hidden = temp_files(study.folders)
    if visible:
        out.fail(f"{study.name}: visible temporary files: {', '.join(visible[:4])}")
    invalid = study.invalid()
    if invalid:
        out.fail(f"{study.name}: rows that fail their check: {'; '.join(invalid[:3])}")
    if (why := study.lock_left()) is not None:
        out.fail(f"{study.name}: {why}")
    out.details.setdefault("studies", {})[study.name] = {
        "rows_found": census.found, "superseded": census.superseded, "torn": torn, "hidden_temp_files": hidden,
        "leftover": left, "runs": len(study.runs)}


def watch_torn(out: Outcome, study: Study) -> None:
    """Torn files met while the study is between runs or being written (counted once each)."""
    for torn in torn_files(study.folders):
        if torn not in study.torn_seen:
            study.torn_seen.add(torn)
            out.torn_files += 1
            out.fail(f"{study.name}: a torn file between runs: {torn}")


# ---------------------------------------------------------------- the scenarios

class Soak:
    """The soak's settings, its work folder and machine cache, and one method per scenario (each returns the
    table's lines it makes)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.id = f"soak-{os.getpid()}-{int(time.time())}"
        self.work = Path(args.work or tempfile.mkdtemp(prefix="benchlib-soak-")).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.quick, self.size = args.quick, args.size
        self.mode = "quick" if args.quick else "full"
        self.rng = random.Random(args.seed)
        self.kills = args.kills if args.kills is not None else KILLS[self.mode]
        self.cache = Path(args.cache or self.work / "machine-cache").resolve()
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", ""), str(HERE)) if p)
        self.env = {**os.environ, "PYTHONPATH": path, "BENCHLIB_CACHE": str(self.cache),
                    "BENCHLIB_MACHINE": MACHINE, "PYTHONUNBUFFERED": "1"}
        os.environ["BENCHLIB_MACHINE"] = MACHINE  # this process reads the same rows
        self.complete: Study | None = None  # a study a scenario left complete, for the tamper scenario
        self.reference_bytes = DISK_REFERENCE_BYTES

    def seed_cache(self) -> None:
        """The machine's ceilings measured once into the cache every run copies them from. Marked quiet where
        other work interfered: the soak checks files and processes, not roofs, and a roof measured under load
        would otherwise be measured again, ten minutes on, in the middle of a scenario."""
        path = self.cache / "ceilings" / f"{MACHINE}__cpu.json"
        if not path.exists():
            print(f"seeding the machine cache {self.cache} (the ceilings of cpu) ...", flush=True)
            subprocess.run([sys.executable, "-c", "import sys; from benchlib.roofline.cache import ensure_ceilings;"
                            " ensure_ceilings(sys.argv[1], 'cpu')", str(self.work / "seed")], env=self.env,
                           check=True, cwd=REPO, capture_output=True)
        data = json.loads(path.read_text())
        if data.get("interfered"):
            path.write_text(json.dumps({**data, "interfered": False}))

    # -- 1
    def kill(self) -> list[Outcome]:
        out = Outcome(f"kill -9 x{self.kills}", trials=self.kills)
        study = Study(self, "kill")
        trials = out.details["kills"] = []
        run = study.start()
        for i in range(self.kills):
            missing = len(study.census().missing)
            moment = self._kill_moment(run, study, missing)
            stage, code = run.stage(), run.code
            if code is None:
                run.kill()
            trials.append({"moment": moment, "after_s": round(time.monotonic() - run.started, 1), "stage": stage,
                           "ended_first": code, "rows_before": len(study.expected) - missing})
            if code not in (None, 0):
                out.fail(f"kill {i + 1}: the run ended by itself with exit {code}: {run.last_line()[-200:]}")
            old, run = run, study.start()  # resumed at once, as a user or a requeue would
            left = outlived(old.tag)
            if left:
                out.leftover_processes += len(left)
                out.fail(f"kill {i + 1} ({moment}, {stage}): left running {GRACE_S:.0f} s on: {'; '.join(left)}")
            watch_torn(out, study)
        run.finish()
        settle(out, study, final=run)
        if out.verdict == "pass":
            self.reference_bytes = sum(p.stat().st_size for p in files_under(study.folders))
        return [out]

    def _kill_moment(self, run: Run, study: Study, missing: int) -> str:
        """Wait for a random moment of the run's work that is left (returns it in words; earlier when the run
        ends): its start (the lock, the ceilings, a kernel starting); a few rows on, then a little more (into a
        configuration's training or inference, or just past a write); the instant a samples file lands before
        its row; or, every row written, into the summary (its kernel, figures, pages)."""
        rows, samples = study.results / "rows", study.results / "samples"

        def count(folder: Path) -> int:
            return len(list(folder.glob(f"{MACHINE}__*"))) if folder.is_dir() else 0

        def until(ready: Callable[[], bool]) -> bool:
            while not ready():
                if run.wait(0.02) is not None:
                    return False
            return True

        pick = self.rng.random()
        if missing and pick < 0.25:
            after = self.rng.uniform(0.5, START_S)
            run.wait(after)
            return f"start +{after:.1f} s"
        if missing and pick < 0.4:  # a window of milliseconds: where the polling misses it, the row landing
            before = count(rows)
            until(lambda: count(samples) > count(rows) or count(rows) > before)
            return "a samples file landed before its row" if count(rows) == before else "a row landed"
        if missing:
            n = self.rng.randint(1, min(missing, KILL_ROWS_AHEAD))
            target = count(rows) + n
            after = self.rng.uniform(0.0, 3.0)
            if until(lambda: count(rows) >= target):
                run.wait(after)
            return f"{n} row(s) on +{after:.1f} s"
        after = self.rng.uniform(0.0, SUMMARY_S)
        if until(lambda: run.said("summary of") or run.said("up to date")):
            run.wait(after)
        return f"summary +{after:.1f} s"

    # -- 2
    def disk(self) -> list[Outcome]:
        fractions = DISK_FRACTIONS[self.mode]
        out = Outcome("full disk", trials=len(fractions))
        study = Study(self, "disk", data=self.work / "disk" / "mount")
        mount = study.results_root.parent
        mount.mkdir(parents=True, exist_ok=True)
        sizes = [max(64 * 1024, int(f * self.reference_bytes)) // 4096 * 4096 for f in fractions]
        simulated = not _mount_tmpfs(mount, sizes[0])
        out.details["disk"] = "simulated ENOSPC (sitecustomize)" if simulated else "tmpfs"
        trials = out.details["fills"] = []
        try:
            for size in sizes:
                env = self.env
                if simulated:
                    env = _simulated_disk_env(self.env, self.work / "disk", mount, size)
                else:
                    _remount(mount, str(size))
                run = study.start(env=env)
                code = run.finish()
                trials.append({"bytes": size, "exit": code, "rows": study.census().found,
                               "last_line": run.last_line()[-200:]})
                if code == 0:
                    out.details.setdefault("notes", []).append(f"{size} bytes were enough: the disk did not fill")
                elif not run.last_line().startswith("benchlib: error: ") or str(mount) not in run.last_line():
                    out.fail(f"disk of {size} bytes: no one line naming the file it could not write, exit {code}: "
                             f"{run.last_line()[-200:]}")
                left = outlived(run.tag)
                out.leftover_processes += len(left)
                if left:
                    out.fail(f"disk of {size} bytes: left running: {'; '.join(left)}")
                watch_torn(out, study)
                visible, _ = temp_files(study.folders)
                if visible:
                    out.fail(f"disk of {size} bytes: visible temporary files: {', '.join(visible[:4])}")
            if not simulated:
                _remount(mount, FREED_DISK)
            final = study.start()
            final.finish()
            settle(out, study, final=final)
        finally:
            if not simulated:
                subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        return [out]

    # -- 3
    def lock(self) -> list[Outcome]:
        both = Outcome("two studies at once", trials=1)
        self._side_by_side(both, Study(self, "lock-two"), ("--no-summary",), ("--no-summary",))
        beside = Outcome("study beside pair task", trials=1)
        self._side_by_side(beside, Study(self, "lock-pair"), ("--no-summary",), ("--no-summary", "--pair", "0"))
        return [both, beside]

    def _side_by_side(self, out: Outcome, study: Study, first: tuple[str, ...], second: tuple[str, ...]) -> None:
        """``first`` and ``second`` started at the same instant on one folder: one runs, the other refuses in
        one line with exit 2; the study then resumed to its end. No configuration measured (started, or its
        row written) twice, nor two measured at one time."""
        started = time.monotonic()
        watch = RowWatch(study.results / "rows")
        runs = [study.start(*first), study.start(*second)]
        codes = [r.finish() for r in runs]
        out.details["exits"] = codes
        refused = [r for r in runs if r.code == 2]
        if sorted(codes) != [0, 2]:
            out.fail(f"exits {codes}, not one 0 and one 2: {[r.last_line()[-160:] for r in runs]}")
        for r in refused:
            lines = r.stderr_lines()
            out.details["refusal"] = lines
            if len(lines) != 1 or not lines[0].startswith("benchlib: error: results folder"):
                out.fail(f"the refusal is not one line: {lines[:3]}")
        final = study.start("--no-summary") if study.census().missing else None
        if final is not None:
            final.finish()
        watch.stop()
        measured = Counter(r for run in study.runs for r in run.measured())
        twice = sorted({r for r, n in measured.items() if n > 1} | set(watch.rewritten()))
        out.duplicates += len(twice)
        if twice:
            out.fail(f"measured twice: {', '.join(twice[:4])}")
        overlaps = overlapping(study)
        if overlaps:
            out.fail(f"measured at one time by two kernels: {'; '.join(overlaps[:3])}")
        out.details["measured_by_run"] = [len(r.measured()) for r in study.runs]
        out.details["row_writes"] = sum(watch.writes.values())
        settle(out, study, final=final or next((r for r in runs if r.code == 0), runs[0]))
        out.wall_s = round(time.monotonic() - started, 1)

    # -- 4
    def term(self) -> list[Outcome]:
        moments = TERM_MOMENTS[self.mode]
        out = Outcome("SIGTERM", trials=len(moments))
        study = Study(self, "term")
        trials = out.details["terms"] = []
        for moment in moments:
            run = study.start()
            at = self._wait_for(run, moment)
            if at is None:
                out.fail(f"SIGTERM during the {moment}: the run ended first (exit {run.code}), nothing was sent")
                continue
            stage = run.stage()
            run.proc.send_signal(signal.SIGTERM)
            if run.wait(EXIT_WAIT_S) is None:
                out.fail(f"SIGTERM during the {moment}: still running {EXIT_WAIT_S:.0f} s on; killed")
                run.kill()
            trials.append({"moment": moment, "after_s": round(at, 1), "stage": stage, "exit": run.code,
                           "last_line": run.last_line()})
            if run.code != 143:
                out.fail(f"SIGTERM during the {moment}: exit {run.code}, not 143")
            if run.last_line() != "benchlib: terminated":
                out.fail(f"SIGTERM during the {moment}: last stderr line {run.last_line()[-200:]!r}")
            if (why := study.lock_left()) is not None:
                out.fail(f"SIGTERM during the {moment}: {why}")
            left = outlived(run.tag, grace_s=2.0)  # stopped by the study itself, not by a poller
            out.leftover_processes += len(left)
            if left:
                out.fail(f"SIGTERM during the {moment}: left running: {'; '.join(left)}")
            watch_torn(out, study)
        final = study.start()
        final.finish()
        settle(out, study, final=final)
        if out.verdict == "pass":
            self.complete = study
        return [out]

    def _wait_for(self, run: Run, moment: str) -> float | None:
        """Wait until the run is in ``moment`` (a pair's kernel runs; the summary runs), plus a random moment
        into it; the seconds since its start, or None when it ended first."""
        def ready() -> bool:
            if moment == "summary":
                return run.said("summary of")
            return bool(kernels_of(run.tag)) and run.said("configuration(s) to run")

        while not ready():
            if run.wait(0.2) is not None:
                return None
        if run.wait(self.rng.uniform(*TERM_INTO_S[moment])) is not None:
            return None
        return time.monotonic() - run.started

    # -- 5
    def tamper(self) -> list[Outcome]:
        out = Outcome("tampered rows", trials=4)
        study = Study(self, "tamper")
        if self.complete is not None:
            shutil.copytree(self.complete.results, study.results,
                            ignore=shutil.ignore_patterns(".benchlib-*", ".*.tmp", ".*.tmp.*"))
        else:
            first = study.start("--no-summary")
            if first.finish() != 0:
                out.fail(f"the study to tamper with did not complete: {first.last_line()[-200:]}")
                return [out]
        a, b, c, d, e = self.rng.sample(study.expected, 5)
        before = {r: json.loads(study.row_file(r).read_text()) for r in study.expected}
        tampered = _tamper(study, a, b, c, d, e, before)
        out.details["tampered"] = {k: {"run_id": r, "how": how} for k, (r, how, _) in tampered.items()}
        listed = {Path(line.split(":", 1)[0]).stem for line in study.invalid()}
        unlisted = [r for r, _, _ in tampered.values() if study.row_file(r).stem not in listed]
        if unlisted:
            out.fail(f"tampered rows not listed by the check: {', '.join(unlisted)}")
        # a report made before any resume: the tampered rows listed, none drawn
        pre = Run([sys.executable, "-m", "benchlib", "report", str(study.results), "--reports-root",
                   str(study.root / "pre-reports")], self.env, f"{self.id}/tamper/pre-report", study.root)
        if pre.finish() != 0:
            out.fail(f"the report before the resume exited {pre.code}: {pre.last_line()[-200:]}")
        pre_data = study.root / "pre-reports" / STUDY / "data" / STUDY / "results.csv"
        out.tampered_drawn += _drawn(out, "report before the resume", pre_data, tampered, resumed=False)
        summary = study.root / "pre-reports" / STUDY / "summary.html"
        page = summary.read_text(errors="replace") if summary.exists() else ""
        out.details["listed_on_the_page"] = [r for r, _, _ in tampered.values() if study.row_file(r).name in page]
        run = study.start()
        run.finish()
        for key, (run_id, how, _) in tampered.items():
            if not any(run_id in ln and "failed its check" in ln for ln in run.stderr_lines()):
                out.fail(f"{key} ({how}): the resume did not say {run_id} failed its check")
        remeasured = set(run.measured())
        out.details["remeasured"] = sorted(remeasured)
        for key, (run_id, how, _) in tampered.items():
            if run_id not in remeasured:
                out.fail(f"{key} ({how}): {run_id} was not measured again")
        again = sorted(remeasured - {r for r, _, _ in tampered.values()})
        out.duplicates += len(again)
        if again:
            out.fail(f"rows nobody tampered with measured again: {', '.join(again)}")
        aside = {p.stem.removeprefix(f"{MACHINE}__") for p in study.results.glob("superseded/*-failed-check/rows/*")}
        kept = [r for r, _, _ in tampered.values() if r not in aside]
        if kept:
            out.fail(f"tampered rows not kept aside in superseded/*-failed-check/: {', '.join(kept)}")
        for where, path in (("results after the resume", study.results / "results.csv"),
                            ("report after the resume", study.reports / "data" / STUDY / "results.csv")):
            out.tampered_drawn += _drawn(out, where, path, tampered, resumed=True)
        settle(out, study, final=run)
        return [out]


def _tamper(study: Study, a: str, b: str, c: str, d: str, e: str,
            before: dict[str, dict[str, Any]]) -> dict[str, tuple[str, str, Any]]:
    """The four ways a row is tampered with; ``{key: (run id, how, the figure a report must not draw)}``."""
    row = dict(before[a])
    plausible = float(row[TAMPERED_FIGURE]) * 1.25
    study.row_file(a).write_text(json.dumps({**row, TAMPERED_FIGURE: plausible}, indent=1))
    study.row_file(b).write_text(json.dumps({**before[b], "train_step_s_median": "fast"}, indent=1))
    shutil.copyfile(study.row_file(c), study.row_file(d))
    shutil.copyfile(study.samples_file(c), study.samples_file(d))
    with open(study.samples_file(e), "a", encoding="utf-8") as f:
        f.write("garbage\n")
    study.tampered = frozenset(p.name for r in (a, b, d, e) for p in (study.row_file(r), study.samples_file(r)))
    return {"edited": (a, f"{TAMPERED_FIGURE} x1.25", plausible),
            "text": (b, 'train_step_s_median "fast"', math.nan),  # any figure that is a number is measured
            "copied": (d, f"the row file of {c} under its name", before[c][TAMPERED_FIGURE]),
            "samples": (e, "garbage appended to its samples", before[e][TAMPERED_FIGURE])}


def _drawn(out: Outcome, where: str, table: Path, tampered: dict[str, tuple[str, str, Any]], *, resumed: bool) -> int:
    """Tampered figures in a table a report draws from: before the resume no tampered row may be in it at all;
    after it, each is there again with a figure measured anew (not the tampered one, nor the one it replaced)."""
    if not table.exists():
        out.fail(f"{where}: no {table.name}")
        return 0
    with open(table, newline="", encoding="utf-8") as f:
        rows = {r["run_id"]: r for r in csv.DictReader(f)}
    drawn = 0
    for key, (run_id, how, figure) in tampered.items():
        row = rows.get(run_id)
        if row is None:
            if resumed:
                out.fail(f"{where}: {run_id} ({how}) is missing after the resume")
            continue
        if not resumed:
            drawn += 1
            out.fail(f"{where}: {key} row {run_id} ({how}) is drawn")
            continue
        column = "train_step_s_median" if key == "text" else TAMPERED_FIGURE
        value = row.get(column, "")
        try:
            same = float(value) == float(figure)
        except ValueError:
            same = True  # not a number (the tampered "fast", or nothing) where a measured figure belongs
        if same:
            drawn += 1
            out.fail(f"{where}: {key} row {run_id} ({how}) draws {column} {value!r}")
    return drawn


class RowWatch:
    """Every version of every row file a folder holds while it runs (an atomic write is a new inode): a row
    written twice is a configuration measured twice."""

    def __init__(self, folder: Path, every_s: float = 0.05) -> None:
        self.folder, self.every_s = folder, every_s
        self.versions: dict[str, set[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._look()
            time.sleep(self.every_s)

    def _look(self) -> None:
        for path in self.folder.glob("*.json") if self.folder.is_dir() else []:
            try:
                self.versions.setdefault(path.stem.removeprefix(f"{MACHINE}__"), set()).add(path.stat().st_ino)
            except OSError:
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._look()

    @property
    def writes(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.versions.items()}

    def rewritten(self) -> list[str]:
        return sorted(k for k, n in self.writes.items() if n > 1)


def overlapping(study: Study) -> list[str]:
    """Pairs of rows measured at one time by two kernels (their started..finished spans overlap)."""
    spans = []
    for path in (study.results / "rows").glob("*.json"):
        try:
            row = json.loads(path.read_text())
            spans.append((row["started_utc"], row["finished_utc"], row.get("process_uid"), row["run_id"]))
        except (OSError, ValueError, KeyError):
            continue
    found = []
    for i, (s1, f1, p1, r1) in enumerate(spans):
        for s2, f2, p2, r2 in spans[i + 1:]:
            if p1 != p2 and s1 < f2 and s2 < f1:
                found.append(f"{r1} and {r2}")
    return found


# ---------------------------------------------------------------- a disk that fills

def _mount_tmpfs(mount: Path, size: int) -> bool:
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    return done.returncode == 0


def _remount(mount: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True, capture_output=True)


_SITECUSTOMIZE = '''"""The soak's full disk where no tmpfs can be mounted (tests/full_disk.py's), in every process."""
import os
import sys

if os.environ.get("SOAK_FULL_DISK_ROOT"):
    sys.path.insert(0, {tests!r})
    from full_disk import FullDisk

    class _Set:
        @staticmethod
        def setattr(obj, name, value):
            setattr(obj, name, value)

    FullDisk(os.environ["SOAK_FULL_DISK_ROOT"], int(os.environ["SOAK_FULL_DISK_BYTES"])).install(_Set)
    sys.path.remove({tests!r})
'''


def _simulated_disk_env(env: dict[str, str], folder: Path, root: Path, size: int) -> dict[str, str]:
    """The environment of a run whose every process (the study and its kernels) meets a full disk under ``root``
    past ``size`` bytes of writes (each process its own budget)."""
    site = folder / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(tests=str(REPO / "tests")))
    return {**env, "PYTHONPATH": f"{site}{os.pathsep}{env['PYTHONPATH']}", "SOAK_FULL_DISK_ROOT": str(root),
            "SOAK_FULL_DISK_BYTES": str(size)}


# ---------------------------------------------------------------- the table

COLUMNS = (("scenario", "scenario", 24), ("trials", "trials", 6), ("expected", "configs", 7),
           ("rows_found", "rows", 5), ("duplicates", "dups", 4), ("torn_files", "torn", 4),
           ("leftover_processes", "left procs", 10), ("tampered_drawn", "tampered drawn", 14),
           ("verdict", "verdict", 7))


def table(outcomes: list[Outcome]) -> str:
    head = "  ".join(f"{title:<{w}}" for _, title, w in COLUMNS)
    lines = [head, "-" * len(head)]
    for o in outcomes:
        rec = o.record()
        lines.append("  ".join(f"{rec[key]!s:<{w}}" for key, _, w in COLUMNS))
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"host": socket.gethostname(), "cpu": cpu, "usable_cpus": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


class LoadWatch:
    """The 1-minute load average every few seconds while the soak runs."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, args=(every_s,), daemon=True)
        self._thread.start()

    def _poll(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self.samples.append(os.getloadavg()[0])
        s = self.samples
        return {"start": round(s[0], 2), "end": round(s[-1], 2), "mean": round(sum(s) / len(s), 2),
                "max": round(max(s), 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer kills, one disk size, one SIGTERM (about 6 min)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    ap.add_argument("--size", choices=sorted(SIZES), default="full",
                    help="full: twelve configurations; tiny: one, and no summary (the test's plumbing check)")
    ap.add_argument("--kills", type=int, help="kills of scenario kill (default 10, 3 with --quick)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the kill moments and of which rows are tampered")
    ap.add_argument("--cache", type=Path, help="a machine cache to reuse (seeded here when it has no ceilings)")
    ap.add_argument("--work", type=Path, help="keep every folder and log here (default: a temporary folder, removed "
                    "when every scenario passes)")
    ap.add_argument("--json", type=Path, help="write the table and every trial's details here")
    args = ap.parse_args(argv)
    chosen = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        ap.error(f"--scenarios: unknown {', '.join(unknown)}; allowed: {', '.join(SCENARIOS)}")
    if args.size == "tiny" and "tamper" in chosen:
        ap.error("--size tiny has one configuration: the tamper scenario needs five")

    soak = Soak(args)
    facts = machine()
    load = LoadWatch()
    print(f"soak {soak.mode}, size {soak.size}, scenarios {', '.join(chosen)}, seed {args.seed}; machine "
          f"{facts['host']}, {facts['cpu']}, {facts['usable_cpus']} usable CPUs, load {load.samples[0]:.2f}; work "
          f"folder {soak.work}", flush=True)
    t0 = time.monotonic()
    soak.seed_cache()
    outcomes: list[Outcome] = []
    scenarios: dict[str, Callable[[], list[Outcome]]] = {"kill": soak.kill, "disk": soak.disk, "lock": soak.lock,
                                                         "term": soak.term, "tamper": soak.tamper}
    for name in SCENARIOS:
        if name not in chosen:
            continue
        started = time.monotonic()
        print(f"[soak] {name} ...", flush=True)
        found = scenarios[name]()
        for o in found:
            o.wall_s = o.wall_s or round(time.monotonic() - started, 1)
            print(f"[soak] {o.scenario}: {o.verdict} in {o.wall_s:.0f} s" +
                  "".join(f"\n[soak]   {why}" for why in o.failures), flush=True)
        outcomes.extend(found)
    loads = load.stop()
    wall = time.monotonic() - t0
    print()
    print(table(outcomes))
    print(f"\n{wall:.0f} s; 1-minute load average start {loads['start']}, mean {loads['mean']}, max {loads['max']}, "
          f"end {loads['end']}")
    passed = all(o.verdict == "pass" for o in outcomes)
    if args.json:
        args.json.write_text(json.dumps({"machine": facts, "command": [sys.executable, *sys.argv],
                                         "mode": soak.mode, "size": soak.size, "seed": args.seed, "wall_s": round(wall),
                                         "load_average": loads, "work": str(soak.work),
                                         "scenarios": [o.record() for o in outcomes]}, indent=1) + "\n")
    if passed and not args.work:
        shutil.rmtree(soak.work, ignore_errors=True)
    elif not passed:
        print(f"folders and logs kept in {soak.work}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
