"""Exceptions benchlib raises for problems the user can fix.

Every error here carries one line that names the problem and what is allowed; the CLI prints that line
and exits with code 2 (bad input) without a traceback unless ``--debug`` is given.
"""
from __future__ import annotations


class BenchlibError(Exception):
    """Base class for user-facing errors: the message is the whole explanation."""

    exit_code: int = 2


class ConfigError(BenchlibError):
    """A params file or command-line value is malformed, unknown or out of range."""


class DataPathError(BenchlibError):
    """A data set is missing on disk or is not in the expected on-disk format."""


class DeviceNotPresentError(BenchlibError):
    """The requested hardware is not present on this machine."""


class WeightsUnavailableError(BenchlibError):
    """Pretrained weights are neither cached nor downloadable."""


class ResultsFileError(BenchlibError):
    """A results file is unreadable, truncated or not a benchlib results file."""
