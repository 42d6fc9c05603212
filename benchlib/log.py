"""benchlib's one message channel: the standard ``logging`` tree under the logger ``benchlib``.

Progress lines are INFO (``[benchlib] ...``), warnings WARNING (``benchlib: warning: ...``), detail DEBUG.
The command line sets the level (``-q``: warnings and errors only; ``-v``: detail too) and its child
processes (papermill kernels, data-parallel ranks) inherit it through ``BENCHLIB_LOG_LEVEL``. From Python,
benchlib writes its lines to stderr through its own handler, as optuna and transformers do (progress is
what a notebook user wants to see); ``use_application_logging()`` hands the ``benchlib`` logger to the
application's own configuration instead.

A papermill kernel runs a pair's notebook with its stderr captured into the notebook; with
``BENCHLIB_PROGRESS_FILE`` set (the study sets it per pair) its lines are also appended to that file,
which the study relays to the user's terminal as they come.
"""
from __future__ import annotations

import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

LOGGER_NAME = "benchlib"
LEVEL_ENV = "BENCHLIB_LOG_LEVEL"
PROGRESS_FILE_ENV = "BENCHLIB_PROGRESS_FILE"
PROGRESS_OWNER_ENV = "BENCHLIB_PROGRESS_OWNER"  # the pid that relays the file: it never writes to it itself
PREFIX = "[benchlib] "
PLAIN_HEARTBEAT_S = 60.0  # a log file (no terminal) gains a "still running" line this often at most

logger = logging.getLogger(LOGGER_NAME)

# What every long operation takes to report how far it got: one line of text at a time (a terminal's status
# line, a notebook's output, a log file; ``info`` below is the default one).
ProgressFn = Callable[[str], None]


def silent(_message: str) -> None:
    """A progress function that says nothing: what ``progress=None`` means."""


def progress_of(progress: ProgressFn | None) -> ProgressFn:
    """``progress``, or ``silent`` where the caller passed None."""
    return progress or silent


def now_and_then(say: ProgressFn, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> ProgressFn:
    """A heartbeat where a line cannot be redrawn (a notebook's output, a log file): ``say`` at most once every
    ``every_s`` (``PLAIN_HEARTBEAT_S``), the first ``every_s`` after it was made, so a phase shorter than that adds
    no line at all."""
    every = PLAIN_HEARTBEAT_S if every_s is None else every_s
    last = clock()

    def beat(msg: str) -> None:
        nonlocal last
        now = clock()
        if now - last >= every:
            last = now
            say(msg)
    return beat


class _Lines(logging.Formatter):
    """``[benchlib] msg`` for progress, ``benchlib: warning: msg`` above it, the module name under it."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if record.levelno >= logging.WARNING:
            return f"benchlib: {record.levelname.lower()}: {msg}"
        if record.levelno < logging.INFO:
            return f"{PREFIX}{record.name}: {msg}"
        return f"{PREFIX}{msg}"


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (pytest and Jupyter replace it), flushed per line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # a closed stream must not break the measurement that logs
            self.handleError(record)


def level_from(verbose: int = 0, quiet: bool = False) -> int:
    """The level of ``-v`` (DEBUG), ``-q`` (WARNING) or neither (INFO)."""
    return logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO


def _env_level() -> int | None:
    name = os.environ.get(LEVEL_ENV, "").upper()
    value = logging.getLevelName(name) if name else None
    return value if isinstance(value, int) else None


def configure(level: int | None = None) -> None:
    """benchlib's own handlers at ``level`` (else the inherited ``BENCHLIB_LOG_LEVEL``, else INFO); child
    processes started from now on inherit the level."""
    global _application
    _application = False
    level = level if level is not None else (logger.level or _env_level() or logging.INFO)  # set by hand: it stays
    for handler in [h for h in logger.handlers if getattr(h, "benchlib_own", False)]:
        logger.removeHandler(handler)
    handlers: list[logging.Handler] = [_StderrHandler()]
    path = os.environ.get(PROGRESS_FILE_ENV)
    if path and os.environ.get(PROGRESS_OWNER_ENV) != str(os.getpid()):
        handlers.append(logging.FileHandler(path, encoding="utf-8", delay=True))
    for handler in handlers:
        handler.setFormatter(_Lines())
        handler.benchlib_own = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    os.environ[LEVEL_ENV] = logging.getLevelName(level)


_application = False


def use_application_logging() -> None:
    """Drop benchlib's own handlers: its records propagate to the application's (root) handlers."""
    global _application
    _application = True
    for handler in [h for h in logger.handlers if getattr(h, "benchlib_own", False)]:
        logger.removeHandler(handler)
    logger.propagate = True


def _ready() -> None:
    """benchlib's own handlers on first use, unless the application took the logger over."""
    if not _application and not any(getattr(h, "benchlib_own", False) for h in logger.handlers):
        configure()


def _caller() -> logging.Logger:
    """The logger of the benchlib module that called (``benchlib.run.record``): a child of ``benchlib``."""
    name = str(sys._getframe(2).f_globals.get("__name__", LOGGER_NAME))
    return logging.getLogger(name if name.startswith(LOGGER_NAME + ".") else LOGGER_NAME)


def info(msg: str) -> None:
    _ready()
    _caller().info(msg)


def warning(msg: str) -> None:
    _ready()
    _caller().warning(msg)


def debug(msg: str) -> None:
    _ready()
    _caller().debug(msg)


def page_line(msg: str) -> None:
    """A progress line of a notebook: printed into its page and, in a kernel a study runs, appended to the
    relay file (unless ``-q``), so the study's terminal shows it as it comes."""
    print(msg, flush=True)
    path = os.environ.get(PROGRESS_FILE_ENV)
    if path and os.environ.get(PROGRESS_OWNER_ENV) != str(os.getpid()) and shown():
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{PREFIX}{msg}\n")


def shown(level: int = logging.INFO) -> bool:
    """Whether a line at ``level`` reaches anyone (a progress display skips its work when not)."""
    _ready()
    return logger.isEnabledFor(level)


def _origin(filename: str) -> str | None:
    """The package a warning came from (``torch``), None for benchlib's own."""
    parts = Path(filename).parts
    if LOGGER_NAME in parts:
        return None
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts):
            return parts[parts.index(marker) + 1].removesuffix(".py")
    return Path(filename).stem


def warnings_as_lines(*roots: str | Path) -> None:
    """Python warnings in this process shown as benchlib's own one-line warnings (``benchlib: warning: ...``,
    through its logger, so a study relays them too), never with the source line that raised them; another
    package's warning names that package and its category. A path under one of ``roots`` is written relative
    to it: a published page names no folder of the machine that made it."""
    prefixes = [str(Path(r).resolve()).rstrip(os.sep) + os.sep for r in roots]

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: object = None, line: str | None = None) -> None:
        text = " ".join(str(message).split())
        for prefix in prefixes:
            text = re.sub(re.escape(prefix), "", text)
        origin = _origin(filename)
        warning(text if origin is None else f"{origin}: {category.__name__}: {text}")

    warnings.showwarning = show
