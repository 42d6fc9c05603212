"""How timing samples are taken: step timers and region clocks.

Timers synchronize at region boundaries only: CUDA and MPS steps are timed with device events read once at
the end (torch's generic ``torch.Event`` where ``torch.accelerator`` is present, else each backend's own
class). What the samples say (median, spread, percentiles) is ``instruments.samples``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from ..env.devices import accelerator, synchronize


class StepTimer:
    """Times many consecutive steps on a device without a synchronize per step.

    CPU work is synchronous, so a host clock per step is exact. On CUDA and MPS a pair of events is recorded
    around each step on the current stream of the timer's own device (not the process's current device:
    on ``cuda:1`` events recorded on ``cuda:0`` would time launches) and read after one synchronize at
    the end of the region. On an MPS torch without events the step is synchronized (``sync_per_step``).
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._use_events = device.type == "cuda" or (
            device.type == "mps" and (accelerator() is not None or hasattr(torch.mps, "event"))
        )
        self.sync_per_step = device.type == "mps" and not self._use_events
        self._pending: list[tuple[Any, Any]] = []
        self._host: list[float] = []
        self._t0 = 0.0
        self._start_event: Any = None

    def _event(self) -> Any:
        """A timing event recorded now on the current stream of the timer's own device.

        ``torch.Event`` where ``torch.accelerator`` is (2.6+; the generic event is older, 2.4, but served MPS
        only later). It keeps only the device's type, so the stream of the timer's own device is named. Older
        torch: CUDA's own event on that device's stream, or MPS's (one device, one stream).
        """
        generic = accelerator()
        event: Any
        if generic is not None:
            event = torch.Event(device=self.device, enable_timing=True)
            event.record(generic.current_stream(self.device))
        elif self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            event.record(torch.cuda.current_stream(self.device))
        else:
            event = torch.mps.event.Event(enable_timing=True)
            event.record()
        return event

    def start(self) -> None:
        if self._use_events:
            self._start_event = self._event()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self._use_events:
            self._pending.append((self._start_event, self._event()))
        else:
            if self.sync_per_step:
                synchronize(self.device)
            self._host.append(time.perf_counter() - self._t0)

    def collect(self) -> list[float]:
        """Synchronize once and return every step time so far in seconds, then reset."""
        if self._use_events:
            synchronize(self.device)
            out = [float(s.elapsed_time(e)) / 1000.0 for s, e in self._pending]
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
