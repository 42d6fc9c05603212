"""One writer per results folder: an OS file lock the kernel arbitrates, and a file naming its holder.

Two studies measuring into one folder would each time their configurations under the other's load, and the
last writer would win. Taking the lock is one step the kernel decides (``fcntl.flock`` on a file kept open
for the holder's life), so of any number of simultaneous takers exactly one wins, and the kernel releases it
when the holder dies, however it dies: a lock file whose holder is gone is simply taken, with a warning
naming it. The holder (pid, host, start time, command) is written into the file once the lock is taken, so
that a refusal names it; the file is removed only by a process holding it exclusively.

A whole study holds ``.benchlib-study.lock`` exclusively. A SLURM array task (``pair``) holds it shared and
its own ``.benchlib-pair-N.lock`` exclusively: tasks of different pairs run side by side, a second task of
one pair refuses, a pair task refuses a folder a whole study holds, and a whole study refuses a folder where
pair tasks run, naming them. A study refuses rather than waits: its wait could outlast the job's time limit.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ConfigError, FolderLocked
from .layout import ResultsLayout

# A taker that finds the lock held but its holder not yet recorded (it took the lock an instant ago, or is
# letting it go) looks again every LOCK_POLL_S for up to LOCK_UNRECORDED_WAIT_S before it refuses anyway.
LOCK_POLL_S = 0.01
LOCK_UNRECORDED_WAIT_S = 2.0
_REOPENS = 100  # the lock file removed or replaced between open and flock this often in a row: give up
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
_ONE_STUDY = "allowed: one study per results folder at a time: wait for it, or use --results-root elsewhere"


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

    def said(self) -> str:
        """``process 12 on this host since 2026-01-01T00:00:00Z``."""
        where = "this host" if self.host == socket.gethostname() else f"host {self.host}"
        return f"process {self.pid} on {where} since {self.started_utc}"


def lock_path(folder: Path, scope: str = "study") -> Path:
    return ResultsLayout.of(folder).lock_path(scope)


def _read_holder(path: Path) -> Holder | None:
    """The holder a lock file names; None when it names none (empty, being written, or gone)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Holder(int(data["pid"]), str(data["host"]), str(data["started_utc"]), str(data.get("command", "")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _live(holder: Holder | None) -> Holder | None:
    """``holder`` unless it is known dead (a file it left, while the lock's new holder records itself)."""
    return holder if holder is not None and holder.alive() is not False else None


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (not removed, nor replaced by a new one, since it was opened)."""
    try:
        st, now = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)


def _flocked(path: Path, exclusive: bool) -> int | None:
    """An open fd of the file at ``path`` holding its lock (exclusive or shared); None when another process
    holds a lock that conflicts."""
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    for _ in range(_REOPENS):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError as exc:
            os.close(fd)
            if exc.errno in _NO_FLOCK:
                raise ConfigError(f"results folder '{path.parent}': its file system has no file locks (flock: "
                                  f"{exc.strerror}); allowed: a folder on a file system with locks (a local disk, "
                                  "NFS with lockd, Lustre mounted with -o flock)") from exc
            raise
        if _same_file(fd, path):
            return fd
        os.close(fd)  # its holder removed it as we opened it: a lock on a removed file guards nothing
    return None


_HELD_FDS: set[int] = set()


def held_fds() -> tuple[int, ...]:
    """The fds of the locks this process holds now: a driver hands them to the kernels it starts, so that a
    kernel outliving it (its driver killed) still holds the folder while it can write (``store.driver``)."""
    return tuple(sorted(_HELD_FDS))


class _Held:
    """One lock file this process holds: an fd kept open (the kernel's lock lives as long as it does)."""

    def __init__(self, path: Path, fd: int, exclusive: bool) -> None:
        self.path, self.fd, self.exclusive = path, fd, exclusive
        _HELD_FDS.add(fd)

    def record(self, holder: Holder) -> None:
        """Write ``holder`` into the file in place (the lock belongs to this inode: no rename). A holder that
        cannot be written (a full disk) leaves the file empty; the lock holds all the same."""
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, json.dumps(asdict(holder)).encode("utf-8"), 0)
        except OSError:
            pass

    def release(self) -> None:
        """Remove the file while holding it exclusively, then let the lock go. A shared holder removes it only
        when it can hold it alone (the last pair task out)."""
        try:
            if not self.exclusive:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    return
            if _same_file(self.fd, self.path):
                self.path.unlink(missing_ok=True)
        finally:
            _HELD_FDS.discard(self.fd)
            os.close(self.fd)


def _take(path: Path, exclusive: bool, refusal: Callable[[], str | None]) -> _Held:
    """Take ``path``'s lock or refuse in one line: ``refusal()`` words it where the holders are recorded (None
    while they are not yet: looked at again until LOCK_UNRECORDED_WAIT_S)."""
    deadline = time.monotonic() + LOCK_UNRECORDED_WAIT_S
    while (fd := _flocked(path, exclusive)) is None:
        if (said := refusal()) is not None:
            raise FolderLocked(said)
        if time.monotonic() > deadline:
            raise FolderLocked(f"results folder '{path.parent}' is in use by a process that has not recorded "
                               f"itself in {path}; {_ONE_STUDY}")
        time.sleep(LOCK_POLL_S)
    held = _Held(path, fd, exclusive)
    if exclusive:
        left = _read_holder(path)  # a holder that died holding it (killed, its machine gone)
        if left is not None and (left.pid, left.host) != (os.getpid(), socket.gethostname()):
            gone = "which no longer runs" if left.alive() is False else "which no longer holds it"
            try:
                warnings.warn(f"{path}: taking over a lock of process {left.pid} on host {left.host}, {gone}",
                              stacklevel=4)
            except BaseException:  # warnings made errors: the lock is not kept by a taker that fails
                held.release()
                raise
    return held


def pair_holders(folder: Path) -> list[tuple[str, Holder | None]]:
    """The SLURM pair tasks that hold a lock in ``folder`` now: each lock's scope (``pair-3``) and holder."""
    found = []
    for path in ResultsLayout.of(folder).lock_files():
        scope = path.name.removeprefix(".benchlib-").removesuffix(".lock")
        if not scope.startswith("pair-"):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # free: no task holds it (let go at close)
        except OSError:
            found.append((scope, _read_holder(path)))
        finally:
            os.close(fd)
    return found


@contextmanager
def folder_lock(folder: Path, pair: int | None = None) -> Iterator[Path]:
    """Hold ``folder``'s lock for the block: a whole study's, or (``pair``) a SLURM pair task's; refuse in one
    line naming the holder when they cannot run side by side. Yields the lock file that names this process."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    study = lock_path(folder)
    me = Holder.me()

    def whole_study() -> str | None:
        holder = _live(_read_holder(study))
        return None if holder is None else f"results folder '{folder}' is in use by {holder.said()} ({study}); " \
                                           f"{_ONE_STUDY}"

    def pair_tasks() -> str | None:
        live = [(scope, holder) for scope, found in pair_holders(folder) if (holder := _live(found)) is not None]
        if not live:
            return whole_study()
        tasks = "; ".join(f"{scope} by {holder.said()}" for scope, holder in live)
        return (f"results folder '{folder}' is in use by {len(live)} SLURM pair task(s) ({tasks}); allowed: a "
                "whole study on a folder no pair task uses: wait for them (squeue), or use --results-root elsewhere")

    held: list[_Held] = []
    try:
        if pair is None:
            held.append(_take(study, True, pair_tasks))
        else:
            mine = lock_path(folder, f"pair-{pair}")
            held.append(_take(study, False, whole_study))

            def same_pair() -> str | None:
                holder = _live(_read_holder(mine))
                return None if holder is None else (f"pair {pair} of results folder '{folder}' is being run by "
                                                    f"{holder.said()} ({mine}); allowed: one task per pair at "
                                                    "a time")
            held.append(_take(mine, True, same_pair))
        held[-1].record(me)
        yield held[-1].path
    finally:
        for lock in reversed(held):
            lock.release()
