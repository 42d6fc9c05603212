"""Progress a person can read both at a terminal and in a log file (a SLURM task's ``.out``).

At a terminal papermill draws its bar. Without one a bar would write a ``\\r`` update per cell into the
log, so the bar is off and a plain line says every minute what is still running.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

HEARTBEAT_S = 60.0  # a modest rate: a long task's log gains a line a minute, not one per cell


def log(msg: str) -> None:
    """One progress line on stderr (never mixed into a command's output)."""
    print(f"[benchlib] {msg}", file=sys.stderr, flush=True)


def interactive() -> bool:
    """Whether stderr is a terminal (where a redrawn progress bar belongs)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


@contextmanager
def heartbeat(label: str, every_s: float = HEARTBEAT_S, say: Callable[[str], None] = log) -> Iterator[None]:
    """Without a terminal, say ``label: still running after N s`` every ``every_s`` until the block ends."""
    if interactive():
        yield
        return
    done = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        while not done.wait(every_s):
            say(f"{label}: still running after {time.monotonic() - t0:.0f} s")

    thread = threading.Thread(target=beat, name="benchlib-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)
