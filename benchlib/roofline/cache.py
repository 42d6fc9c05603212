"""Ceilings on disk: one file per machine and device in a results folder, measured on first use.

A cached file is reused only for the device, torch build and driver it was measured with: a file another
GPU model, torch version or driver left under the same machine name is measured again.
"""
from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Iterable
from pathlib import Path

import torch

from ..env.devices import device_name
from ..env.manifest import driver_version, machine_name
from ..store.atomic import atomic_write_json
from ..store.layout import ResultsLayout
from .ceilings import Ceilings, _resolve_device, measure_ceilings_robust


def save_ceilings(ceilings: Ceilings, results_dir: str | Path) -> Path:
    """Write measured ceilings to ``results_dir/ceilings/<machine>__<device>.json`` atomically."""
    machine = ceilings.machine or machine_name()
    path = ResultsLayout.of(results_dir).ceilings_path(machine, ceilings.device)
    atomic_write_json(path, {**ceilings.to_json(), "machine": machine})
    return path


def read_ceilings(path: Path) -> Ceilings:
    """One ceilings file; ValueError when it is not one."""
    ceilings = Ceilings.from_json(json.loads(path.read_text(encoding="utf-8")), path=str(path))
    ceilings.machine = ceilings.machine or path.stem.split("__", 1)[0]
    return ceilings


def load_ceilings(results_dirs: Iterable[str | Path]) -> list[Ceilings]:
    """Every saved ceilings file under the given results folders.

    A folder without ceilings gives none; unreadable or foreign files are skipped with a warning naming them.
    """
    found: list[Ceilings] = []
    for d in results_dirs:
        d = Path(d)
        if not d.is_dir():
            raise FileNotFoundError(f"results folder '{d}' does not exist")
        for path in ResultsLayout.of(d).ceilings_files():
            try:
                found.append(read_ceilings(path))
            except (OSError, ValueError, TypeError, UnicodeDecodeError) as exc:
                warnings.warn(f"skipping unreadable ceilings file {path}: {exc}", stacklevel=2)
    return found


def stale_reason(cached: Ceilings, device: torch.device) -> str | None:
    """Why cached ceilings do not describe ``device`` with this torch build (None when they do)."""
    name = device_name(device)
    if cached.device_name != name:
        return f"measured on '{cached.device_name}', not '{name}'"
    if cached.torch and cached.torch != torch.__version__:
        return f"measured with torch {cached.torch}, not {torch.__version__}"
    if device.type == "cuda":
        driver = driver_version()[0]
        if cached.driver != driver:
            return f"measured with driver {cached.driver}, not {driver}"
    return None


def ensure_ceilings(results_dir: str | Path, device: str | torch.device) -> Ceilings:
    """This machine's ceilings for ``device`` from ``results_dir``, measured and saved when missing or stale."""
    dev = _resolve_device(device)
    path = ResultsLayout.of(results_dir).ceilings_path(machine_name(), str(dev))
    if path.exists():
        try:
            cached = read_ceilings(path)
            reason = stale_reason(cached, dev)
            if reason is None:
                return cached
            warnings.warn(f"re-measuring ceilings in {path}: {reason}", stacklevel=2)
        except (OSError, ValueError, TypeError, UnicodeDecodeError) as exc:
            warnings.warn(f"re-measuring ceilings: unreadable file {path}: {exc}", stacklevel=2)
    ceilings = dataclasses.replace(measure_ceilings_robust(dev), machine=machine_name())
    ceilings.path = str(save_ceilings(ceilings, results_dir))
    return ceilings
