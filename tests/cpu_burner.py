"""Burn every usable CPU until killed: the busy host `make test-any-host` runs the fast suite beside.

One busy process per CPU this process may use (its affinity), as another user's job would hold them. Killed
with SIGTERM or SIGINT, it stops its burners and exits; a burner whose parent is gone (killed with SIGKILL)
stops by itself within a second, and every burner stops after ``--max-seconds`` whatever happens, so none
outlives the run it was started for.

    python tests/cpu_burner.py [--max-seconds 3600]
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time


def burn(parent: int, until: float) -> None:
    """Spin until the parent is gone or the deadline passes (checked every ~0.1 s of spinning)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C in a terminal reaches the whole group: just stop
    while os.getppid() == parent and time.time() < until:
        end = time.time() + 0.1
        while time.time() < end:
            pass


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="stop after this long whatever happens")
    args = parser.parse_args(argv)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    until = time.time() + args.max_seconds
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
    burners = [ctx.Process(target=burn, args=(os.getpid(), until), daemon=True) for _ in range(cpus)]
    for b in burners:
        b.start()
    print(f"cpu_burner: {cpus} process(es) burning the usable CPUs (pid {os.getpid()})", file=sys.stderr,
          flush=True)
    try:
        while time.time() < until and any(b.is_alive() for b in burners):
            time.sleep(0.5)
    finally:
        for b in burners:
            b.terminate()
        for b in burners:
            b.join(2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
