"""A disk that fills up, for the tests: under one folder, every write (Python's files, ``os.write``,
``os.pwrite``) fails with ENOSPC once a byte budget is spent, after writing what still fit, as a full disk
does. A writer that is not atomic leaves a torn file behind; an atomic one leaves the old file or none."""
from __future__ import annotations

import builtins
import errno
import io
import os
import shutil
from pathlib import Path
from typing import Any

_REAL_OPEN = io.open
_REAL_WRITE, _REAL_PWRITE = os.write, os.pwrite


class FullDisk:
    """``budget`` bytes left under ``root``; install with :meth:`install` (a pytest monkeypatch)."""

    def __init__(self, root: Path, budget: int) -> None:
        self.root, self.left = str(Path(root).resolve()), budget

    def _under_root(self, file: Any) -> bool:
        if isinstance(file, int):
            try:
                file = os.readlink(f"/proc/self/fd/{file}")
            except OSError:
                return False
        try:
            return os.path.abspath(os.fspath(file)).startswith(self.root + os.sep)
        except TypeError:
            return False

    def fits(self, n: int) -> int:
        """How many of ``n`` bytes still fit (taking them from the budget)."""
        took = min(n, self.left)
        self.left -= took
        return took

    def full(self, name: Any = None) -> OSError:
        return OSError(errno.ENOSPC, "No space left on device", name)

    def install(self, monkeypatch) -> FullDisk:  # noqa: ANN001 (pytest's MonkeyPatch)
        def opened(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            fh = _REAL_OPEN(file, mode, *args, **kwargs)
            writes = any(c in mode for c in "wax+")
            return _FillingFile(fh, self, file) if writes and self._under_root(file) else fh

        def write(fd: int, data: bytes) -> int:
            if not self._under_root(fd):
                return _REAL_WRITE(fd, data)
            n = self.fits(len(data))
            if n < len(data):
                _REAL_WRITE(fd, data[:n])
                raise self.full()
            return _REAL_WRITE(fd, data)

        def pwrite(fd: int, data: bytes, offset: int) -> int:
            if not self._under_root(fd):
                return _REAL_PWRITE(fd, data, offset)
            n = self.fits(len(data))
            if n < len(data):
                _REAL_PWRITE(fd, data[:n], offset)
                raise self.full()
            return _REAL_PWRITE(fd, data, offset)

        monkeypatch.setattr(builtins, "open", opened)
        monkeypatch.setattr(io, "open", opened)  # os.fdopen and pathlib open through io.open
        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(shutil, "_USE_CP_SENDFILE", False)  # copies through write(), as elsewhere
        return self


class _FillingFile:
    """A file object whose writes take from the disk's budget."""

    def __init__(self, fh: Any, disk: FullDisk, name: Any) -> None:
        self._fh, self._disk, self._name = fh, disk, name

    def write(self, data: Any) -> int:
        n = self._disk.fits(len(data))
        if n < len(data):
            self._fh.write(data[:n])
            self._fh.flush()
            raise self._disk.full(self._name)
        return int(self._fh.write(data))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __iter__(self) -> Any:
        return iter(self._fh)

    def __enter__(self) -> _FillingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()
