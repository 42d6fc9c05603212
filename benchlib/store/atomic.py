"""Atomic file writes: readers see the old file or the new one, never a part of either.

Every file benchlib writes under a results or reports folder goes through here: a temporary file in the
same folder, fsynced, then renamed over the target (``os.replace`` is atomic on one file system). A write that
fails (a full disk, a kill) leaves the old file, or none, and its temporary file is removed (or, after a kill,
by ``remove_stale_temp_files`` on the next run). Writers that need a file name of their own (gzip, papermill)
write to ``atomic_path``'s temporary name.
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import Orphaned
from .driver import orphaned_of

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file-name-safe form of ``text`` (keeps letters, digits, '.', '_' and '-')."""
    return _SAFE.sub("-", text).strip("-") or "unnamed"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


TEMP_SUFFIX = ".tmp"
# The temporary names a writer picks: ``.NAME.RANDOM.tmp``, or ``.NAME.RANDOM.tmp.ipynb`` where the writer
# insists on its own extension (papermill warns on any other); what ``remove_stale_temp_files`` deletes.
TEMP_PATTERNS = (f".*{TEMP_SUFFIX}", f".*{TEMP_SUFFIX}.ipynb")


def temp_beside(path: Path, suffix: str = "") -> Path:
    """A new, empty, hidden temporary file in ``path``'s folder (``suffix`` after ``.tmp``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX + suffix, dir=path.parent)
    os.close(fd)
    return Path(tmp)


def commit(tmp: Path, path: Path) -> None:
    """Put the finished temporary file ``tmp`` in ``path``'s place: fsynced, readable as the umask allows (not
    mkstemp's 0600, which would hide results from other users), renamed, and the rename fsynced. A kernel whose
    study process is gone refuses (``store.driver``): the folder is no longer its to write."""
    if (driver := orphaned_of()) is not None:
        raise Orphaned(f"not writing {path}: the study process {driver} that started this kernel is gone")
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def naming(exc: OSError, path: Path, tmp: Path | None = None) -> None:
    """Make ``exc`` name ``path``, the file being written, where it names none (a failed ``write(2)``, as a full
    disk fails, carries no file name) or only the temporary file ``tmp`` it was written through."""
    if exc.filename is None or (tmp is not None and str(exc.filename) == str(tmp)):
        exc.filename = str(path)


@contextmanager
def atomic_path(path: Path, suffix: str = "") -> Iterator[Path]:
    """A temporary name to write ``path``'s content to, for a writer that opens files itself; committed when
    the block ends, removed when it raises (an ``OSError`` then names ``path``: :func:`naming`)."""
    tmp = temp_beside(path, suffix)
    try:
        yield tmp
        commit(tmp, path)
    except OSError as exc:
        naming(exc, path, tmp)
        raise
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, fsynced, then renamed."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` atomically unless it already holds exactly that; whether it wrote. A file
    unchanged keeps its time of change, so a page made from it (``publish.page_inputs``) is reused."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    atomic_write_text(path, text)
    return True


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


def atomic_copy(source: Path, path: Path) -> None:
    """Copy ``source`` to ``path`` atomically (a copy torn by a full disk would pass for the file)."""
    atomic_write_bytes(path, Path(source).read_bytes())


def atomic_write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON (NaN as null) atomically."""
    atomic_write_text(path, json_text(data, indent=1) + "\n")


def remove_stale_temp_files(folder: Path, older_than_s: float = 600.0) -> int:
    """Delete temporary files a killed writer left behind (old enough that no live writer owns them)."""
    cutoff = time.time() - older_than_s
    removed = 0
    for tmp in (t for pattern in TEMP_PATTERNS for t in Path(folder).rglob(pattern)):
        try:
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
                removed += 1
        except OSError:
            continue
    return removed
