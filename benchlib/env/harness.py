"""What benchlib's own threads cost the machine they measure: CPU seconds, charged by each thread to itself.

The telemetry sampler, the peak-memory sampler, the ranks' watch and the progress heartbeat run beside the
measured work and take CPU from it. Each charges the CPU time of its own work here (``time.thread_time``
around each iteration: the thread's own CPU, whatever else runs), so a row can say what the harness took
from the steps it timed (:func:`cpu_s` read at both ends of the window).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_charged_s: dict[str, float] = {}


def charge(thread: str, seconds: float) -> None:
    """Add ``seconds`` of CPU to ``thread``'s account."""
    with _lock:
        _charged_s[thread] = _charged_s.get(thread, 0.0) + max(0.0, seconds)


@contextmanager
def charged(thread: str) -> Iterator[None]:
    """Charge the CPU time the calling thread spends in the block to ``thread``."""
    start = time.thread_time()
    try:
        yield
    finally:
        charge(thread, time.thread_time() - start)


def cpu_s() -> float:
    """CPU seconds every benchlib thread has charged so far in this process."""
    with _lock:
        return sum(_charged_s.values())


def by_thread_s() -> dict[str, float]:
    with _lock:
        return dict(_charged_s)
