"""Whether other work shared the machine while a configuration was timed, and how much.

A figure taken while other processes hold the cores measures the contention, not the configuration:
a step can be five times slower and its spread larger than its median. The telemetry samples already
hold what is needed to say so: per-core utilization of the cores the run may use, this process's own
CPU (its DataLoader workers included), the time the hypervisor stole from this virtual machine, and,
per GPU, how many processes hold a context on it. This module turns them into the row's figures and
the flag; it reads nothing itself.

Other processes' share of the usable cores, per sample::

    other = sum(core busy % over usable cores) / 100 - own CPU / 100 - stolen share x usable cores

averaged over the timed phases' samples (then clipped at 0), as a percentage of the usable cores. Stolen
time counts as busy in /proc/stat, so it is taken out here and reported on its own (``steal_pct``).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..store.schema import finite_float

DEFAULT_THRESHOLD_PCT = 10.0  # of the cores the run may use; the sampler and kernel stay well under it
TIMED_PHASES = ("train", "latency")
_GPU_PROCESSES_COLUMN = re.compile(r"gpu(\d+)_processes")


@dataclass(frozen=True)
class Interference:
    """Other work on the machine during the timed phases of one configuration (None: not measurable)."""

    cpu_pct: float | None  # other processes' CPU use, % of the cores this run may use
    steal_pct: float | None  # CPU time the hypervisor gave to other virtual machines, % of all cores
    usable_cpus: int
    threshold_pct: float
    loadavg_1m_before: float | None = None
    cpu_freq_mhz_mean: float | None = None
    gpu_other_processes_max: int | None = None  # processes other than this one holding the run's GPUs

    @property
    def interfered(self) -> bool | None:
        """Above the threshold on CPU or steal, or another process on the run's GPU; None if unmeasured."""
        figures = [self.cpu_pct, self.steal_pct, self.gpu_other_processes_max]
        if all(f is None for f in figures):
            return None
        return ((self.cpu_pct or 0.0) > self.threshold_pct or (self.steal_pct or 0.0) > self.threshold_pct
                or (self.gpu_other_processes_max or 0) > 0)

    def describe(self) -> str | None:
        """What interfered, in words, for a row and a warning; None when nothing did."""
        if not self.interfered:
            return None
        parts = []
        if (self.cpu_pct or 0.0) > self.threshold_pct:
            parts.append(f"other processes used {self.cpu_pct:.0f}% of the {self.usable_cpus} usable CPUs")
        if (self.steal_pct or 0.0) > self.threshold_pct:
            parts.append(f"the hypervisor stole {self.steal_pct:.0f}% of the CPU time")
        if (self.gpu_other_processes_max or 0) > 0:
            parts.append(f"{self.gpu_other_processes_max} other process(es) held the GPU")
        return "; ".join(parts) + f" (threshold {self.threshold_pct:g}%)"


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def other_cores(row: dict[str, Any], usable: Sequence[int]) -> float | None:
    """Cores' worth of CPU other processes used in one sample, unclipped; None without per-core or own figures.

    Unclipped because this process's own figure can lag (a DataLoader worker found late brings its CPU
    in one window): the negative sample that follows a positive one cancels it in the phase's mean.
    """
    busy = [finite_float(row.get(f"cpu{i}_util_pct")) for i in usable]
    own = finite_float(row.get("proc_cpu_util_pct"))
    if own is None or not busy or any(b is None for b in busy):
        return None
    stolen = (finite_float(row.get("steal_pct")) or 0.0) / 100.0 * len(usable)
    return sum(b for b in busy if b is not None) / 100.0 - own / 100.0 - stolen


def measure(frame: pd.DataFrame, usable: Sequence[int], *, threshold_pct: float = DEFAULT_THRESHOLD_PCT,
            loadavg_1m_before: float | None = None, phases: Sequence[str] = TIMED_PHASES) -> Interference:
    """Interference over the samples of ``phases`` (all samples when the frame has no phase column)."""
    if "phase" in frame and not frame.empty:
        frame = frame[frame["phase"].isin(list(phases))]
    rows = frame.to_dict("records")
    usable = list(usable)
    shares = [other_cores(r, usable) for r in rows] if usable else []
    cores = _mean(shares)
    gpu_cols = [c for c in frame.columns if _GPU_PROCESSES_COLUMN.fullmatch(c)]
    gpu_counts = [finite_float(v) for c in gpu_cols for v in frame[c]]
    held = [int(v) for v in gpu_counts if v is not None]
    return Interference(
        cpu_pct=None if cores is None else max(0.0, 100.0 * cores / len(usable)),
        steal_pct=_mean(finite_float(r.get("steal_pct")) for r in rows),
        usable_cpus=len(usable), threshold_pct=float(threshold_pct), loadavg_1m_before=loadavg_1m_before,
        cpu_freq_mhz_mean=_mean(finite_float(r.get("cpu_freq_mhz")) for r in rows),
        # this process holds one context on each of the run's GPUs: the rest are others'
        gpu_other_processes_max=max(0, max(held) - 1) if held else None,
    )
