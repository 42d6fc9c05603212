"""Energy of a measured window: GPU from NVML's energy counter, CPU package from RAPL.

Read a meter before and after the work (``EnergyMeter.read``) and take ``between`` the two readings.
GPU energy is the difference of NVML's total-energy counter (mJ since the driver loaded, Volta and
newer); where a GPU has no counter it is power x time integrated from telemetry samples. CPU package
energy is the difference of the RAPL counters under ``/sys/class/powercap`` (wraparound handled).

A counter refreshes only every so often (NVML: tens of ms up to ~100 ms; RAPL: ~1 ms), so a window
shorter than that can read 0, and an NVML window under about a second is mostly the counter's steps:
such a window is reported *unmeasurable* with a reason, never 0 J. Measure long enough (see
``EnergyMeter.counts_gpu``).
"""
from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .nvml import NvmlDevices, nvml_reason, pynvml

if TYPE_CHECKING:
    from .telemetry import Telemetry

POWERCAP_ROOT = Path("/sys/class/powercap")
NVML_MIN_WINDOW_S = 1.0  # the counter refreshes every 20-100 ms; a window under ~1 s is mostly quantization
RAPL_UPDATE_S = 0.001  # RAPL's energy status registers refresh about every millisecond
_RAPL_ZONE = re.compile(r"intel-rapl:(\d+)")  # top-level zones only ("intel-rapl:0:1" is a subzone)


@dataclass(frozen=True)
class EnergyReading:
    """Counters read at one moment (``t_s`` on ``time.monotonic``); None where a counter is unreadable."""

    t_s: float
    gpu_energy_mj: dict[int, int | None]
    rapl_energy_uj: dict[str, int] | None  # package domain ("package-0") -> counter
    reasons: dict[str, str] = field(default_factory=dict)  # why a counter is None ("gpu", "gpu1", "cpu")


@dataclass(frozen=True)
class EnergyResult:
    """Energy of one window in joules, how it was obtained, and why any part could not be measured."""

    seconds: float
    gpu_j: float | None
    gpu_method: str | None  # "nvml-counter" | "power-x-time" | "nvml-counter+power-x-time" | None
    cpu_package_j: float | None
    cpu_method: str | None  # "rapl" | None
    unmeasurable: dict[str, str]


def per_sample(joules: float | None, samples: int) -> float | None:
    """Joules per sample; None where the energy is unknown or no sample was processed."""
    if joules is None or samples <= 0 or not math.isfinite(joules):
        return None
    return joules / samples


# ---------------------------------------------------------------- RAPL (pure over a sysfs root)

def rapl_package_zones(root: Path) -> dict[str, Path]:
    """Package zones under a powercap root: domain name ("package-0") -> zone folder.

    Only ``intel-rapl:N`` zones named ``package-*`` count (AMD exposes them there too on recent
    kernels); ``psys`` and subzones (core, uncore, dram) would count energy twice, and the
    ``intel-rapl-mmio`` mirror of the package is left out for the same reason.
    """
    zones: dict[str, Path] = {}
    if not root.is_dir():
        return zones
    for zone in sorted(root.iterdir(), key=lambda p: p.name):
        if not _RAPL_ZONE.fullmatch(zone.name):
            continue
        try:
            name = (zone / "name").read_text().strip()
        except OSError:
            continue
        if name.startswith("package"):
            zones[name if name not in zones else f"{name}@{zone.name}"] = zone
    return zones


def read_rapl_uj(root: Path, file: str = "energy_uj") -> tuple[dict[str, int] | None, str | None]:
    """Each package zone's ``file`` in µJ, or (None, reason) where RAPL is absent or unreadable."""
    zones = rapl_package_zones(root)
    if not zones:
        return None, f"RAPL not exposed: no package zone under {root}"
    out: dict[str, int] = {}
    for name, zone in zones.items():
        path = zone / file
        try:
            out[name] = int(path.read_text().strip())
        except PermissionError:
            return None, f"RAPL not readable: {path} permission denied (root-only since Linux 5.10)"
        except (OSError, ValueError) as exc:
            return None, f"RAPL not readable: {path}: {exc}"
    return out, None


def counter_delta(start: int, end: int, max_range: int | None) -> int | None:
    """Increase of a counter that wraps to 0 after ``max_range``; None if it went back with no known range.

    Only one wrap per window can be seen: read RAPL at least once per wrap period (minutes at full load).
    """
    if end >= start:
        return end - start
    if max_range is None or max_range <= 0:
        return None
    return end + max_range - start


# ---------------------------------------------------------------- power x time (pure over a telemetry frame)

def integrate_power_j(t_s: Sequence[float], power_w: Sequence[float | None], start_s: float, end_s: float,
                      interval_s: float) -> tuple[float | None, str | None]:
    """Energy over [start_s, end_s] from power samples (trapezoid), or (None, reason).

    Power at the window edges is interpolated from the neighbouring samples; the samples must reach
    within one interval of both edges, and the window must be at least one sampling interval long.
    """
    t = np.asarray(t_s, dtype=float)
    p = np.asarray([np.nan if v is None else v for v in power_w], dtype=float)
    ok = np.isfinite(t) & np.isfinite(p)
    t, p = t[ok], p[ok]
    order = np.argsort(t, kind="stable")
    t, p = t[order], p[order]
    if end_s - start_s < interval_s:
        return None, f"window {end_s - start_s:.3g} s shorter than the power sampling interval ({interval_s:g} s)"
    if len(t) < 2:
        return None, "fewer than 2 power samples"
    slack = interval_s * 1.5
    if t[0] > start_s + slack or t[-1] < end_s - slack:
        return None, (f"power samples cover {t[0]:.3g}-{t[-1]:.3g} s, not the window "
                      f"{start_s:.3g}-{end_s:.3g} s")
    inside = (t > start_s) & (t < end_s)
    tt = np.concatenate(([start_s], t[inside], [end_s]))
    pp = np.concatenate(([np.interp(start_s, t, p)], p[inside], [np.interp(end_s, t, p)]))
    return float(np.sum((tt[1:] - tt[:-1]) * (pp[1:] + pp[:-1]) / 2.0)), None


def _power_x_time(telemetry: Telemetry, gpu: int, start: float, end: float) -> tuple[float | None, str | None]:
    col = f"gpu{gpu}_power_w"
    frame = telemetry.frame
    if col not in frame or "t_s" not in frame:
        missing = telemetry.missing.get(col) or telemetry.missing.get("gpu") or "no power column in telemetry"
        return None, f"power x time: {missing}"
    t0 = telemetry.start_monotonic_s
    values = [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in frame[col]]
    joules, reason = integrate_power_j(frame["t_s"].astype(float).tolist(), values, start - t0, end - t0,
                                       telemetry.interval_s)
    return joules, None if reason is None else f"power x time: {reason}"


# ---------------------------------------------------------------- differences of two readings

def gpu_counter_j(start_mj: int, end_mj: int, seconds: float) -> tuple[float | None, str | None]:
    """Joules from two NVML counter reads, or (None, reason) when the difference cannot be trusted."""
    delta = end_mj - start_mj
    if delta < 0:
        return None, "NVML energy counter went backwards (driver reloaded?)"
    if seconds < NVML_MIN_WINDOW_S:
        return None, (f"window {seconds:.3g} s shorter than the counter's update period lets one trust "
                      f"(>= {NVML_MIN_WINDOW_S:g} s): unmeasurable, not 0 J")
    if delta == 0:
        return None, f"NVML energy counter did not advance in {seconds:.3g} s: unmeasurable, not 0 J"
    return delta / 1000.0, None


def _gpu_energy(start: EnergyReading, end: EnergyReading, seconds: float, telemetry: Telemetry | None,
                unmeasurable: dict[str, str]) -> tuple[float | None, str | None]:
    gpus = sorted(set(start.gpu_energy_mj) | set(end.gpu_energy_mj))
    if not gpus:
        unmeasurable["gpu"] = end.reasons.get("gpu") or start.reasons.get("gpu") or "no GPU"
        return None, None
    total, methods, complete = 0.0, set(), True
    for i in gpus:
        a, b = start.gpu_energy_mj.get(i), end.gpu_energy_mj.get(i)
        if a is not None and b is not None:
            joules, reason = gpu_counter_j(a, b, seconds)
            method = "nvml-counter"
        else:
            counter_reason = end.reasons.get(f"gpu{i}") or start.reasons.get(f"gpu{i}") or "no energy counter"
            if telemetry is None:
                joules, reason = None, f"{counter_reason}; no telemetry for power x time"
            else:
                joules, reason = _power_x_time(telemetry, i, start.t_s, end.t_s)
                reason = None if reason is None else f"{counter_reason}; {reason}"
            method = "power-x-time"
        if joules is None:
            unmeasurable[f"gpu{i}"] = reason or "unmeasurable"
            complete = False
        else:
            total += joules
            methods.add(method)
    if not complete:  # a sum missing a GPU would read as the whole
        return None, None
    return total, "+".join(m for m in ("nvml-counter", "power-x-time") if m in methods)


def _cpu_energy(start: EnergyReading, end: EnergyReading, seconds: float, max_range_uj: Mapping[str, int] | None,
                unmeasurable: dict[str, str]) -> tuple[float | None, str | None]:
    if start.rapl_energy_uj is None or end.rapl_energy_uj is None:
        unmeasurable["cpu"] = end.reasons.get("cpu") or start.reasons.get("cpu") or "RAPL not read"
        return None, None
    if set(start.rapl_energy_uj) != set(end.rapl_energy_uj):
        unmeasurable["cpu"] = "RAPL package domains differ between the two readings"
        return None, None
    total_uj = 0
    for name, a in start.rapl_energy_uj.items():
        delta = counter_delta(a, end.rapl_energy_uj[name], (max_range_uj or {}).get(name))
        if delta is None:
            unmeasurable["cpu"] = f"RAPL {name} counter went backwards and its max_energy_range_uj is unknown"
            return None, None
        total_uj += delta
    if total_uj == 0:
        why = (f"window {seconds:.3g} s shorter than RAPL's update period (~{RAPL_UPDATE_S:g} s)"
               if seconds < RAPL_UPDATE_S else f"RAPL counters did not advance in {seconds:.3g} s")
        unmeasurable["cpu"] = f"{why}: unmeasurable, not 0 J"
        return None, None
    return total_uj / 1e6, "rapl"


# ---------------------------------------------------------------- meter (I/O)

class EnergyMeter:
    """Reads the GPU (NVML) and CPU package (RAPL) energy counters; ``between`` turns two reads into joules.

    GPUs are chosen by the UUIDs torch reports for the run's devices (``gpu_uuids``) or by NVML index;
    with neither, those ``CUDA_VISIBLE_DEVICES`` names (when plain integers), else all. Call ``close()``
    (or use ``with``) to release NVML.
    """

    def __init__(self, gpu_indices: Sequence[int] | None = None, *, gpu_uuids: Sequence[str] | None = None):
        self._devices = NvmlDevices(gpu_indices, uuids=gpu_uuids)
        self.reasons: dict[str, str] = dict(self._devices.missing)
        for i in self._devices.mig:  # the counter NVML has is the whole board's, which the other slices share
            self.reasons[f"gpu{i}"] = ("a MIG slice: NVML's energy counter is its whole GPU's, shared with the "
                                       "other slices; not attributed to this one")
        self._handles = {i: h for i, h in self._devices.handles.items() if i not in self._devices.mig}
        self.rapl_max_range_uj, _ = read_rapl_uj(POWERCAP_ROOT, "max_energy_range_uj")

    @property
    def counts_gpu(self) -> bool:
        """True when a GPU energy counter is read: its window must last NVML_MIN_WINDOW_S."""
        return bool(self._handles)

    def _gpu_counter_mj(self, i: int, reasons: dict[str, str]) -> int | None:
        try:
            return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handles[i]))
        except pynvml.NVMLError as exc:
            reasons[f"gpu{i}"] = f"NVML energy counter: {nvml_reason(exc)}"
            return None

    def read(self) -> EnergyReading:
        """Read every counter now (cheap: one NVML call per GPU, one sysfs file per CPU package)."""
        reasons = {k: v for k, v in self.reasons.items() if k.startswith("gpu")}
        t_s = time.monotonic()
        gpu = {i: self._gpu_counter_mj(i, reasons) for i in self._handles}
        rapl, why = read_rapl_uj(POWERCAP_ROOT)
        if why:
            reasons["cpu"] = why
        return EnergyReading(t_s=t_s, gpu_energy_mj=gpu, rapl_energy_uj=rapl, reasons=reasons)

    def between(self, start: EnergyReading, end: EnergyReading, *, telemetry: Telemetry | None = None) -> EnergyResult:
        """Energy from ``start`` to ``end``; parts that cannot be measured are None with a reason."""
        return energy_between(start, end, telemetry=telemetry, rapl_max_range_uj=self.rapl_max_range_uj)

    def close(self) -> None:
        self._devices.close()

    def __enter__(self) -> EnergyMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def energy_between(start: EnergyReading, end: EnergyReading, *, telemetry: Telemetry | None = None,
                   rapl_max_range_uj: Mapping[str, int] | None = None) -> EnergyResult:
    """Pure form of ``EnergyMeter.between``: the meter only supplies RAPL's wrap ranges."""
    seconds = end.t_s - start.t_s
    if seconds < 0:
        raise ValueError("end reading precedes start reading")
    unmeasurable: dict[str, str] = {}
    gpu_j, gpu_method = _gpu_energy(start, end, seconds, telemetry, unmeasurable)
    cpu_j, cpu_method = _cpu_energy(start, end, seconds, rapl_max_range_uj, unmeasurable)
    return EnergyResult(seconds=seconds, gpu_j=gpu_j, gpu_method=gpu_method, cpu_package_j=cpu_j,
                        cpu_method=cpu_method, unmeasurable=unmeasurable)
