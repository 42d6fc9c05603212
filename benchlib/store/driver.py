"""Whose notebook kernel this process is, and whether that driver is gone: an orphaned kernel writes nothing.

A study's driver runs each configuration in a kernel it starts (papermill), holding the results folder's lock
(``store.lock``) the whole time. Killed with SIGKILL, the driver leaves its kernel running for about a second
(ipykernel notices its parent's death on a 1 s poll), long enough to finish a configuration and write its row
beside the next study. So the driver names itself to its kernels (``$BENCHLIB_DRIVER_PID``), a kernel notes at
import whether it is that process's child, and every write (``store.atomic.commit``) refuses once the parent it
started under is gone: a dead process's children are given a new parent at once, so ``getppid`` tells.
The driver's kernels also inherit its lock (``pipeline.publish``), so no write lands outside it either way.
"""
from __future__ import annotations

import os

DRIVER_ENV = "BENCHLIB_DRIVER_PID"


def _driver_at_start() -> int | None:
    value = os.environ.get(DRIVER_ENV, "")
    return int(value) if value.isdigit() and int(value) == os.getppid() else None


# Read once, at import: a process started by a driver knows it while that driver lives. Its own children
# (DataLoader workers, ranks) have another parent and are not held to it.
_DRIVER = _driver_at_start()


def for_kernels() -> dict[str, str]:
    """The variable a driver sets for the kernels it starts."""
    return {DRIVER_ENV: str(os.getpid())}


def orphaned_of() -> int | None:
    """The driver's pid where this process is a kernel whose driver is gone, else None."""
    return _DRIVER if _DRIVER is not None and os.getppid() != _DRIVER else None
