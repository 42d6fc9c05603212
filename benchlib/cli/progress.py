"""Progress of a command on stderr: a line per phase, and on a terminal a status line that rewrites itself.

stdout stays for what a command prints as its result (``--json`` above all). Without a terminal (a log
file, CI) every line is a plain line and the step heartbeat is kept to one line every ``PLAIN_HEARTBEAT_S``
(the rate every plain progress log of benchlib keeps). Lines go through benchlib's logger like every other
message; only the status line, redrawn in place, is written to the terminal directly (a log record cannot
rewrite itself).
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

from .. import log as messages

PLAIN_HEARTBEAT_S = messages.PLAIN_HEARTBEAT_S
PREFIX = messages.PREFIX


class Progress:
    """``line`` for a phase or an epoch, ``heartbeat`` for the step reached (shown in place on a terminal)."""

    def __init__(self, stream: TextIO | None = None, *, terminal: bool | None = None, shown: bool | None = None):
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.shown = messages.shown() if shown is None else shown  # -q: no progress
        self._status_shown = False
        self._last_plain = 0.0

    def _clear_status(self) -> None:
        if self._status_shown:
            self.stream.write("\r\033[K")
            self._status_shown = False

    def line(self, msg: str) -> None:
        if not self.shown:
            return
        self._clear_status()
        self.stream.flush()
        messages.info(msg)

    def heartbeat(self, msg: str) -> None:
        if not self.shown:
            return
        if self.terminal:
            self.stream.write(f"\r\033[K{PREFIX}{msg}")
            self._status_shown = True
            self.stream.flush()
        elif time.monotonic() - self._last_plain >= PLAIN_HEARTBEAT_S:
            self._last_plain = time.monotonic()
            self.line(msg)

    def close(self) -> None:
        self._clear_status()
        self.stream.flush()
