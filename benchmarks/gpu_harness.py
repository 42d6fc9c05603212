"""The plumbing of a lent GPU session (``gpu_session.py``), apart from what it asks: findings written a JSON line
at a time, NVML watched in a thread, each section run within its budget and stopped past it, commands killed as
a process group, carried wheels installed, and the verdicts the session ends with.

Nothing here knows a section: ``gpu_session.py`` hands its sections, their rules (``judge``) and its session.
"""
from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

from benchlib.engine.setup import fresh_state
from benchlib.instruments.nvml import NvmlDevices, nvml_reason, pynvml

ROOT = Path(__file__).resolve().parents[1]
WATCH_INTERVAL_S = 0.5
HARD_STOP_GRACE_S = 20.0  # past its budget a section is interrupted (SIGALRM) this much later
FAILURE_ENV = "BENCHLIB_GPU_SESSION_FAIL"  # sections that raise at their start (tests: a failure is logged)
EXTRA_PATHS: list[str] = []  # where carried wheels were installed: on this process's path and its children's
Judge = Callable[[dict[str, Any]], dict[str, Any]]  # a finding's rule and verdict ({} for an informational one)


# ---------------------------------------------------------------- findings and the watch

class FindingsFile:
    """``findings.jsonl``: one JSON object a line, flushed and synced as written, each with its ``t_s`` (seconds
    since the session began)."""

    def __init__(self, path: Path, t0: float) -> None:
        self.path, self.t0 = path, t0
        self._fh: IO[str] = path.open("a")
        self._lock = threading.Lock()
        self.judged: list[tuple[str, bool | None]] = []  # (a finding with its rule, its verdict)

    def write(self, record: dict[str, Any]) -> None:
        if "rule" in record:  # a judged finding: kept for the verdicts the session ends with
            label = ", ".join(f"{k} {record[k]}" for k in ("optimizer", "batch") if k in record)
            self.judged.append((f"{record['finding']}{f' ({label})' if label else ''}: {record['rule']}",
                                record.get("passed")))
        line = json.dumps(plain({**record, "t_s": round(time.monotonic() - self.t0, 2)}), allow_nan=False)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()
            with contextlib.suppress(OSError):
                os.fsync(self._fh.fileno())
        print(f"[gpu_session] {line[:200]}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self._fh.close()


def plain(value: Any) -> Any:
    """``value`` as strict JSON holds it: a float that is not finite as its name ("inf", "nan"), tuples as
    lists, anything else JSON lacks as its ``str``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def reason_table() -> dict[int, str]:
    """NVML's clock-event ("throttle") reason bits by name, from whichever spelling this pynvml exports."""
    if pynvml is None:
        return {}
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        table = {int(getattr(pynvml, n)): n[len(prefix):] for n in dir(pynvml)
                 if n.startswith(prefix) and n[len(prefix):] not in ("All", "None", "UserDefinedClocks")}
        if table:
            return table
    return {}


def reason_names(mask: int, table: dict[int, str]) -> list[str]:
    """The names of the bits set in ``mask``; a bit the table lacks as its hex value."""
    names = [name for bit, name in sorted(table.items()) if bit and mask & bit]
    unknown = mask & ~sum(table)
    return names + ([hex(unknown)] if unknown else [])


def _reasons_reader() -> Callable[[Any], int] | None:
    for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        if pynvml is not None and hasattr(pynvml, name):
            return getattr(pynvml, name)  # type: ignore[no-any-return]
    return None


class Watch:
    """NVML read every ``interval_s`` in a thread, one line a sample into ``watch.jsonl``: SM clock, power,
    clock-event reasons, temperature, and the section running. Where NVML cannot be opened the file holds one
    ``{"no NVML": why}`` line and no thread runs."""

    def __init__(self, path: Path, t0: float, uuids: Sequence[str] | None, interval_s: float = WATCH_INTERVAL_S):
        self.path, self.t0, self.interval_s = path, t0, interval_s
        self.section = "session"
        self._seen: dict[str, dict[str, Any]] = {}  # per section: what the samples held
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fh = path.open("a")
        self._nvml = NvmlDevices(uuids=uuids) if uuids else NvmlDevices()
        if not self._nvml.handles:
            self._line({"no NVML": "; ".join(f"{k}: {v}" for k, v in self._nvml.missing.items()) or "no handle"})
            self._nvml.close()
            return
        self._table, self._reasons = reason_table(), _reasons_reader()
        self._failed: dict[tuple[int, str], str] = {}  # (GPU, reading) that failed: not asked again
        self._thread = threading.Thread(target=self._run, name="gpu-session-watch", daemon=True)
        self._thread.start()

    def _line(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps({"t_s": round(time.monotonic() - self.t0, 2), **record}) + "\n")
        self._fh.flush()

    def _read(self, gpu: int, what: str, fn: Callable[[], Any]) -> Any:
        if (gpu, what) in self._failed:
            return None
        try:
            return fn()
        except pynvml.NVMLError as exc:
            self._failed[(gpu, what)] = nvml_reason(exc)
            self._line({"gpu": gpu, "gpu_unreadable": what, "why": self._failed[(gpu, what)]})
            return None

    def sample(self) -> None:
        for key, h in self._nvml.handles.items():
            mask = self._read(key, "clock_event_reasons", lambda h=h: int(self._reasons(h))) if self._reasons else None
            power_mw = self._read(key, "power", lambda h=h: pynvml.nvmlDeviceGetPowerUsage(h))
            record = {
                "section": self.section, "gpu": key,
                "sm_clock_mhz": self._read(key, "sm_clock", lambda h=h: pynvml.nvmlDeviceGetClockInfo(
                    h, pynvml.NVML_CLOCK_SM)),
                "power_w": power_mw / 1000.0 if power_mw is not None else None,
                "temp_c": self._read(key, "temperature", lambda h=h: pynvml.nvmlDeviceGetTemperature(
                    h, pynvml.NVML_TEMPERATURE_GPU)),
                "clock_event_reasons": mask,
                "reasons": reason_names(mask, self._table) if mask is not None else None,
            }
            self._line(record)
            with self._lock:
                seen = self._seen.setdefault(record["section"], {"samples": 0, "sm_clock_mhz": [], "power_w": [],
                                                                 "temp_c": [], "reasons": set()})
                seen["samples"] += 1
                for k in ("sm_clock_mhz", "power_w", "temp_c"):
                    if record[k] is not None:
                        seen[k].append(record[k])
                seen["reasons"].update(record["reasons"] or ())

    def summary(self, section: str) -> dict[str, Any] | None:
        """What the samples taken while ``section`` ran held: SM clock and power range, hottest, reasons seen."""
        with self._lock:
            seen = self._seen.get(section)
            if seen is None:
                return None
            out: dict[str, Any] = {"samples": seen["samples"], "reasons_seen": sorted(seen["reasons"])}
            for k in ("sm_clock_mhz", "power_w"):
                values = seen[k]
                out[f"{k}_min_median_max"] = [min(values), statistics.median(values), max(values)] if values else None
            out["temp_c_max"] = max(seen["temp_c"]) if seen["temp_c"] else None
            return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._nvml.close()
        self._fh.close()


# ---------------------------------------------------------------- one section's context, budget and stop

class SectionOverrun(BaseException):
    """Raised by SIGALRM in a section past its budget (a BaseException: no section's own handler keeps it)."""


@contextlib.contextmanager
def hard_stop(seconds: float) -> Iterator[None]:
    """Interrupt the block ``seconds`` from now (main thread, POSIX; elsewhere the block's own checks stop it).
    A CUDA call in flight finishes first: Python handles the signal between bytecodes."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(_signum: int, _frame: Any) -> None:
        raise SectionOverrun(f"interrupted {seconds:.0f} s in, past its budget")

    before = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


class Run(NamedTuple):
    rc: int | None  # None: killed at its timeout
    stdout: str
    stderr: str
    seconds: float


def child_env() -> dict[str, str]:
    """The environment of the commands a section starts: this checkout (and carried wheels) importable first."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *EXTRA_PATHS, *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def run_command(cmd: Sequence[str], timeout_s: float) -> Run:
    """``cmd`` in its own process group, killed as a group at ``timeout_s`` or if this process is interrupted."""
    t0 = time.monotonic()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=child_env(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=max(1.0, timeout_s))
        return Run(proc.returncode, out, err, time.monotonic() - t0)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        return Run(None, out, err, time.monotonic() - t0)
    finally:
        if proc.poll() is None:
            kill_group(proc)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """``proc`` and every process of its group killed, and waited for (at most 10 s)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def tail_lines(text: str, lines: int = 3) -> list[str]:
    """A command's last ``lines`` lines of output, each cut at 300 characters."""
    return [line[:300] for line in text.strip().splitlines()[-lines:]]


# ---------------------------------------------------------------- sections run in turn

@dataclass(frozen=True)
class Section:
    name: str
    run: Callable[[Any], None]  # the section, given the session
    budget_s: float  # at most this long (interrupted HARD_STOP_GRACE_S later)
    min_s: float  # not started with less than this left of the session's budget


@dataclass
class Budget:
    total_s: float
    t0: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.total_s - (time.monotonic() - self.t0)


def section_log(findings: FindingsFile, section: str, judge: Judge) -> Callable[..., None]:
    """``log(finding=..., **fields)``: one line of ``findings`` in ``section``, with its rule and verdict
    (``judge``: a finding's rule and pass/fail, nothing for an informational one)."""
    def log(**fields: Any) -> None:
        findings.write({"section": section, **fields, **judge(fields)})
    return log


def run_sections(s: Any, sections: Sequence[Section], budget: Budget, findings: FindingsFile,
                 watch: Watch | None, fail: set[str], judge: Judge) -> dict[str, str]:
    """Each section in turn, within its own budget and the session's; an error is a finding. ``s``: the session
    (its ``log``, ``deadline`` and ``device``). Returns each section's outcome (ok, error, skipped)."""
    outcome: dict[str, str] = {}
    for sec in sections:
        s.log = section_log(findings, sec.name, judge)
        left = budget.left()
        if left < sec.min_s:
            s.log(finding="skipped", skipped=f"budget: {left:.0f} s of --budget-s left, the section needs "
                                             f"{sec.min_s:.0f} s")
            outcome[sec.name] = "skipped"
            continue
        allowed = min(sec.budget_s, left)
        s.deadline = time.monotonic() + allowed
        if watch is not None:
            watch.section = sec.name
        t0 = time.monotonic()
        try:
            if sec.name in fail:
                raise RuntimeError(f"failure injected by {FAILURE_ENV} (a test of the runner)")
            with hard_stop(allowed + HARD_STOP_GRACE_S):
                sec.run(s)
            outcome[sec.name] = "ok"
        except (Exception, SectionOverrun) as exc:
            outcome[sec.name] = "error"
            s.log(finding="error", error=f"{type(exc).__name__}: {exc}"[:600],
                  where=[line.strip()[:200] for line in traceback.format_exc().strip().splitlines()[-6:]])
        finally:
            with contextlib.suppress(Exception):
                fresh_state(s.device)
        s.log(finding="section end", outcome=outcome[sec.name], seconds=round(time.monotonic() - t0, 1),
              budget_s=round(allowed, 1), watch=watch.summary(sec.name) if watch is not None else None)
    return outcome


def install_carried_wheels(root: Path) -> str | None:
    """Wheels carried in ``.whl/`` (timm and its pure-Python needs, where the machine lacks them), installed to a
    temporary folder on ``sys.path``; what was installed, or None."""
    wheels = sorted(glob.glob(str(root / ".whl" / "*.whl")))
    if not wheels:
        return None
    target = Path(tempfile.gettempdir()) / "gpu_session_site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--upgrade", "--target", str(target), *wheels], capture_output=True, text=True)
    if done.returncode:
        return f"not installed (pip exit {done.returncode}: {done.stderr.strip()[-200:]})"
    sys.path.append(str(target))
    EXTRA_PATHS.append(str(target))
    return ", ".join(Path(w).name for w in wheels)


def verdict_lines(judged: list[tuple[str, bool | None]]) -> list[str]:
    """The session's verdicts, one line each: PASS, FAIL or NOT JUDGED, and the finding with its rule."""
    mark = {True: "PASS", False: "FAIL", None: "NOT JUDGED"}
    return [f"{mark[p]:10s} {what}" for what, p in judged]
