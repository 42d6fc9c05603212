"""What is measured of the machine itself, kept once per machine where every results folder finds it.

The roofline ceilings and the run-to-run noise floor describe the machine, not a study, and they take seconds
to minutes to measure. So they are kept in one folder per user, ``$BENCHLIB_CACHE`` (default
``$XDG_CACHE_HOME/benchlib``, else ``~/.cache/benchlib``), laid out as a results folder is:
``ceilings/<machine>__<device>.json`` and ``noise_floor/<machine>__<device>.json``. Each record carries the
fingerprint it was measured under (the machine's name, its CPU model and count, the device's name, torch's
version, the driver's on a GPU, and the version of benchlib's method); one whose fingerprint is not this
process's is measured again. A results folder still keeps a copy of what its rows were measured under, so a
report reads its own folder and stays self-contained. Deleting the folder is always safe: what it held is
measured again when next needed.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .layout import ResultsLayout

CACHE_ENV = "BENCHLIB_CACHE"
# Each fingerprint key and how a changed one is said: "measured with torch 2.14.0, not 2.14.1".
FINGERPRINT_WORDS = {"machine": "on machine", "cpu_model": "on CPU", "cpus": "with usable CPUs",
                     "device_name": "on device", "torch": "with torch", "driver": "with driver",
                     "method": "by method"}


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """The machine cache's folder: ``$BENCHLIB_CACHE``, else ``$XDG_CACHE_HOME/benchlib``, else
    ``~/.cache/benchlib``."""
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "benchlib"
    return Path.home() / ".cache" / "benchlib"


def machine_cache(environ: Mapping[str, str] | None = None) -> ResultsLayout:
    """The machine cache laid out as a results folder (``ceilings_path``, ``noise_floor_path``)."""
    return ResultsLayout.of(cache_root(environ))


def fingerprint_change(recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> str | None:
    """Why a record measured under ``recorded`` does not describe ``current`` (None when it does): the first
    key that differs, in words ("measured with torch 2.14.0, not 2.14.1")."""
    if not recorded:
        return "measured without a fingerprint (an older benchlib)"
    for key, value in current.items():
        if str(recorded.get(key, "")) != str(value):
            words = FINGERPRINT_WORDS.get(key, f"with {key}")
            return f"measured {words} {recorded.get(key)!s}, not {value!s}"
    return None
