"""The machine's run-to-run noise floor, measured (``benchlib calibrate``) and kept in a results folder.

Two runs of identical settings, each in a fresh process, differ by more than the steps of one run do: a
process brings its own allocator state, thread placement, CPU speed and neighbours. So one small
configuration runs in ``runs`` fresh processes per thread count (``python -m benchlib run ... --no-save
--json``), thread counts alternating run by run so slow drift lands on each alike, and each run's figures
are kept (``store.noise_floor.NoiseFloor``). How far two single runs may differ by noise alone follows from
them (``instruments.run_to_run.floor_pct``), and a comparison of one run a side claims no difference under it.

A floor is kept per machine (``store.machine_cache``) and copied into each results folder whose comparisons
rest on it (``ensure_noise_floor``): a fresh floor of this machine in the folder, else in the machine cache, is
reused; an old, foreign or interfered one, or one measured under another fingerprint (``env.fingerprint``:
another CPU allotment, torch, driver or method), is measured again. A study measures it only when its
comparisons need it (``pipeline.study``). How long a calibration takes is said from its first run and updated
after each (``time_left_s``).
"""
from __future__ import annotations

import datetime as dt
import json
import math
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..env.devices import resolve_hardware
from ..env.fingerprint import fingerprint
from ..env.manifest import machine_name
from ..env.threads import default_threads
from ..errors import CalibrationFailed
from ..log import ProgressFn, progress_of
from ..store.layout import ResultsLayout
from ..store.machine_cache import fingerprint_change, machine_cache
from ..store.noise_floor import (
    FLOOR_METRICS,
    STALE_AFTER_DAYS,
    NoiseFloor,
    read_noise_floor,
    save_noise_floor,
)
from ..store.rows import migrate
from .progress import log

ROW_COLUMNS = {"train_step_s": "train_step_s_median"}  # a floor metric's row column, where the names differ
RUN_TIMEOUT_S = 900  # one calibration run; a hung device fails the calibration instead of the study waiting forever
# How the floor is measured, as a version: raise it when the calibration changes (its configuration, its runs),
# and every machine cache's floor is measured again.
METHOD_VERSION = "noise-floor-1"


@dataclass(frozen=True)
class Calibration:
    """The small configuration every calibration run measures (threads and device given per run)."""

    model: str = "resnet18"
    data: str = "synthetic"
    batch_size: int = 32
    image_size: int = 32
    steps: int = 20
    # lean: one epoch, a few untimed steps, few inference repeats (inference timing is most of a run)
    settings: Mapping[str, Any] = field(default_factory=lambda: {
        "epochs": 1, "warmup_steps": 3, "infer_warmup_batches": 2, "latency_repeats": 10,
        "latency_budget_s": 0})

    def argv(self, device: str, threads: int | None = None) -> list[str]:
        """``benchlib run`` arguments of one run (``threads`` None: left out, as the configuration shows it)."""
        out = ["run", "--model", self.model, "--data", self.data, "--device", device, "--batch-size",
               str(self.batch_size), "--image-size", str(self.image_size), "--steps", str(self.steps)]
        out += [a for k, v in self.settings.items() for a in ("--set", f"{k}={json.dumps(v)}")]
        out += ["--threads", str(threads)] if threads is not None else []
        return [*out, "--study", "calibrate", "--no-save", "--json"]

    def command_line(self, device: str) -> str:
        return shlex.join(["benchlib", *self.argv(device)])


CALIBRATION = Calibration()


def thread_counts(device: str, threads: Sequence[int] | None = None) -> tuple[int, ...]:
    """The thread counts to calibrate: those given, else 1 and the CPUs this process may use on a CPU (one value
    on a one-CPU machine), the default threads alone on a GPU."""
    if threads:
        return tuple(sorted(set(threads)))
    if torch.device(resolve_hardware(device)).type != "cpu":
        return (default_threads(),)
    return tuple(sorted({1, default_threads()}))


def _row_of(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                row = json.loads(line)
                return migrate(row, "a calibration run's row") if isinstance(row, dict) else None
            except ValueError:
                return None
    return None


def _why(proc: subprocess.CompletedProcess[str], row: dict[str, Any] | None) -> str:
    if row is not None and row.get("error"):
        return f"{row.get('status')}: {row['error']}"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    said = [ln for ln in lines if ln.startswith("benchlib: error:") or "Error" in ln]
    return (said or lines or [f"exit {proc.returncode}, no output"])[-1].strip().removeprefix("benchlib: error: ")


def run_once(calibration: Calibration, device: str, threads: int, label: str) -> dict[str, Any]:
    """One calibration run in a fresh process: its row, or CalibrationFailed naming the run and why."""
    cmd = [sys.executable, "-m", "benchlib", *calibration.argv(device, threads)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise CalibrationFailed(f"calibration {label} did not finish in {RUN_TIMEOUT_S} s: "
                                f"{shlex.join(['benchlib', *cmd[3:]])}") from exc
    row = _row_of(proc.stdout)
    if proc.returncode != 0 or row is None or row.get("status") != "ok":
        raise CalibrationFailed(f"calibration {label} failed ({_why(proc, row)}); the command: "
                                f"{shlex.join(['benchlib', *cmd[3:]])}")
    return row


def _figure(row: Mapping[str, Any], metric: str) -> float | None:
    value: Any = row.get(ROW_COLUMNS.get(metric, metric))
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def time_left_s(done: Sequence[tuple[int, float]], counts: Sequence[int], total: int) -> float:
    """Seconds the runs not yet done will take, from the ``done`` ones ((threads, seconds) each, in order): each
    thread count's mean run where it has had one, else the mean of all (thread counts alternate)."""
    if not done:
        return math.nan
    by: dict[int, list[float]] = {}
    for n, seconds in done:
        by.setdefault(n, []).append(seconds)
    overall = sum(s for _, s in done) / len(done)
    return sum(sum(by[n]) / len(by[n]) if (n := counts[i % len(counts)]) in by else overall
               for i in range(len(done), total))


def duration_text(seconds: float) -> str:
    """``40 s``, ``about 6 minutes``: the unit a person waits in."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"about {round(seconds / 60)} minutes"


def estimate_line(done: Sequence[tuple[int, float]], counts: Sequence[int], total: int) -> str:
    """What is left of a calibration, from its runs so far: after the first, the whole ("calibrating: 10 runs,
    about 35 s each from the first: about 6 minutes"); after the others, the rest."""
    if len(done) == 1:
        return (f"calibrating: {total} runs, about {done[0][1]:.0f} s each from the first: "
                f"{duration_text(done[0][1] + time_left_s(done, counts, total))}")
    left = time_left_s(done, counts, total)
    return "the last run" if len(done) >= total else f"{duration_text(left)} left"


def measure_noise_floor(device: str = "cpu", *, runs: int = 5, threads: Sequence[int] | None = None,
                        progress: ProgressFn | None = log, calibration: Calibration = CALIBRATION) -> NoiseFloor:
    """``runs`` fresh processes per thread count of ``calibration`` on ``device``; their figures as a NoiseFloor.

    Thread counts alternate run by run (1, N, 1, N, ...). Every run counts, a slow or fast one too: the
    comparisons the floor judges meet the same neighbours. A run that fails raises CalibrationFailed.
    ``progress`` hears how long the whole will take once the first run is timed, and what is left after each.
    """
    hardware = resolve_hardware(device)
    counts = thread_counts(hardware, threads)
    tell = progress_of(progress)
    total = runs * len(counts)
    tell(f"noise floor of {hardware}: {runs} fresh runs at {', '.join(map(str, counts))} thread(s), {total} in all; "
         f"the first run's time gives the estimate: {calibration.command_line(hardware)}")
    t0 = time.perf_counter()
    values: dict[int, dict[str, list[float]]] = {n: {m: [] for m in FLOOR_METRICS} for n in counts}
    interfered: list[str] = []
    done: list[tuple[int, float]] = []
    for i in range(total):
        n = counts[i % len(counts)]
        label = f"run {i + 1}/{total} ({n} thread{'s' if n > 1 else ''})"
        t_run = time.perf_counter()
        row = run_once(calibration, hardware, n, label)
        done.append((n, time.perf_counter() - t_run))
        for metric in FLOOR_METRICS:
            x = _figure(row, metric)
            if x is not None:
                values[n][metric].append(x)
        if row.get("interfered"):
            interfered.append(f"{label}: {row.get('interference') or 'other work ran'}")
        tell(f"noise floor {label}: train step {_figure(row, 'train_step_s') or math.nan:.4g} s, inference "
             f"{_figure(row, 'infer_samples_per_s') or math.nan:.4g} samples/s"
             f"{' (interfered)' if row.get('interfered') else ''} in {done[-1][1]:.0f} s"
             + ("" if len(done) in (1, total) else f"; {estimate_line(done, counts, total)}"))
        if len(done) == 1 and total > 1:
            tell(estimate_line(done, counts, total))
    return NoiseFloor(
        machine=machine_name(), measured_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        torch=torch.__version__, configuration=calibration.command_line(hardware),
        values={n: {m: tuple(v) for m, v in per.items() if v} for n, per in values.items()},
        minutes=round((time.perf_counter() - t0) / 60, 2), interfered=bool(interfered),
        interference="; ".join(interfered), device=torch.device(hardware).type,
        fingerprint=fingerprint(torch.device(hardware), METHOD_VERSION))


# ---------------------------------------------------------------- kept and reused

def _age_days(measured_utc: str, now: dt.datetime) -> float | None:
    try:
        when = dt.datetime.fromisoformat(measured_utc.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return (now - when).total_seconds() / 86400


def stale_reason(floor: NoiseFloor, machine: str, device: str, now: dt.datetime | None = None, *,
                 current: Mapping[str, str] | None = None) -> str | None:
    """Why ``floor`` does not describe ``device`` (a type: cpu, cuda, mps) of ``machine`` with this torch now
    (None when it does): another machine, device or torch, older than STALE_AFTER_DAYS, measured under
    interference, or under three runs; given this process's fingerprint (``current``), another one."""
    if floor.machine != machine:
        return f"measured on machine '{floor.machine}', not '{machine}'"
    if floor.device != device:
        return f"measured on {floor.device}, not {device}"
    if floor.torch != torch.__version__:
        return f"measured with torch {floor.torch}, not {torch.__version__}"
    age = _age_days(floor.measured_utc, now or dt.datetime.now(dt.timezone.utc))
    if age is None:
        return f"its time '{floor.measured_utc}' is unreadable"
    if age > STALE_AFTER_DAYS:
        return f"measured {age:.0f} days ago (a floor is kept {STALE_AFTER_DAYS:g} days: a VM's neighbours change)"
    if floor.interfered:
        return f"measured while other work ran ({floor.interference or 'interfered'}): too wide"
    if floor.runs < 3:
        return f"{floor.runs} run(s) per thread count; a floor needs three or more"
    if current is not None and floor.fingerprint:  # a folder's copy from an older benchlib has none
        return fingerprint_change(floor.fingerprint, current)
    return None


def _fresh(path: Path, machine: str, device: str, current: Mapping[str, str], *,
           kept: bool = False) -> tuple[NoiseFloor | None, str | None]:
    """(the floor at ``path`` if it is fresh, else None; why not, None where there is no file). ``kept``: the
    machine cache's, which must carry the fingerprint it was measured under."""
    if not path.is_file():
        return None, None
    try:
        floor = read_noise_floor(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return None, f"unreadable ({exc})"
    reason = stale_reason(floor, machine, device, current=current)
    if reason is None and kept and not floor.fingerprint:
        reason = fingerprint_change(None, current)
    return (floor, None) if reason is None else (None, reason)


def ensure_noise_floor(results_dir: str | Path, device: str = "cpu", *, progress: ProgressFn | None = log,
                       runs: int = 5, measure: bool = True) -> NoiseFloor | None:
    """This machine's fresh noise floor on ``device`` in ``results_dir``: the one there, else the machine cache's
    (copied in), else measured (``runs`` per thread count) and saved to both. ``measure=False``: None where
    there is none to copy."""
    hardware = resolve_hardware(device)
    kind, machine = torch.device(hardware).type, machine_name()
    current = fingerprint(torch.device(hardware), METHOD_VERSION)
    tell = progress_of(progress)
    path = ResultsLayout.of(results_dir).noise_floor_path(machine, kind)
    floor, reason = _fresh(path, machine, kind, current)
    if floor is not None:
        tell(f"noise floor of {kind}: the one measured {floor.measured_utc} is reused ({path})")
        return floor
    if reason is not None:
        tell(f"noise floor of {kind} in {path} not reused: {reason}")
    kept_path = machine_cache().noise_floor_path(machine, kind)
    floor, reason = _fresh(kept_path, machine, kind, current, kept=True)
    if floor is not None:
        tell(f"noise floor of {kind}: the one measured {floor.measured_utc} on this machine is reused (machine cache)")
        save_noise_floor(floor, results_dir)
        return floor
    if reason is not None:
        tell(f"noise floor of {kind} in the machine cache ({kept_path}) not reused: {reason}")
    if not measure:
        return None
    floor = measure_noise_floor(hardware, runs=runs, progress=progress)
    save_noise_floor(floor, machine_cache().root)
    saved = save_noise_floor(floor, results_dir)
    tell(f"noise floor of {kind} measured in {floor.minutes:.1f} min: {saved}")
    return floor
