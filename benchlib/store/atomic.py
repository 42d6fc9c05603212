"""Atomic file writes: readers see the old file or the new one, never a part of either.

Every file benchlib writes under a results or reports folder goes through here: a temporary file in the
same folder, fsynced, then renamed over the target (``os.replace`` is atomic on one file system).
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file-name-safe form of ``text`` (keeps letters, digits, '.', '_' and '-')."""
    return _SAFE.sub("-", text).strip("-") or "unnamed"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, fsynced, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide results from other users
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def json_ready(value: Any) -> Any:
    """Non-finite floats become null (JSON has no NaN) and numpy/torch scalars plain numbers, recursively."""
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return json_ready(value.item())
    return value


def json_text(data: Any, indent: int | None = None) -> str:
    """``data`` as strict JSON text, the one way benchlib writes JSON (files and every ``--json``): NaN and
    infinities as null, numpy scalars as numbers, anything else JSON cannot hold as its text."""
    return json.dumps(json_ready(data), indent=indent, allow_nan=False, default=str)


def atomic_write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON (NaN as null) atomically."""
    atomic_write_text(path, json_text(data, indent=1) + "\n")


def remove_stale_temp_files(folder: Path, older_than_s: float = 600.0) -> int:
    """Delete temporary files a killed writer left behind (old enough that no live writer owns them)."""
    cutoff = time.time() - older_than_s
    removed = 0
    for tmp in Path(folder).rglob(".*.tmp"):
        try:
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
                removed += 1
        except OSError:
            continue
    return removed
