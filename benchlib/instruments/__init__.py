"""Instruments: each measures one thing and returns samples; none writes a file.

Timing (step timers, region clocks, samples with their spread), peak memory, energy (NVML, RAPL),
background telemetry (CPU, GPU), and the analysis of profiler events.
"""
from .energy import EnergyMeter, EnergyReading, EnergyResult
from .memory import MemoryReport, PeakMemory
from .telemetry import NullSampler, Telemetry, TelemetrySampler
from .timing import RegionClock, Samples, StepTimer

__all__ = ["EnergyMeter", "EnergyReading", "EnergyResult", "MemoryReport", "NullSampler", "PeakMemory", "RegionClock",
           "Samples", "StepTimer", "Telemetry", "TelemetrySampler"]
