"""Peak memory of one measured configuration.

CPU: peak resident set size over the configuration, from the kernel's high-water mark (VmHWM, reset
through /proc/self/clear_refs) or, where that is not available, from psutil samples; the baseline is
the RSS before the model was built. tracemalloc is not used: it does not see tensor memory.
Resetting VmHWM hides the process's lifetime peak from ``/usr/bin/time`` and ``ru_maxrss``, so the mark
read just before each reset is kept as its own figure (``process_peak_rss_bytes``).
CUDA: allocator peaks reset per configuration (the caller empties the cache first). MPS: the peak of
sampled allocated memory, and the driver's memory at the end.
"""
from __future__ import annotations

import ctypes
import gc
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

from ..env import harness

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _release_freed_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc ``malloc_trim``).

    Without it, memory a previous configuration freed stays resident, inflates the next baseline and
    is silently reused, so that configuration's growth above baseline reads too low.
    """
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def current_rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def _read_vm_hwm_bytes() -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_vm_hwm() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0); False where not permitted or not Linux."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    hwm = _read_vm_hwm_bytes()
    return hwm is not None and hwm <= current_rss_bytes() * 1.05 + 4096


@dataclass(frozen=True)
class MemoryReport:
    rss_baseline_bytes: int
    peak_rss_bytes: int
    peak_rss_source: str
    peak_cuda_allocated_bytes: int | None = None
    peak_cuda_reserved_bytes: int | None = None
    mps_allocated_bytes: int | None = None
    mps_driver_allocated_bytes: int | None = None
    process_peak_rss_bytes: int | None = None  # the process's high-water mark before this configuration reset it

    @property
    def peak_rss_above_baseline_bytes(self) -> int:
        return max(0, self.peak_rss_bytes - self.rss_baseline_bytes)


class PeakMemory:
    """Tracks peak memory between ``start()`` and ``stop()``; start before building the model."""

    def __init__(self, device: torch.device, sample_interval_s: float = 0.05):
        self.device = device
        self.sample_interval_s = sample_interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sampled_peak = 0
        self._mps_peak = 0
        self._baseline = 0
        self._process_peak: int | None = None
        self._hwm_reset = False

    def _sample(self) -> None:
        proc = psutil.Process()
        while not self._stop.wait(self.sample_interval_s):
            with harness.charged("peak-rss"):
                if not self._hwm_reset:
                    self._sampled_peak = max(self._sampled_peak, int(proc.memory_info().rss))
                if self.device.type == "mps":
                    self._mps_peak = max(self._mps_peak, int(torch.mps.current_allocated_memory()))

    def start(self) -> PeakMemory:
        _release_freed_memory()
        self._baseline = current_rss_bytes()
        self._sampled_peak = self._baseline
        self._process_peak = _read_vm_hwm_bytes()
        self._hwm_reset = _reset_vm_hwm()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.device.type == "mps":
            self._mps_peak = int(torch.mps.current_allocated_memory())
        if not self._hwm_reset or self.device.type == "mps":
            self._stop.clear()
            self._thread = threading.Thread(target=self._sample, name="benchlib-peak-rss", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> MemoryReport:
        now = current_rss_bytes()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        hwm = _read_vm_hwm_bytes() if self._hwm_reset else None
        if hwm is not None:
            peak, source = max(hwm, now), "VmHWM"
        else:
            peak, source = max(self._sampled_peak, now), "psutil-sampled"
        cuda_alloc = cuda_reserved = mps_alloc = mps_driver = None
        if self.device.type == "cuda":
            cuda_alloc = int(torch.cuda.max_memory_allocated(self.device))
            cuda_reserved = int(torch.cuda.max_memory_reserved(self.device))
        elif self.device.type == "mps":
            mps_alloc = max(self._mps_peak, int(torch.mps.current_allocated_memory()))
            mps_driver = int(torch.mps.driver_allocated_memory())
        return MemoryReport(self._baseline, peak, source, cuda_alloc, cuda_reserved, mps_alloc, mps_driver,
                            self._process_peak)
