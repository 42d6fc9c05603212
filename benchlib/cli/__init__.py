"""The ``benchlib`` command: its entry point, and how an error reaches the user.

SIGTERM (a scheduler's cancel, ``kill``) takes Ctrl-C's way out: the running kernel is stopped, the lock
released, and ``benchlib: terminated`` is the last line, with exit code 143.

Bad input gets one line on stderr naming the problem and what is allowed, exit code 2, and no
traceback unless ``--debug``; so does a single configuration that ended without a measurement and without
a row to record it (a ``MeasurementOutcome`` out of ``run --no-save``, ``profile`` or ``layers``). The
commands live in ``studies`` (params files run through the notebooks), ``single`` (one configuration, one
model, one machine) and ``results`` (folders read back); ``parser`` declares their options.
"""
from __future__ import annotations

import atexit
import errno
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from types import FrameType

from .. import log as messages
from ..errors import BenchlibError, MeasurementOutcome, Terminated
from .parser import build_parser

__all__ = ["build_parser", "entry", "main"]

# A command about one configuration whose configuration ended without a measurement (skipped, unstable...) and
# had no row to record it in: the same exit as input refused, one line, as admission would have said it.
EXIT_NO_MEASUREMENT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143
_ENVIRONMENT_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT, errno.ENAMETOOLONG)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:  # noqa: ANN001
    return f"benchlib: warning: {message}\n"


def _without_the_iri_grammar() -> None:
    """jsonschema imports ``rfc3987_syntax`` where it is installed (jupyterlab's jupyter-events asks for it),
    and that module compiles a grammar as it is imported: 1.2 s of every command that reads or runs a
    notebook (nbformat validates with jsonschema). Only jsonschema's "iri" formats use it, and no notebook
    schema has one. So the command's own process goes without it; a user's kernel that imports benchlib is
    left as it is (this runs in ``main`` only)."""
    if "rfc3987_syntax" not in sys.modules:
        sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # what an ImportError is made of


class _StoppedKernelReport(logging.Filter):
    """Drops asyncio's report of a notebook cell's task that failed with ``DeadKernelError`` and was never looked at.

    When the command stops on SIGTERM or Ctrl-C, papermill's clean-up stops the kernel a cell was waiting on,
    and nbclient's task for that cell ends in ``DeadKernelError``; nobody retrieves it, so asyncio prints "Task
    exception was never retrieved" and a traceback when the task is freed, which is after the command's own last
    line (``benchlib: terminated``). A kernel that dies by itself reaches the study as the cell's own error (a
    failure row that names it): this report never says anything the command did not."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return type(exc).__name__ != "DeadKernelError"


_STOPPED_KERNEL_REPORT = _StoppedKernelReport()


def _terminate(_signum: int, _frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM would cut short the cleanup of the first
    raise Terminated()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raised as :class:`Terminated` (a ``KeyboardInterrupt``) for the block, where a handler can be
    set (the main thread); the handler before is put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _stop_children(grace_s: float = 2.0) -> None:
    """Stop what this command started and left running: a kernel still starting when SIGTERM came is not yet
    in papermill's clean-up, and would outlive the command, then print "Parent appears to have exited" after
    the command's last line. Each child is asked to end, then killed after ``grace_s``."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        with suppress(psutil.Error):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for child in alive:
        with suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(alive, timeout=grace_s)


def main(argv: Sequence[str] | None = None) -> int:
    warnings.formatwarning = _one_line_warning
    _without_the_iri_grammar()
    if _STOPPED_KERNEL_REPORT not in logging.getLogger("asyncio").filters:
        logging.getLogger("asyncio").addFilter(_STOPPED_KERNEL_REPORT)
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    if getattr(args, "verbose", False) and getattr(args, "quiet", False):
        parser.error("-v and -q: choose one")
    messages.configure(messages.level_from(getattr(args, "verbose", False), getattr(args, "quiet", False)))
    try:
        with _sigterm_as_interrupt():
            return int(args.func(args))
    except BenchlibError as exc:
        if args.debug:
            raise
        print(f"benchlib: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except MeasurementOutcome as exc:  # a single configuration that admission let through and that then ended
        if args.debug:
            raise
        print(f"benchlib: error: {exc.status}: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_NO_MEASUREMENT
    except KeyboardInterrupt as exc:
        _stop_children()
        print(f"benchlib: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0
    except OSError as exc:  # the environment failed: a full disk, a read-only or vanished folder
        if args.debug or exc.errno not in _ENVIRONMENT_ERRNOS:
            raise
        what = "disk full" if exc.errno == errno.ENOSPC else "cannot write"
        where = f"{exc.filename}: " if exc.filename else ""  # write(2) names no file; benchlib's writers add it
        print(f"benchlib: error: {what}: {where}{exc.strerror}; complete rows are kept: fix it and run the same "
              "command again to resume", file=sys.stderr)
        return 1


def entry() -> None:
    """The ``benchlib`` command (and ``python -m benchlib``): :func:`main`, then the exit Python would make,
    less its last step.

    After the exit handlers, Python frees every module one by one; with torch and torchvision loaded that took
    0.9 to 1.3 s of every command here (a study's driver, each rank of a data-parallel run, each SLURM task),
    after all was written. So this does what an exit does before that step (joins the threads that are not
    daemons, runs the exit handlers, flushes the standard streams) and ends the process. benchlib closes the
    files it writes (atomically) before it returns; a test calls :func:`main` and keeps its interpreter.
    """
    code = main()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed (a pipe a reader left) or gone
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
