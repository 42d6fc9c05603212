"""System telemetry sampled in a background thread while the work runs.

One sample after a run is not utilization: a ``TelemetrySampler`` takes a sample at start, then every
``interval_s`` (drift-corrected: tick k is due at start + k * interval), and one last at stop. Each
sample holds CPU figures (system and per-core utilization, this process's CPU, RSS and threads: read
from /proc on Linux, from psutil elsewhere; the number of processes and the CPU temperature from
psutil) and, per visible NVIDIA GPU, NVML's utilization, memory, power, temperature, SM clock and
energy counter.

The sampler shares the GIL with the measured work, so it keeps its system calls few: every one hands
the GIL over and back. Slowly changing sources (process count, temperature) are read about once a second.

A source that cannot be read leaves its columns ``None`` and says why in ``Telemetry.missing``; the
sampler never raises into the measured work. GPU columns are named by NVML index (``gpu{i}_...``).
"""
from __future__ import annotations

import math
import os
import re
import threading
import time
from collections import namedtuple
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd
import psutil

from .results import atomic_write_text

try:  # nvidia-ml-py is a dependency, but a broken install must not break CPU telemetry
    import pynvml
except ImportError:  # pragma: no cover - exercised only where the package is absent
    pynvml = None  # type: ignore[assignment]

DEFAULT_INTERVAL_S = 0.1
SUMMARY_COLUMNS = (
    "cpu_util_pct_mean", "cpu_util_pct_p95", "proc_cpu_util_pct_mean", "gpu_util_pct_mean", "gpu_util_pct_p95",
    "gpu_mem_util_pct_mean", "gpu_mem_used_bytes_max", "gpu_power_w_mean", "gpu_temp_c_max", "gpu_sm_clock_mhz_mean",
    "cpu_temp_c_max", "rss_bytes_max", "threads_max", "processes_max", "telemetry_samples", "telemetry_interval_s",
    "telemetry_missing",
)
# Utilization is a rate over the window since the previous sample; /proc counts in 10 ms ticks, so the
# first sample (no window) and a stop() sample just after a tick carry no utilization (None, not 0).
MIN_WINDOW_FRACTION = 0.5
# Counting processes lists /proc, and reading sensors opens many files: each entry read gives the GIL
# away and back, which on a busy machine stalls the measured thread. Both change slowly, so they are
# read about once a second (every SLOW_STRIDE x that when one call takes over SLOW_CALL_S), forward-filled.
SLOW_SOURCE_PERIOD_S = 1.0
SLOW_CALL_S = 0.005
SLOW_STRIDE = 10
CPU_SENSOR_CHIPS = ("coretemp", "k10temp", "zenpower", "cpu_thermal", "cpu-thermal", "soc_thermal")
_PACKAGE_LABELS = ("package", "tctl", "tdie", "cpu")
_CORE_COLUMN = re.compile(r"cpu(\d+)_util_pct")
_GPU_UTIL_COLUMN = re.compile(r"gpu(\d+)_util_pct")


# ---------------------------------------------------------------- pure helpers

def cpu_busy_total_s(times: Any) -> tuple[float, float]:
    """(busy, total) time of one ``cpu_times`` entry (psutil's or ``CpuTimes``), counted the way psutil does.

    Idle and iowait are idle; guest time is already inside user time on Linux, so it is not added twice.
    """
    total = sum(times)
    total -= getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


def cpu_util_pct(prev: Any, cur: Any) -> float | None:
    """Utilization in percent (0-100) of one CPU between two ``cpu_times`` readings; None without elapsed time.

    Computed from our own readings rather than ``psutil.cpu_percent`` because that keeps one module-wide
    previous reading, which any other caller in the process would silently move.
    """
    busy0, total0 = cpu_busy_total_s(prev)
    busy1, total1 = cpu_busy_total_s(cur)
    d_total = total1 - total0
    if d_total <= 0:
        return None
    return min(100.0, max(0.0, 100.0 * (busy1 - busy0) / d_total))


CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest guest_nice")


def parse_proc_stat(text: str) -> dict[int, CpuTimes] | None:
    """Per-core times (clock ticks) from the text of /proc/stat; None if it ends inside the cpu lines."""
    cores: dict[int, CpuTimes] = {}
    for line in text.split("\n")[:-1]:  # complete lines only
        head, _, rest = line.partition(" ")
        if not head.startswith("cpu"):
            return cores
        if head != "cpu":
            values = [int(v) for v in rest.split()][:10]
            cores[int(head[3:])] = CpuTimes(*values, *[0] * (10 - len(values)))
    return None


def parse_proc_pid_stat(text: str) -> tuple[int, int, int]:
    """(user + system clock ticks, threads, resident pages) from the text of /proc/<pid>/stat."""
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[11]) + int(fields[12]), int(fields[17]), int(fields[21])


def cpu_temp_c(sensors: Mapping[str, Sequence[Any]]) -> float | None:
    """Hottest CPU reading among known CPU sensor chips and package-like labels; None if there is none."""
    readings: list[float] = []
    for chip, entries in sensors.items():
        cpu_chip = chip.lower() in CPU_SENSOR_CHIPS
        for entry in entries:
            label = (getattr(entry, "label", "") or "").lower()
            if cpu_chip or label.startswith(_PACKAGE_LABELS):
                value = getattr(entry, "current", None)
                if value is not None and math.isfinite(value):
                    readings.append(float(value))
    return max(readings) if readings else None


def visible_nvml_indices(cuda_visible_devices: str | None, device_count: int) -> list[int] | None:
    """NVML indices named by ``CUDA_VISIBLE_DEVICES`` when it is a plain list of integers, else None (all).

    Like CUDA, the list ends at the first index that names no device (so "-1" hides every GPU).
    NVML counts in PCI bus order, CUDA in its own order unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
    """
    if cuda_visible_devices is None:
        return None
    items = [s.strip() for s in cuda_visible_devices.split(",") if s.strip()]
    if not items:
        return []
    if not all(s.lstrip("-").isdigit() for s in items):
        return None  # UUIDs or MIG names: do not guess the mapping
    out: list[int] = []
    for s in items:
        i = int(s)
        if i < 0 or i >= device_count:
            break
        if i not in out:
            out.append(i)
    return out


def nvml_reason(exc: BaseException) -> str:
    """A short reason naming the NVML error class (e.g. ``NVMLError_NotSupported: Not Supported``)."""
    return f"{type(exc).__name__}: {exc}"


def _is_permanent(exc: BaseException) -> bool:
    """NotSupported / NoPermission will not change during a run: stop asking (each call costs time)."""
    if pynvml is None:
        return True
    permanent = tuple(getattr(pynvml, n) for n in ("NVMLError_NotSupported", "NVMLError_NoPermission",
                                                    "NVMLError_FunctionNotFound") if hasattr(pynvml, n))
    return isinstance(exc, permanent)


def _numeric(frame: pd.DataFrame, columns: Iterable[str]) -> pd.Series:
    """All values of ``columns`` as one float series (NaN for missing)."""
    cols = [c for c in columns if c in frame]
    if not cols:
        return pd.Series(dtype=float)
    return pd.concat([pd.to_numeric(frame[c], errors="coerce") for c in cols], ignore_index=True).astype(float)


def _stat(values: pd.Series, how: str) -> float | None:
    """mean / max / p95 of the non-missing values as a Python float; None when nothing was measured."""
    values = values.dropna()
    if values.empty:
        return None
    if how == "mean":
        return float(values.mean())
    if how == "max":
        return float(values.max())
    return float(values.quantile(0.95))


def _as_int(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def gpu_indices_in(frame: pd.DataFrame) -> list[int]:
    """The NVML indices that have columns in a telemetry frame."""
    return sorted(int(m.group(1)) for m in map(_GPU_UTIL_COLUMN.fullmatch, frame.columns) if m)


# ---------------------------------------------------------------- result

@dataclass
class Telemetry:
    """Samples of one sampled region (tidy: one row per sample) and why any source is missing."""

    frame: pd.DataFrame
    missing: dict[str, str]
    interval_s: float
    start_monotonic_s: float = 0.0  # time.monotonic() at t_s == 0, to align other clocks (energy readings)
    notes: dict[str, str] = field(default_factory=dict)  # how a source was sampled, where not every tick

    def _rows(self, phase: str | None) -> pd.DataFrame:
        if phase is None or "phase" not in self.frame:
            return self.frame
        return self.frame[self.frame["phase"] == phase]

    def summary(self, phase: str | None = None) -> dict[str, Any]:
        """One flat dict (``SUMMARY_COLUMNS``) for a results row; None, never 0, where nothing was measured.

        GPU figures pool every visible GPU: utilization and clock are means over GPUs and samples, memory
        and temperature the maximum of any GPU, power the mean over samples of the power summed over GPUs
        (a sample lacking any GPU's power is left out rather than under-counted).
        """
        df = self._rows(phase)
        gpus = gpu_indices_in(self.frame)
        gpu = lambda metric: [f"gpu{i}_{metric}" for i in gpus]  # noqa: E731
        power_cols = [c for c in gpu("power_w") if c in df]
        if power_cols and not df.empty:
            power = df[power_cols].apply(pd.to_numeric, errors="coerce").sum(axis=1, min_count=len(power_cols))
        else:
            power = pd.Series(dtype=float)
        reasons = "; ".join(f"{k}: {v}" for k, v in self.missing.items())
        return {
            "cpu_util_pct_mean": _stat(_numeric(df, ["cpu_util_pct"]), "mean"),
            "cpu_util_pct_p95": _stat(_numeric(df, ["cpu_util_pct"]), "p95"),
            "proc_cpu_util_pct_mean": _stat(_numeric(df, ["proc_cpu_util_pct"]), "mean"),
            "gpu_util_pct_mean": _stat(_numeric(df, gpu("util_pct")), "mean"),
            "gpu_util_pct_p95": _stat(_numeric(df, gpu("util_pct")), "p95"),
            "gpu_mem_util_pct_mean": _stat(_numeric(df, gpu("mem_util_pct")), "mean"),
            "gpu_mem_used_bytes_max": _as_int(_stat(_numeric(df, gpu("mem_used_bytes")), "max")),
            "gpu_power_w_mean": _stat(power, "mean"),
            "gpu_temp_c_max": _stat(_numeric(df, gpu("temp_c")), "max"),
            "gpu_sm_clock_mhz_mean": _stat(_numeric(df, gpu("sm_clock_mhz")), "mean"),
            "cpu_temp_c_max": _stat(_numeric(df, ["cpu_temp_c"]), "max"),
            "rss_bytes_max": _as_int(_stat(_numeric(df, ["rss_bytes"]), "max")),
            "threads_max": _as_int(_stat(_numeric(df, ["threads"]), "max")),
            "processes_max": _as_int(_stat(_numeric(df, ["processes"]), "max")),
            "telemetry_samples": int(len(df)),
            "telemetry_interval_s": float(self.interval_s),
            "telemetry_missing": reasons or None,
        }

    def to_csv_text(self) -> str:
        return self.frame.to_csv(index=False)


def write_telemetry_csv(telemetry: Telemetry, path: Path) -> Path:
    """Write the samples to ``path`` atomically (readers see the old file or the new one)."""
    atomic_write_text(Path(path), telemetry.to_csv_text())
    return Path(path)


# ---------------------------------------------------------------- GPU source

def _nvml_queries() -> dict[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """Column suffixes -> one NVML query of a handle giving them, in the units the suffixes name.

    Utilization is one call for both rates; each other metric is its own call, so that one unsupported
    metric costs only its own columns.
    """
    nv = pynvml

    def utilization(h: Any) -> tuple[Any, ...]:
        rates = nv.nvmlDeviceGetUtilizationRates(h)
        return rates.gpu, rates.memory

    return {
        ("util_pct", "mem_util_pct"): utilization,
        ("mem_used_bytes",): lambda h: (int(nv.nvmlDeviceGetMemoryInfo(h).used),),
        ("power_w",): lambda h: (nv.nvmlDeviceGetPowerUsage(h) / 1000.0,),  # mW
        ("temp_c",): lambda h: (nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),),
        ("sm_clock_mhz",): lambda h: (nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),),
        ("energy_j",): lambda h: (nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0,),  # mJ since driver load
    }


class _GpuSource:
    """NVML handles of the visible GPUs; each metric read alone so one unsupported metric costs only itself."""

    def __init__(self, gpu_indices: Sequence[int] | None):
        self.handles: dict[int, Any] = {}
        self.missing: dict[str, str] = {}
        self._initialized = False
        self._disabled: set[str] = set()
        if pynvml is None:
            self.missing["gpu"] = "NVML unavailable: nvidia-ml-py (pynvml) is not installed"
            return
        try:
            pynvml.nvmlInit()
            self._initialized = True
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            self.missing["gpu"] = f"NVML unavailable: {nvml_reason(exc)}"
            self.close()
            return
        indices = self._choose(gpu_indices, count)
        for i in indices:
            try:
                self.handles[i] = pynvml.nvmlDeviceGetHandleByIndex(i)
            except pynvml.NVMLError as exc:
                self.missing[f"gpu{i}"] = f"no handle: {nvml_reason(exc)}"
        if not self.handles and "gpu" not in self.missing:
            self.missing["gpu"] = "no visible GPU" if count else "NVML reports no GPU"
        self._queries = _nvml_queries()

    def _choose(self, gpu_indices: Sequence[int] | None, count: int) -> list[int]:
        if gpu_indices is not None:
            bad = [i for i in gpu_indices if not 0 <= i < count]
            if bad:
                self.missing["gpu_indices"] = f"NVML has {count} GPU(s); no GPU {bad}"
            return [i for i in gpu_indices if 0 <= i < count]
        visible = visible_nvml_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), count)
        return list(range(count)) if visible is None else visible

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i, handle in self.handles.items():
            for suffixes, query in self._queries.items():
                cols = [f"gpu{i}_{s}" for s in suffixes]
                out.update(dict.fromkeys(cols))
                if cols[0] in self._disabled:
                    continue
                try:
                    out.update(zip(cols, query(handle)))
                except pynvml.NVMLError as exc:
                    for col in cols:
                        self.missing.setdefault(col, nvml_reason(exc))
                    if _is_permanent(exc):
                        self._disabled.add(cols[0])
        return out

    def close(self) -> None:
        if self._initialized:
            self._initialized = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass


# ---------------------------------------------------------------- sampler

class _ProcfsCpu:
    """Linux: CPU figures from two ``pread`` calls per sample on /proc files kept open.

    A sampling thread gives the GIL away around every system call, and on a loaded machine each
    hand-off can keep the measured thread waiting for a scheduler slice; psutil spends about a dozen
    system calls on these figures, this two (a sample took ~0.07 ms instead of ~0.23 ms on a 2-core VM).
    """

    def __init__(self) -> None:
        self._stat_fd = os.open("/proc/stat", os.O_RDONLY)
        self._self_fd = os.open("/proc/self/stat", os.O_RDONLY)
        self._size = 256 * (os.cpu_count() or 1) + 4096
        self._clk_tck = os.sysconf("SC_CLK_TCK")
        self._page_bytes = os.sysconf("SC_PAGE_SIZE")
        self._prev = self._read()

    def _read(self) -> tuple[float, dict[int, CpuTimes], int, int, int]:
        t = time.monotonic()
        while (cores := parse_proc_stat(os.pread(self._stat_fd, self._size, 0).decode("ascii", "replace"))) is None:
            self._size *= 2
        ticks, threads, rss_pages = parse_proc_pid_stat(os.pread(self._self_fd, 4096, 0).decode("utf-8", "replace"))
        return t, cores, ticks, threads, rss_pages

    def sample(self, rated: bool) -> dict[str, Any]:
        (t0, cores0, ticks0, _, _), now = self._prev, self._read()
        self._prev = now
        t1, cores1, ticks1, threads, rss_pages = now
        per_core = {i: cpu_util_pct(cores0[i], c) if rated and i in cores0 else None for i, c in cores1.items()}
        proc = 100.0 * (ticks1 - ticks0) / self._clk_tck / (t1 - t0) if rated and t1 > t0 else None
        return {"proc_cpu_util_pct": proc, "rss_bytes": rss_pages * self._page_bytes, "threads": threads,
                **_per_core_columns(per_core)}

    def close(self) -> None:
        os.close(self._stat_fd)
        os.close(self._self_fd)


class _PsutilCpu:
    """Elsewhere (no /proc): the same figures from psutil."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._proc.cpu_percent()  # primes this Process object's counter; the first call returns 0.0
        self._prev = psutil.cpu_times(percpu=True)

    def sample(self, rated: bool) -> dict[str, Any]:
        times = psutil.cpu_times(percpu=True)
        per_core = {i: cpu_util_pct(a, b) if rated else None for i, (a, b) in enumerate(zip(self._prev, times))}
        self._prev = times
        with self._proc.oneshot():
            proc = self._proc.cpu_percent()
            row = {"proc_cpu_util_pct": proc if rated else None, "rss_bytes": int(self._proc.memory_info().rss),
                   "threads": int(self._proc.num_threads())}
        return {**row, **_per_core_columns(per_core)}

    def close(self) -> None:
        pass


def _per_core_columns(per_core: Mapping[int, float | None]) -> dict[str, Any]:
    """System utilization (mean over cores, as psutil reports it) and one column per core."""
    valid = [p for p in per_core.values() if p is not None]
    return {"cpu_util_pct": sum(valid) / len(valid) if valid else None,
            **{f"cpu{i}_util_pct": p for i, p in per_core.items()}}


def _open_cpu_source() -> _ProcfsCpu | _PsutilCpu:
    try:
        return _ProcfsCpu()
    except (OSError, ValueError, IndexError):
        return _PsutilCpu()


def _time_call_s(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


class TelemetrySampler:
    """Samples telemetry in a daemon thread from ``start()`` to ``stop()`` (or as a context manager)."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, *, gpus: bool = True,
                 gpu_indices: Sequence[int] | None = None):
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = float(interval_s)
        self.gpus = gpus
        self.gpu_indices = None if gpu_indices is None else list(gpu_indices)
        self.result: Telemetry | None = None
        self._phase = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._rows: list[dict[str, Any]] = []
        self._missing: dict[str, str] = {}
        self._notes: dict[str, str] = {}
        self._gpu: _GpuSource | None = None
        self._t0 = 0.0
        self._last_t_s = 0.0
        self._tick = 0
        self._last_slow: dict[str, Any] = {}

    # -- lifecycle
    def start(self) -> "TelemetrySampler":
        """Open the sources, take the first sample now and start the sampling thread."""
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._rows, self._missing, self._notes, self._tick = [], {}, {}, 0
        self._cpu_source = _open_cpu_source()
        self._strides = self._probe_slow_sources()
        if self.gpus:
            self._gpu = _GpuSource(self.gpu_indices)
            self._missing.update(self._gpu.missing)
        else:
            self._missing["gpu"] = "GPU sampling turned off (gpus=False)"
        self._stop.clear()
        self._t0 = time.monotonic()
        self._last_t_s = 0.0
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="benchlib-telemetry", daemon=True)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None

    def set_phase(self, phase: str) -> None:
        """Label the samples taken from now on (e.g. "train", "eval", "latency")."""
        self._phase = str(phase)

    def stop(self) -> Telemetry:
        """Stop and join the thread, take one last sample, close NVML and return the samples."""
        if self._thread is None:
            raise RuntimeError("sampler was not started")
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._sample()
        self._cpu_source.close()
        if self._gpu is not None:
            self._missing.update(self._gpu.missing)
            self._gpu.close()
            self._gpu = None
        self.result = Telemetry(frame=self._frame(), missing=dict(self._missing), interval_s=self.interval_s,
                                start_monotonic_s=self._t0, notes=dict(self._notes))
        return self.result

    def __enter__(self) -> "TelemetrySampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- sampling
    def _slow_stride(self, source: str, call: str, seconds: float) -> int:
        """Ticks between reads of a slowly changing source: about a second, ten times that if slow."""
        stride = max(1, math.ceil(SLOW_SOURCE_PERIOD_S / self.interval_s))
        if seconds > SLOW_CALL_S:
            stride *= SLOW_STRIDE
        if stride > 1:
            self._notes[source] = (f"{call} took {seconds * 1e3:.2f} ms: read every {stride} ticks "
                                   f"({stride * self.interval_s:g} s), forward-filled")
        return stride

    def _probe_slow_sources(self) -> dict[str, int]:
        """Read the slowly changing sources once, timing them; returns ticks between reads (0: never)."""
        seconds, pids = _time_call_s(psutil.pids)
        self._last_slow["processes"] = len(pids)
        strides = {"processes": self._slow_stride("processes", "psutil.pids()", seconds), "cpu_temp": 0}
        sensors_fn = getattr(psutil, "sensors_temperatures", None)
        if sensors_fn is None:
            self._missing["cpu_temp"] = "psutil exposes no temperature sensors on this OS"
            return strides
        try:
            seconds, sensors = _time_call_s(sensors_fn)
        except (OSError, RuntimeError) as exc:
            self._missing["cpu_temp"] = f"psutil.sensors_temperatures() failed: {exc}"
            return strides
        temp = cpu_temp_c(sensors)
        self._last_slow["cpu_temp_c"] = temp
        if temp is None:
            chips = ", ".join(sorted(sensors)) or "none"
            self._missing["cpu_temp"] = f"no CPU temperature sensor exposed by psutil (sensors: {chips})"
        else:
            strides["cpu_temp"] = self._slow_stride("cpu_temp", "psutil.sensors_temperatures()", seconds)
        return strides

    def _due(self, source: str) -> bool:
        stride = self._strides.get(source, 1)
        return stride > 0 and self._tick % stride == 0

    def _cpu(self, window_s: float) -> dict[str, Any]:
        """CPU figures; utilization only over a window of at least half an interval (see MIN_WINDOW_FRACTION)."""
        row = self._cpu_source.sample(rated=window_s >= MIN_WINDOW_FRACTION * self.interval_s)
        if self._due("processes"):
            self._last_slow["processes"] = len(psutil.pids())
        if self._due("cpu_temp"):
            self._last_slow["cpu_temp_c"] = cpu_temp_c(psutil.sensors_temperatures())
        return {**row, "processes": self._last_slow.get("processes"), "cpu_temp_c": self._last_slow.get("cpu_temp_c")}

    def _sample(self) -> None:
        """Take one sample; an unexpected error is recorded, never raised into the measured work."""
        with self._lock:
            t_s = time.monotonic() - self._t0
            window_s, self._last_t_s = t_s - self._last_t_s, t_s
            row: dict[str, Any] = {"t_s": t_s, "phase": self._phase}
            try:
                row.update(self._cpu(window_s))
            except Exception as exc:  # noqa: BLE001 - telemetry must not break the run
                self._missing.setdefault("cpu", f"sampling failed: {type(exc).__name__}: {exc}")
            if self._gpu is not None and self._gpu.handles:
                try:
                    row.update(self._gpu.sample())
                except Exception as exc:  # noqa: BLE001
                    self._missing.setdefault("gpu", f"sampling failed: {type(exc).__name__}: {exc}")
            self._rows.append(row)
            self._tick += 1

    def _loop(self) -> None:
        """Tick k is due at t0 + k * interval; a late tick skips the ticks already missed (no burst)."""
        k = 1
        while True:
            delay = self._t0 + k * self.interval_s - time.monotonic()
            if delay < 0:
                k += math.ceil(-delay / self.interval_s)
                delay = self._t0 + k * self.interval_s - time.monotonic()
            if self._stop.wait(max(0.0, delay)):
                return
            self._sample()
            k += 1

    def _frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self._rows)
        lead = ["t_s", "phase", "cpu_util_pct", "proc_cpu_util_pct", "rss_bytes", "threads", "processes", "cpu_temp_c"]
        cores = sorted((c for c in frame.columns if _CORE_COLUMN.fullmatch(c)),
                       key=lambda c: int(_CORE_COLUMN.fullmatch(c).group(1)))  # type: ignore[union-attr]
        gpus = [c for c in frame.columns if c.startswith("gpu")]
        for c in lead:
            if c not in frame:
                frame[c] = None
        return frame[lead + cores + gpus]


class NullSampler:
    """Stands in for TelemetrySampler when telemetry is turned off: no thread, no samples, a stated reason."""

    running = False

    def __init__(self, reason: str = "telemetry turned off (telemetry: false)"):
        self.result: Telemetry | None = None
        self._reason = reason

    def start(self) -> "NullSampler":
        self.result = Telemetry(frame=pd.DataFrame(columns=["t_s", "phase"]), missing={"telemetry": self._reason},
                                interval_s=0.0)
        return self

    def set_phase(self, phase: str) -> None:
        pass

    def stop(self) -> Telemetry | None:
        return self.result
