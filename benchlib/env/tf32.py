"""TF32 for cuBLAS matmuls and cuDNN convolutions, read and set whichever of torch's two APIs is in use.

torch has the legacy flags (``torch.backends.cuda.matmul.allow_tf32``, ``torch.backends.cudnn.allow_tf32``)
and the newer ``fp32_precision`` strings, and refuses to read a legacy flag (a RuntimeError) once a user's
code set the newer one. Every read and set of TF32 in benchlib goes through here, so a notebook that chose
the new API still runs.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

_NEW_VALUES = {"tf32": True, "ieee": False}


def _backends() -> dict[str, tuple[Any, Any]]:
    """name -> (object with the legacy ``allow_tf32``, object with the newer ``fp32_precision``)."""
    cudnn = torch.backends.cudnn
    return {"matmul": (torch.backends.cuda.matmul, torch.backends.cuda.matmul),
            "cudnn": (cudnn, getattr(cudnn, "conv", cudnn))}


def tf32_enabled(backend: str) -> bool | None:
    """Whether ``backend`` (``matmul`` or ``cudnn``) runs fp32 as TF32; None where torch leaves it undecided."""
    legacy, new = _backends()[backend]
    try:
        return bool(legacy.allow_tf32)
    except RuntimeError:  # the newer API was used: the legacy flag cannot be read
        return _NEW_VALUES.get(str(getattr(new, "fp32_precision", "none")))


@contextmanager
def _one(backend: str, enabled: bool) -> Iterator[None]:
    legacy, new = _backends()[backend]
    obj: Any
    before: bool | str
    value: bool | str
    try:
        obj, attr, before, value = legacy, "allow_tf32", legacy.allow_tf32, enabled
    except RuntimeError:
        obj, attr, before, value = new, "fp32_precision", new.fp32_precision, "tf32" if enabled else "ieee"
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, before)


@contextmanager
def tf32(enabled: bool, backends: tuple[str, ...] = ("matmul", "cudnn")) -> Iterator[None]:
    """TF32 on or off for ``backends`` during the block, each restored afterwards in the API it was set with."""
    with ExitStack() as stack:
        for backend in backends:
            stack.enter_context(_one(backend, enabled))
        yield


def float32_matmul_precision() -> str:
    """torch's ``get_float32_matmul_precision`` ("highest", "high", "medium"), or the matmul's
    ``fp32_precision`` where the newer API was used and torch refuses to answer the older question."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return f"fp32_precision={torch.backends.cuda.matmul.fp32_precision}"
