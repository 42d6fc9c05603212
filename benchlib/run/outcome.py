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
    """The row status of an exception: skipped, oom, unstable, or failed.

    Out of memory has many spellings besides ``torch.OutOfMemoryError``: a ``torch.AcceleratorError`` "CUDA
    error: out of memory", cuBLAS's and cuDNN's ``ALLOC_FAILED``, NCCL's "out of memory", the CPU allocator's
    plain RuntimeError, and any of them wrapped by another error (``torch.compile`` raises its own around
    what failed inside): the whole chain of causes is read.
    """
    if isinstance(exc, MeasurementOutcome):
        return exc.status
    return "oom" if any(_is_out_of_memory(e) for e in _causes(exc)) else "failed"


_OUT_OF_MEMORY_WORDS = (
    "out of memory",  # CUDA's own error string, NCCL's, and torch's OutOfMemoryError text
    "_ALLOC_FAILED",  # CUBLAS_STATUS_ALLOC_FAILED, CUDNN_STATUS_ALLOC_FAILED
    "DefaultCPUAllocator: can't allocate memory", "DefaultCPUAllocator: not enough memory",  # the CPU allocator
)


def _is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(w.lower() in str(exc).lower() for w in _OUT_OF_MEMORY_WORDS)


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from or during, outermost first (each once)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and all(seen is not c for c in chain):
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def failure_row(cfg: RunConfig, exc: BaseException, machine: str) -> Row:
    """A row that records why a configuration produced no measurement."""
    return unmeasured_row(cfg, failure_status(exc), error_text(exc), machine)
