"""Instruments: each measures one thing and returns samples; none writes a file.

Timing (step timers, region clocks, samples with their spread), peak memory, energy (NVML, RAPL),
background telemetry (CPU, GPU), and the analysis of profiler events.

The names below load their module on first use: a report reads thresholds and the analysis of saved figures
from here without importing torch (seconds per process: a report's notebook kernel, `benchlib report`).
"""
from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"EnergyMeter": "energy", "EnergyReading": "energy", "EnergyResult": "energy", "MemoryReport": "memory",
          "PeakMemory": "memory", "NullSampler": "telemetry", "Telemetry": "telemetry",
          "TelemetrySampler": "telemetry", "RegionClock": "timing", "Samples": "samples", "StepTimer": "timing"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
