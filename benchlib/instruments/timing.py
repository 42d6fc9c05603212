"""Timing samples and how they are taken.

A measurement keeps its raw samples; median, IQR, percentiles and the noise flag derive from them
(the idea of ``torch.utils.benchmark.Measurement``). Timers synchronize at region boundaries only:
CUDA (and MPS where available) steps are timed with device events read once at the end.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..env.devices import synchronize

NOISY_IQR_OVER_MEDIAN = 0.10


@dataclass(frozen=True)
class Samples:
    """Raw samples of one figure (seconds unless ``unit`` says otherwise)."""

    values: tuple[float, ...]
    unit: str = "s"

    @classmethod
    def of(cls, values: Sequence[float], unit: str = "s") -> Samples:
        return cls(tuple(float(v) for v in values), unit)

    @property
    def n(self) -> int:
        return len(self.values)

    def percentile(self, q: float) -> float:
        """The q-th percentile (linear interpolation); NaN when there are no samples."""
        return float(np.percentile(self.values, q)) if self.values else math.nan

    @property
    def median(self) -> float:
        return self.percentile(50)

    @property
    def iqr(self) -> float:
        return self.percentile(75) - self.percentile(25) if self.values else math.nan

    @property
    def total(self) -> float:
        return float(sum(self.values))

    @property
    def noisy(self) -> bool:
        """True when IQR/median exceeds 10%: the figure should not be trusted without repeats."""
        med = self.median
        return bool(self.values) and med > 0 and self.iqr / med > NOISY_IQR_OVER_MEDIAN


class StepTimer:
    """Times many consecutive steps on a device without a synchronize per step.

    CPU work is synchronous, so a host clock per step is exact. On CUDA a pair of events is recorded
    around each step on the current stream of the timer's own device (not the process's current device:
    on ``cuda:1`` events recorded on ``cuda:0`` would time launches) and read after one synchronize at
    the end of the region. On MPS events are used where torch provides them, else the step is
    synchronized (recorded in ``sync_per_step``).
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._use_events = device.type == "cuda" or (
            device.type == "mps" and hasattr(torch, "mps") and hasattr(torch.mps, "event")
        )
        self.sync_per_step = device.type == "mps" and not self._use_events
        self._pending: list[tuple[object, object]] = []
        self._host: list[float] = []
        self._t0 = 0.0
        self._start_event: object | None = None

    def _event(self) -> object:
        if self.device.type == "cuda":
            return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        return torch.mps.event.Event(enable_timing=True)

    def _record(self, event: object) -> None:
        if self.device.type == "cuda":
            event.record(torch.cuda.current_stream(self.device))  # type: ignore[attr-defined]
        else:
            event.record()  # type: ignore[attr-defined]

    def start(self) -> None:
        if self._use_events:
            self._start_event = self._event()
            self._record(self._start_event)
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self._use_events:
            end = self._event()
            self._record(end)
            self._pending.append((self._start_event, end))
        else:
            if self.sync_per_step:
                synchronize(self.device)
            self._host.append(time.perf_counter() - self._t0)

    def collect(self) -> list[float]:
        """Synchronize once and return every step time so far in seconds, then reset."""
        if self._use_events:
            synchronize(self.device)
            out = [s.elapsed_time(e) / 1000.0 for s, e in self._pending]  # type: ignore[attr-defined]
            self._pending.clear()
            return out
        out, self._host = self._host, []
        return out


@dataclass
class RegionClock:
    """Wall time of a whole region, synchronized at both ends (epochs, evaluation passes)."""

    device: torch.device
    seconds: float = field(default=math.nan, init=False)
    _t0: float = field(default=0.0, init=False)

    def __enter__(self) -> RegionClock:
        synchronize(self.device)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        synchronize(self.device)
        self.seconds = time.perf_counter() - self._t0
