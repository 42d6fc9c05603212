"""Progress a person can read both at a terminal and in a log file (a SLURM task's ``.out``).

At a terminal papermill draws its bar. Without one a bar would write a ``\\r`` update per cell into the
log, so the bar is off and a plain line says every minute what is still running.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .. import log as messages
from ..log import ProgressFn

HEARTBEAT_S = messages.PLAIN_HEARTBEAT_S  # a long task's log gains a line a minute, not one per cell


def log(msg: str) -> None:
    """One progress line (benchlib's logger, on stderr: never mixed into a command's output)."""
    messages.info(msg)


def interactive() -> bool:
    """Whether stderr is a terminal (where a redrawn progress bar belongs)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


RELAY_POLL_S = 0.5
RELAY_PREFIX = "benchlib-progress-"


def remove_left_relays(folder: Path | None = None) -> int:
    """Delete the relay files of drivers that are gone (killed before their block ended), named by pid; a
    live one is left. Returns how many went."""
    removed = 0
    for path in Path(folder or tempfile.gettempdir()).glob(f"{RELAY_PREFIX}*-*.log"):
        pid = path.name.removeprefix(RELAY_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
            removed += 1
        except OSError:
            continue
    return removed


@contextmanager
def every(every_s: float, work: Callable[[], None], name: str) -> Iterator[None]:
    """``work()`` every ``every_s`` in a daemon thread while the block runs; stopped (and joined) at its end."""
    done = threading.Event()

    def loop() -> None:
        while not done.wait(every_s):
            work()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)


def _relay_lines(text: str, label: str) -> None:
    for line in text.splitlines():
        if line.startswith(messages.PREFIX):
            messages.info(f"{label}: {line.removeprefix(messages.PREFIX)}")
        elif line.startswith("benchlib: warning: "):
            messages.warning(f"{label}: {line.removeprefix('benchlib: warning: ')}")
        elif line.strip():
            messages.info(f"{label}: {line}")


@contextmanager
def relay(label: str, every_s: float = RELAY_POLL_S) -> Iterator[None]:
    """Lines a child process (a papermill kernel) logs, shown here as they come, prefixed with ``label``.

    The child's stderr is captured into its notebook, so its benchlib logger also appends to the file named
    by ``BENCHLIB_PROGRESS_FILE`` (set for the block, for the children started in it); a thread reads the
    new complete lines twice a second.
    """
    messages.shown()  # this process's own handlers first, without the file
    remove_left_relays()
    fd, name = tempfile.mkstemp(prefix=f"{RELAY_PREFIX}{os.getpid()}-", suffix=".log")
    os.close(fd)
    path = Path(name)
    before = {k: os.environ.get(k) for k in (messages.PROGRESS_FILE_ENV, messages.PROGRESS_OWNER_ENV)}
    os.environ.update({messages.PROGRESS_FILE_ENV: str(path), messages.PROGRESS_OWNER_ENV: str(os.getpid())})
    offset = 0

    def read_new(final: bool = False) -> None:
        nonlocal offset
        try:
            with path.open("rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
        except OSError:
            return
        complete = chunk if final else chunk[: chunk.rfind(b"\n") + 1]
        offset += len(complete)
        _relay_lines(complete.decode("utf-8", errors="replace"), label)

    try:
        with every(every_s, read_new, "benchlib-relay"):
            yield
    finally:
        read_new(final=True)
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        path.unlink(missing_ok=True)


@contextmanager
def heartbeat(label: str, every_s: float = HEARTBEAT_S, say: ProgressFn = log) -> Iterator[None]:
    """Without a terminal, say ``label: still running after N s`` every ``every_s`` until the block ends."""
    if interactive():
        yield
        return
    t0 = time.monotonic()
    with every(every_s, lambda: say(f"{label}: still running after {time.monotonic() - t0:.0f} s"),
               "benchlib-heartbeat"):
        yield
