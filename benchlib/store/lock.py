"""One writer per results folder: a lock file naming its holder, taken over when the holder is dead.

Two studies measuring into one folder would each time their configurations under the other's load, and
the last writer would win. The lock is a file created exclusively (``O_CREAT | O_EXCL``) holding the
holder's pid, host and start time. A second study refuses in one line naming the holder; a lock left by a
process that no longer runs on this host is taken over with a warning. SLURM array tasks each lock only
their own pair (``scope``), so the tasks of one study run side by side.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import FolderLocked
from .layout import ResultsLayout


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started_utc: str
    command: str

    @classmethod
    def me(cls) -> Holder:
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return cls(os.getpid(), socket.gethostname(), started, " ".join(sys.argv)[:300])

    def alive(self) -> bool | None:
        """Whether the holder still runs: True/False on this host, None (cannot tell) on another."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def lock_path(folder: Path, scope: str = "study") -> Path:
    return ResultsLayout.of(folder).lock_path(scope)


def _read_holder(path: Path) -> Holder | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Holder(int(data["pid"]), str(data["host"]), str(data["started_utc"]), str(data.get("command", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _create(path: Path, holder: Holder) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(asdict(holder), fh)
    return True


@contextmanager
def folder_lock(folder: Path, scope: str = "study") -> Iterator[Path]:
    """Hold the lock of ``folder`` (for ``scope``) for the block; refuse in one line when someone else holds it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = lock_path(folder, scope)
    me = Holder.me()
    for _attempt in range(3):
        if _create(path, me):
            break
        holder = _read_holder(path)
        if holder is not None and holder.alive() is not False:
            where = "this host" if holder.host == me.host else f"host {holder.host}"
            raise FolderLocked(f"results folder '{folder}' is in use by process {holder.pid} on {where} since "
                               f"{holder.started_utc} ({path}); allowed: one study per results folder at a time: "
                               "wait for it, use --results-root elsewhere, or delete the lock file if that "
                               "process is gone")
        what = "an unreadable lock" if holder is None else f"a lock of process {holder.pid}, which no longer runs"
        warnings.warn(f"{path}: taking over {what}", stacklevel=2)
        path.unlink(missing_ok=True)
    else:
        raise FolderLocked(f"results folder '{folder}': could not take the lock {path}; allowed: one study per "
                           "results folder at a time")
    try:
        yield path
    finally:
        if _read_holder(path) == me:
            path.unlink(missing_ok=True)
