"""The machine's run-to-run noise floor, measured (``benchlib calibrate``) and kept in a results folder.

Two runs of identical settings, each in a fresh process, differ by more than the steps of one run do: a
process brings its own allocator state, thread placement, CPU speed and neighbours. So one small
configuration runs in ``runs`` fresh processes per thread count (``python -m benchlib run ... --no-save
--json``), thread counts alternating run by run so slow drift lands on each alike, and each run's figures
are kept (``store.noise_floor.NoiseFloor``). How far two single runs may differ by noise alone follows from
them (``instruments.run_to_run.floor_pct``), and a comparison of one run a side claims no difference under it.

A study measures the floor once per device type at its start (``ensure_noise_floor``): a fresh floor of this
machine in its results folder, or in a sibling one (copied in), is reused; an old, foreign or interfered one
is measured again.
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
from ..env.manifest import machine_name
from ..env.threads import default_threads
from ..errors import CalibrationFailed
from ..log import ProgressFn
from ..store.layout import ResultsLayout
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
SECONDS_PER_RUN = 11  # what one run of the default configuration takes on a 2-core CPU: for the time announced


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


def measure_noise_floor(device: str = "cpu", *, runs: int = 5, threads: Sequence[int] | None = None,
                        progress: ProgressFn | None = log, calibration: Calibration = CALIBRATION) -> NoiseFloor:
    """``runs`` fresh processes per thread count of ``calibration`` on ``device``; their figures as a NoiseFloor.

    Thread counts alternate run by run (1, N, 1, N, ...). Every run counts, a slow or fast one too: the
    comparisons the floor judges meet the same neighbours. A run that fails raises CalibrationFailed.
    """
    hardware = resolve_hardware(device)
    counts = thread_counts(hardware, threads)
    tell = progress or (lambda _msg: None)
    total = runs * len(counts)
    tell(f"noise floor of {hardware}: {runs} fresh runs at {', '.join(map(str, counts))} thread(s), {total} in all "
         f"(about {math.ceil(total * SECONDS_PER_RUN / 60)} minute(s)): {calibration.command_line(hardware)}")
    t0 = time.perf_counter()
    values: dict[int, dict[str, list[float]]] = {n: {m: [] for m in FLOOR_METRICS} for n in counts}
    interfered: list[str] = []
    for i in range(total):
        n = counts[i % len(counts)]
        label = f"run {i + 1}/{total} ({n} thread{'s' if n > 1 else ''})"
        t_run = time.perf_counter()
        row = run_once(calibration, hardware, n, label)
        for metric in FLOOR_METRICS:
            x = _figure(row, metric)
            if x is not None:
                values[n][metric].append(x)
        if row.get("interfered"):
            interfered.append(f"{label}: {row.get('interference') or 'other work ran'}")
        tell(f"noise floor {label}: train step {_figure(row, 'train_step_s') or math.nan:.4g} s, inference "
             f"{_figure(row, 'infer_samples_per_s') or math.nan:.4g} samples/s"
             f"{' (interfered)' if row.get('interfered') else ''} in {time.perf_counter() - t_run:.0f} s")
    return NoiseFloor(
        machine=machine_name(), measured_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        torch=torch.__version__, configuration=calibration.command_line(hardware),
        values={n: {m: tuple(v) for m, v in per.items() if v} for n, per in values.items()},
        minutes=round((time.perf_counter() - t0) / 60, 2), interfered=bool(interfered),
        interference="; ".join(interfered), device=torch.device(hardware).type)


# ---------------------------------------------------------------- kept and reused

def _age_days(measured_utc: str, now: dt.datetime) -> float | None:
    try:
        when = dt.datetime.fromisoformat(measured_utc.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return (now - when).total_seconds() / 86400


def stale_reason(floor: NoiseFloor, machine: str, device: str, now: dt.datetime | None = None) -> str | None:
    """Why ``floor`` does not describe ``device`` (a type: cpu, cuda, mps) of ``machine`` with this torch now
    (None when it does): another machine, device or torch, older than STALE_AFTER_DAYS, measured under
    interference, or under three runs."""
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
    return None


def _fresh(path: Path, machine: str, device: str) -> tuple[NoiseFloor | None, str | None]:
    """(the floor at ``path`` if it is fresh, else None; why not, None where there is no file)."""
    if not path.is_file():
        return None, None
    try:
        floor = read_noise_floor(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return None, f"unreadable ({exc})"
    reason = stale_reason(floor, machine, device)
    return (floor, None) if reason is None else (None, reason)


def sibling_floor(results_dir: str | Path, machine: str, device: str) -> tuple[NoiseFloor, Path] | None:
    """The newest fresh floor of this machine and device in a results folder beside ``results_dir``."""
    root = Path(results_dir).resolve()
    found = []
    siblings = sorted(p for p in root.parent.iterdir() if p.is_dir() and p != root) if root.parent.is_dir() else []
    for sibling in siblings:
        path = ResultsLayout.of(sibling).noise_floor_path(machine, device)
        floor, _ = _fresh(path, machine, device)
        if floor is not None:
            found.append((floor, path))
    return max(found, key=lambda fp: fp[0].measured_utc) if found else None


def ensure_noise_floor(results_dir: str | Path, device: str = "cpu", *, progress: ProgressFn | None = log,
                       runs: int = 5) -> NoiseFloor:
    """This machine's fresh noise floor on ``device`` in ``results_dir``: the one there, else one copied from a
    sibling results folder, else measured (``runs`` per thread count) and saved."""
    hardware = resolve_hardware(device)
    kind, machine = torch.device(hardware).type, machine_name()
    tell = progress or (lambda _msg: None)
    path = ResultsLayout.of(results_dir).noise_floor_path(machine, kind)
    floor, reason = _fresh(path, machine, kind)
    if floor is not None:
        tell(f"noise floor of {kind}: the one measured {floor.measured_utc} is reused ({path})")
        return floor
    if reason is not None:
        tell(f"noise floor of {kind} in {path} not reused: {reason}")
    if (found := sibling_floor(results_dir, machine, kind)) is not None:
        floor, source = found
        tell(f"noise floor of {kind}: the one measured {floor.measured_utc} in {source.parent.parent} is reused")
        save_noise_floor(floor, results_dir)
        return floor
    floor = measure_noise_floor(hardware, runs=runs, progress=progress)
    saved = save_noise_floor(floor, results_dir)
    tell(f"noise floor of {kind} measured in {floor.minutes:.1f} min: {saved}")
    return floor
