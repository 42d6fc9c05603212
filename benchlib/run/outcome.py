"""How a configuration that produced no measurement ended: its status word and one line saying why."""
from __future__ import annotations

import torch

from ..errors import MeasurementOutcome, one_line
from ..spec.settings import RunConfig
from .columns import Row, unmeasured_row


def error_text(exc: BaseException) -> str:
    """One line naming the error: the notebook's own exception for a failed cell, else the first line."""
    if isinstance(exc, MeasurementOutcome) and exc.status == "skipped":
        return str(exc)
    if hasattr(exc, "ename") and hasattr(exc, "evalue"):  # papermill: the cell's exception
        return f"{type(exc).__name__}: {exc.ename}: {exc.evalue}"[:500]
    return one_line(exc)[:500]


def failure_status(exc: BaseException) -> str:
    """The row status of an exception: skipped, oom, unstable, or failed."""
    if isinstance(exc, MeasurementOutcome):
        return exc.status
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return "oom"
    if isinstance(exc, RuntimeError) and any(s in str(exc) for s in _CPU_ALLOCATION_FAILED):
        return "oom"  # torch's CPU allocator raises a plain RuntimeError when the host has no memory for a tensor
    return "failed"


_CPU_ALLOCATION_FAILED = ("DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory")


def failure_row(cfg: RunConfig, exc: BaseException, machine: str) -> Row:
    """A row that records why a configuration produced no measurement."""
    return unmeasured_row(cfg, failure_status(exc), error_text(exc), machine)
