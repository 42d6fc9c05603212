"""A results folder's lock held by another process: what a second study, or a SLURM pair task, meets."""
from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HOLDER_START_S = 30.0


def _hold(folder: Path, pair: int | None, ready, stop) -> None:  # noqa: ANN001 (multiprocessing events)
    from benchlib.store.lock import folder_lock

    with folder_lock(folder, pair):
        ready.set()
        stop.wait(HOLDER_START_S * 2)


@contextmanager
def held_elsewhere(folder: Path, pair: int | None = None) -> Iterator[int]:
    """``folder``'s lock (a whole study's, or pair ``pair``'s) held by a forked process for the block; yields
    its pid. Forked, not spawned: the child only takes a lock, and starts in milliseconds."""
    ctx = mp.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(Path(folder), pair, ready, stop), daemon=True)
    proc.start()
    try:
        assert ready.wait(HOLDER_START_S), "the holder process did not take the lock"
        yield proc.pid
    finally:
        stop.set()
        proc.join(HOLDER_START_S)
