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
import multiprocessing
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import psutil

from ..env import harness
from ..errors import one_line
from .cpu import CpuSource, cpu_temp_c, open_cpu_source
from .gpu_source import GpuSource

DEFAULT_INTERVAL_S = 0.1
# Utilization is a rate over the window since the previous sample; /proc counts in 10 ms ticks, so the
# first sample (no window) and a stop() sample just after a tick carry no utilization (None, not 0).
MIN_WINDOW_FRACTION = 0.5
# Counting processes lists /proc, and reading sensors opens many files: each entry read gives the GIL
# away and back, which on a busy machine stalls the measured thread. Both change slowly, so they are
# read about once a second (every SLOW_STRIDE x that when one call takes over SLOW_CALL_S), forward-filled.
SLOW_SOURCE_PERIOD_S = 1.0
SLOW_CALL_S = 0.005
SLOW_STRIDE = 10
# The most of one core the sampler may take: a first sample dearer than this share of the interval widens it.
MAX_CORE_SHARE = 0.005
# Where the measured work keeps every core busy (a CPU training step's parallel regions), a sample costs the
# work more than its own CPU: it displaces one of the region's threads, which the others wait for, and that
# thread comes back to cold caches. Measured in lockstep on the 2-core VM with AVX2 kernels (resnet18, batch
# 64, 16 rounds): sampling every 0.1 s at 0.23 ms of CPU a sample slowed the step by 0.8% [0.2, 1.4], three
# times its CPU share, and every 1 s by 0.2% [-0.4, 0.7]. Such work (``busy_cores``) widens the interval until
# CPU x BUSY_CORE_COST_FACTOR / interval stays under MAX_BUSY_WORK_SHARE of the work's time.
BUSY_CORE_COST_FACTOR = 3.0
MAX_BUSY_WORK_SHARE = 0.002
COST_PROBE_TICKS = 5  # the samples whose mean CPU is that cost (the first one, at start, pays one-time costs)
_CORE_COLUMN = re.compile(r"cpu(\d+)_util_pct")
_GPU_UTIL_COLUMN = re.compile(r"gpu(\d+)_util_pct")


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

@dataclass(frozen=True)
class TelemetrySummary:
    """One phase's telemetry in a few figures (a row's telemetry columns are made of it)."""

    cpu_util_pct_mean: float | None
    cpu_util_pct_p95: float | None
    proc_cpu_util_pct_mean: float | None
    gpu_util_pct_mean: float | None
    gpu_util_pct_p95: float | None
    gpu_mem_util_pct_mean: float | None
    gpu_mem_used_bytes_max: int | None
    gpu_power_w_mean: float | None
    gpu_temp_c_max: float | None
    gpu_sm_clock_mhz_mean: float | None
    cpu_temp_c_max: float | None
    rss_bytes_max: int | None
    threads_max: int | None
    processes_max: int | None
    samples: int
    interval_s: float
    missing: str | None  # why a source gave nothing, per source
    interval_note: str | None = None  # why the sampler sampled less often than asked, where it did


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

    def summary(self, phase: str | None = None) -> TelemetrySummary:
        """The samples of ``phase`` (all without one) summarized; None, never 0, where nothing was measured.

        GPU figures pool every visible GPU: utilization and clock are means over GPUs and samples, memory
        and temperature the maximum of any GPU, power the mean over samples of the power summed over GPUs
        (a sample lacking any GPU's power is left out rather than under-counted).
        """
        df = self._rows(phase)
        gpus = gpu_indices_in(self.frame)

        def gpu(metric: str) -> list[str]:
            return [f"gpu{i}_{metric}" for i in gpus]

        power_cols = [c for c in gpu("power_w") if c in df]
        if power_cols and not df.empty:
            power = df[power_cols].apply(pd.to_numeric, errors="coerce").sum(axis=1, min_count=len(power_cols))
        else:
            power = pd.Series(dtype=float)
        reasons = "; ".join(f"{k}: {v}" for k, v in self.missing.items())
        return TelemetrySummary(
            cpu_util_pct_mean=_stat(_numeric(df, ["cpu_util_pct"]), "mean"),
            cpu_util_pct_p95=_stat(_numeric(df, ["cpu_util_pct"]), "p95"),
            proc_cpu_util_pct_mean=_stat(_numeric(df, ["proc_cpu_util_pct"]), "mean"),
            gpu_util_pct_mean=_stat(_numeric(df, gpu("util_pct")), "mean"),
            gpu_util_pct_p95=_stat(_numeric(df, gpu("util_pct")), "p95"),
            gpu_mem_util_pct_mean=_stat(_numeric(df, gpu("mem_util_pct")), "mean"),
            gpu_mem_used_bytes_max=_as_int(_stat(_numeric(df, gpu("mem_used_bytes")), "max")),
            gpu_power_w_mean=_stat(power, "mean"),
            gpu_temp_c_max=_stat(_numeric(df, gpu("temp_c")), "max"),
            gpu_sm_clock_mhz_mean=_stat(_numeric(df, gpu("sm_clock_mhz")), "mean"),
            cpu_temp_c_max=_stat(_numeric(df, ["cpu_temp_c"]), "max"),
            rss_bytes_max=_as_int(_stat(_numeric(df, ["rss_bytes"]), "max")),
            threads_max=_as_int(_stat(_numeric(df, ["threads"]), "max")),
            processes_max=_as_int(_stat(_numeric(df, ["processes"]), "max")),
            samples=int(len(df)), interval_s=float(self.interval_s), missing=reasons or None,
            interval_note=self.notes.get("interval"),
        )

    def to_csv_text(self) -> str:
        return str(self.frame.to_csv(index=False))


def _time_call_s(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


class TelemetrySampler:
    """Samples telemetry in a daemon thread from ``start()`` to ``stop()`` (or as a context manager)."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, *, gpus: bool = True,
                 gpu_indices: Sequence[int] | None = None, gpu_uuids: Sequence[str] | None = None,
                 peer_pids: Sequence[int] = (), busy_cores: bool = False):
        """``gpu_uuids`` (the run's devices as torch names them) or ``gpu_indices`` (NVML's) pick the GPUs.

        ``peer_pids``: the run's other processes on this machine (data-parallel ranks), whose CPU is the
        run's own, not interference. ``busy_cores``: the work keeps every core it may use busy (training on
        the CPU), so a sample costs it about BUSY_CORE_COST_FACTOR times the sample's CPU.
        """
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = float(interval_s)
        self.gpus = gpus
        self.gpu_indices = None if gpu_indices is None else list(gpu_indices)
        self.gpu_uuids = None if gpu_uuids is None else list(gpu_uuids)
        self.peer_pids = list(peer_pids)
        self.busy_cores = busy_cores
        self.result: Telemetry | None = None
        self._phase = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._rows: list[dict[str, Any]] = []
        self._missing: dict[str, str] = {}
        self._notes: dict[str, str] = {}
        self._gpu: GpuSource | None = None
        self._t0 = 0.0
        self._last_t_s = 0.0
        self._tick = 0
        self._last_slow: dict[str, Any] = {}
        self._slow_s: dict[str, float] = {}  # seconds one read of each slowly changing source took at start

    # -- lifecycle
    def start(self) -> TelemetrySampler:
        """Open the sources, take the first sample now and start the sampling thread."""
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._rows, self._missing, self._notes, self._tick, self._last_slow = [], {}, {}, 0, {}
        self._cpu_source: CpuSource = open_cpu_source()
        self._strides = self._probe_slow_sources()
        if self.gpus:
            self._gpu = GpuSource(self.gpu_indices, self.gpu_uuids)
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

    @property
    def samples_taken(self) -> int:
        """Samples taken so far (the first at ``start``)."""
        return len(self._rows)

    def pause(self) -> None:
        """End the periodic sampling thread and keep the sources open: samples are then taken only by
        ``sample_now``, and ``stop`` still takes the last one and closes. For probes that time a sample."""
        if self._thread is None:
            raise RuntimeError("sampler was not started")
        self._stop.set()
        self._thread.join()

    def sample_now(self) -> None:
        """Take one sample in the calling thread: what the sampling thread does at each tick."""
        self._sample()

    def __enter__(self) -> TelemetrySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- sampling
    def _bound_cost(self, sample_cpu_s: float) -> bool:
        """Widen the interval where a sample's CPU (the mean of the first ``COST_PROBE_TICKS``, plus the
        slowly changing sources' reads shared over their ticks) is over ``MAX_CORE_SHARE`` of a core (many
        cores or GPUs make a sample dearer), or, for work that keeps the cores busy, would cost it over
        ``MAX_BUSY_WORK_SHARE`` of its time; and say so: the sampler must not take from the work it watches.
        True when it widened."""
        per_tick_s = sample_cpu_s + sum(seconds / self._strides[source] for source, seconds in self._slow_s.items()
                                        if self._strides.get(source, 0) > 0)
        widest = per_tick_s / MAX_CORE_SHARE
        why = f"sampling under {MAX_CORE_SHARE:.1%} of a core"
        if self.busy_cores and per_tick_s * BUSY_CORE_COST_FACTOR / MAX_BUSY_WORK_SHARE > widest:
            widest = per_tick_s * BUSY_CORE_COST_FACTOR / MAX_BUSY_WORK_SHARE
            why = (f"its cost to work that keeps the cores busy (about {BUSY_CORE_COST_FACTOR:g}x its CPU) under "
                   f"{MAX_BUSY_WORK_SHARE:.1%} of the work's time")
        if widest <= self.interval_s:
            return False
        self._notes["interval"] = (f"a sample took {per_tick_s * 1e3:.2f} ms of CPU: the interval is "
                                   f"{widest:.2f} s, not {self.interval_s:g} s, to keep {why}")
        old, self.interval_s = self.interval_s, widest  # slow sources keep their period in seconds
        self._strides = {k: max(1, round(v * old / widest)) if v > 0 else v for k, v in self._strides.items()}
        return True

    def _slow_stride(self, source: str, call: str, seconds: float) -> int:
        """Ticks between reads of a slowly changing source: about a second, ten times that if slow."""
        stride = max(1, math.ceil(SLOW_SOURCE_PERIOD_S / self.interval_s))
        if seconds > SLOW_CALL_S:
            stride *= SLOW_STRIDE
        if stride > 1:
            self._notes[source] = (f"{call} took {seconds * 1e3:.2f} ms: read every {stride} ticks "
                                   f"({stride * self.interval_s:g} s), forward-filled")
        return stride

    def _processes(self) -> dict[str, Any]:
        """Processes on the machine. The multiprocessing children (DataLoader workers) and the run's peer
        ranks join this process's own CPU figure; any other process (a shell command, a helper) is another's."""
        children = [p.pid for p in multiprocessing.active_children() if p.pid is not None]
        self._cpu_source.set_children(children + self.peer_pids)
        return {"processes": len(psutil.pids())}

    def _probe_slow_sources(self) -> dict[str, int]:
        """Read the slowly changing sources once, timing them; returns ticks between reads (0: never)."""
        seconds, found = _time_call_s(self._processes)
        self._last_slow.update(found)
        self._slow_s = {"processes": seconds}
        strides = {"processes": self._slow_stride("processes", "listing processes", seconds), "cpu_temp": 0,
                   "cpu_freq": 0}
        freq_fn = getattr(psutil, "cpu_freq", None)
        try:
            seconds, freq = _time_call_s(freq_fn) if freq_fn else (0.0, None)
        except (OSError, RuntimeError, NotImplementedError) as exc:
            freq = None
            self._missing["cpu_freq"] = f"psutil.cpu_freq() failed: {exc}"
        if freq is not None and freq.current:
            self._last_slow["cpu_freq_mhz"] = float(freq.current)
            self._slow_s["cpu_freq"] = seconds
            strides["cpu_freq"] = self._slow_stride("cpu_freq", "psutil.cpu_freq()", seconds)
        else:
            self._missing.setdefault("cpu_freq", "the OS exposes no CPU frequency to psutil")
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
            self._slow_s["cpu_temp"] = seconds
        return strides

    def _due(self, source: str) -> bool:
        stride = self._strides.get(source, 1)
        return stride > 0 and self._tick % stride == 0

    def _cpu(self, window_s: float) -> dict[str, Any]:
        """CPU figures; utilization only over a window of at least half an interval (see MIN_WINDOW_FRACTION)."""
        row = self._cpu_source.sample(rated=window_s >= MIN_WINDOW_FRACTION * self.interval_s)
        if self._due("processes"):
            self._last_slow.update(self._processes())
            if self._gpu is not None and self._gpu.handles:
                self._last_slow.update(self._gpu.processes())
        if self._due("cpu_temp"):
            self._last_slow["cpu_temp_c"] = cpu_temp_c(psutil.sensors_temperatures())
        if self._due("cpu_freq"):
            freq = psutil.cpu_freq()
            self._last_slow["cpu_freq_mhz"] = float(freq.current) if freq is not None else None
        return {**row, **self._last_slow}

    def _sample(self) -> None:
        """Take one sample; an unexpected error is recorded, never raised into the measured work."""
        with self._lock, harness.charged("telemetry"):
            t_s = time.monotonic() - self._t0
            window_s, self._last_t_s = t_s - self._last_t_s, t_s
            row: dict[str, Any] = {"t_s": t_s, "phase": self._phase}
            try:
                row.update(self._cpu(window_s))
            except Exception as exc:  # noqa: BLE001 - telemetry must not break the run
                self._missing.setdefault("cpu", f"sampling failed: {one_line(exc)}")
            if self._gpu is not None and self._gpu.handles:
                try:
                    row.update(self._gpu.sample())
                except Exception as exc:  # noqa: BLE001
                    self._missing.setdefault("gpu", f"sampling failed: {one_line(exc)}")
            self._rows.append(row)
            self._tick += 1

    def _loop(self) -> None:
        """Tick k is due at base + k * interval; a late tick skips the ticks already missed (no burst). The CPU
        of the first ``COST_PROBE_TICKS`` samples bounds the interval (``_bound_cost``); a widened one starts
        its ticks afresh."""
        k, base = 1, self._t0
        probe: list[float] = []
        while True:
            delay = base + k * self.interval_s - time.monotonic()
            if delay < 0:
                k += math.ceil(-delay / self.interval_s)
                delay = base + k * self.interval_s - time.monotonic()
            if self._stop.wait(max(0.0, delay)):
                return
            cpu_before = time.thread_time()
            self._sample()
            k += 1
            if len(probe) < COST_PROBE_TICKS:
                probe.append(time.thread_time() - cpu_before)
                if len(probe) == COST_PROBE_TICKS and self._bound_cost(sum(probe) / len(probe)):
                    k, base = 1, time.monotonic()

    def _frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(self._rows)
        lead = ["t_s", "phase", "cpu_util_pct", "proc_cpu_util_pct", "steal_pct", "rss_bytes", "threads", "processes",
                "cpu_temp_c", "cpu_freq_mhz"]
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

    def start(self) -> NullSampler:
        self.result = Telemetry(frame=pd.DataFrame(columns=["t_s", "phase"]), missing={"telemetry": self._reason},
                                interval_s=0.0)
        return self

    def set_phase(self, phase: str) -> None:
        pass

    def stop(self) -> Telemetry | None:
        return self.result
