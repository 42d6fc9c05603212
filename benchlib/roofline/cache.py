"""Ceilings on disk: kept once per machine (``store.machine_cache``), copied into each results folder that uses them.

A results folder keeps the ceilings its rows were placed under (``ceilings/<machine>__<device>.json``), so its
report is self-contained. Where a folder has none, the machine cache's are copied in; only where neither
describes this device, torch build and driver (the fingerprint, ``env.fingerprint``) are they measured, and
then saved to both. A roof measured while other work interfered is measured again on next use, once
``RETRY_INTERFERED_S`` have passed.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
import warnings
from pathlib import Path
from typing import TypeGuard

import torch

from ..env.devices import device_name
from ..env.fingerprint import fingerprint
from ..env.manifest import driver_version, machine_name
from ..log import ProgressFn
from ..store.atomic import atomic_write_json
from ..store.layout import ResultsLayout
from ..store.machine_cache import fingerprint_change, machine_cache
from .ceilings import CONV_KERNEL, METHOD_VERSION, _resolve_device, measure_ceilings_robust, measure_watched
from .measured import Ceilings, best_of, read_ceilings

# A roof measured while other work ran is measured again on next use, but not within this many seconds of its
# measurement: on a host busy for minutes, measuring again at once meets the same load and costs seconds of every
# configuration (under a load of 11 on this project's 2-core VM, each of one benchmark() call's two
# configurations measured the roof again, three attempts each: 129 s for what takes 15 s quiet).
# ``BENCHLIB_RETRY_INTERFERED_S`` shortens it (a benchmark meets a busy host's retries within minutes).
RETRY_INTERFERED_S = 600
RETRY_ENV = "BENCHLIB_RETRY_INTERFERED_S"


def retry_interfered_s() -> float:
    """Seconds before an interfered roof is measured again: ``$BENCHLIB_RETRY_INTERFERED_S``, else 600."""
    try:
        return float(os.environ.get(RETRY_ENV, RETRY_INTERFERED_S))
    except ValueError:
        warnings.warn(f"${RETRY_ENV} is not a number of seconds: {os.environ[RETRY_ENV]!r}; using "
                      f"{RETRY_INTERFERED_S}", stacklevel=2)
        return float(RETRY_INTERFERED_S)


def save_ceilings(ceilings: Ceilings, results_dir: str | Path) -> Path:
    """Write measured ceilings to ``results_dir/ceilings/<machine>__<device>.json`` atomically."""
    machine = ceilings.machine or machine_name()
    path = ResultsLayout.of(results_dir).ceilings_path(machine, ceilings.device)
    atomic_write_json(path, {**ceilings.to_json(), "machine": machine})
    return path


def stale_reason(cached: Ceilings, device: torch.device) -> str | None:
    """Why cached ceilings do not describe ``device`` with this torch build (None when they do)."""
    name = device_name(device)
    if cached.device_name != name:
        return f"measured on '{cached.device_name}', not '{name}'"
    if cached.peak_flops_per_s and not cached.conv_flops_per_s:
        return "measured without a convolution ceiling (an older benchlib): its compute roof is a matmul's only"
    if cached.conv_kernel != CONV_KERNEL[device.type]:
        return (f"its convolution roof is a {cached.conv_kernel}x{cached.conv_kernel} one's, not a "
                f"{CONV_KERNEL[device.type]}x{CONV_KERNEL[device.type]} (a Winograd kernel can lift a 3x3's)")
    if cached.peak_flops_per_s and not cached.kind_flops_per_s:
        return "measured without roofs per kind of operation (an older benchlib): each layer needs its kind's"
    if cached.torch and cached.torch != torch.__version__:
        return f"measured with torch {cached.torch}, not {torch.__version__}"
    if device.type == "cuda":
        driver = driver_version()[0]
        if cached.driver != driver:
            return f"measured with driver {cached.driver}, not {driver}"
    if cached.fingerprint:  # a folder's copy from an older benchlib has none: the checks above are its own
        return fingerprint_change(cached.fingerprint, fingerprint(device, METHOD_VERSION))
    return None


def _cached(path: Path, dev: torch.device, *, kept: bool = False) -> Ceilings | None:
    """The cached ceilings at ``path`` if they describe ``dev`` with this torch build, else None (warned).

    ``kept``: the machine cache's, which must carry the fingerprint they were measured under."""
    if not path.exists():
        return None
    try:
        cached = read_ceilings(path)
    except (OSError, ValueError, TypeError, UnicodeDecodeError) as exc:
        warnings.warn(f"re-measuring ceilings: unreadable file {path}: {exc}", stacklevel=3)
        return None
    if cached.cut_on_read:  # an older benchlib's grown history: written back bounded at once
        atomic_write_json(path, cached.to_json())
    reason = stale_reason(cached, dev)
    if reason is None and kept and not cached.fingerprint:
        reason = fingerprint_change(None, {})
    if reason is not None:
        warnings.warn(f"re-measuring ceilings in {path}: {reason}", stacklevel=3)
        return None
    return cached


def _save(ceilings: Ceilings, results_dir: str | Path, dev: torch.device, *, keep: bool = True) -> Ceilings:
    """Save to ``results_dir`` and (``keep``) to the machine cache, under this process's fingerprint."""
    ceilings = dataclasses.replace(ceilings, machine=machine_name(), fingerprint=fingerprint(dev, METHOD_VERSION))
    if keep:
        save_ceilings(ceilings, machine_cache().root)
    ceilings.path = str(save_ceilings(ceilings, results_dir))
    return ceilings


def _age_s(measured_utc: str) -> float | None:
    try:
        when = dt.datetime.fromisoformat(measured_utc.replace("Z", "+00:00"))
    except ValueError:
        return None
    when = when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)
    return (dt.datetime.now(dt.timezone.utc) - when).total_seconds()


def settled(ceilings: Ceilings | None) -> TypeGuard[Ceilings]:
    """Usable as they are: measured while nothing else ran, or under interference less than RETRY_INTERFERED_S
    ago (measured again at once, they would meet the same load)."""
    if ceilings is None:
        return False
    if not ceilings.interfered:
        return True
    age = _age_s(ceilings.measured_utc)
    return age is not None and 0 <= age < retry_interfered_s()


def _kept(dev: torch.device) -> Ceilings | None:
    """The machine cache's ceilings of ``dev``, where they describe it."""
    return _cached(machine_cache().ceilings_path(machine_name(), str(dev)), dev, kept=True)


def ensure_ceilings(results_dir: str | Path, device: str | torch.device,
                    progress: ProgressFn | None = None) -> Ceilings:
    """This machine's ceilings for ``device`` in ``results_dir``: the folder's own, else the machine cache's
    (copied in), else measured and saved to both.

    Ceilings measured while other work interfered are measured again (once RETRY_INTERFERED_S have passed),
    keeping the higher of each figure (a roof is a maximum: a busy machine only ever lowers it). ``progress``
    hears where they came from.
    """
    dev = _resolve_device(device)
    path = ResultsLayout.of(results_dir).ceilings_path(machine_name(), str(dev))
    here = _cached(path, dev)
    if settled(here):
        return here
    kept = _kept(dev)
    if settled(kept):
        if progress:
            progress(f"ceilings of {dev}: those measured {kept.measured_utc} on this machine (machine cache)")
        return _save(best_of([here, kept]) if here is not None else kept, results_dir, dev, keep=here is not None)
    if progress:
        progress(f"measuring the roofline ceilings of {dev} (matmul and convolution per dtype, copy bandwidth)")
    if here is not None:
        warnings.warn(f"re-measuring ceilings in {path}: {here.interference}", stacklevel=2)
    return _save(best_of([c for c in (here, kept, measure_ceilings_robust(dev)) if c is not None]), results_dir, dev)


def remeasure_ceilings(results_dir: str | Path, device: str | torch.device) -> tuple[Ceilings, Ceilings | None]:
    """Measure the ceilings once more and keep the higher of each figure: at the end of a study, or when a
    row lands above its roof. Returns (the ceilings now, those before or None)."""
    dev = _resolve_device(device)
    path = ResultsLayout.of(results_dir).ceilings_path(machine_name(), str(dev))
    cached = _cached(path, dev)
    fresh = measure_watched(dev)
    kept = _kept(dev)
    now = best_of([c for c in (cached, kept, fresh) if c is not None])
    return _save(now, results_dir, dev), cached


def raised(before: Ceilings | None, after: Ceilings) -> str | None:
    """What a re-measurement raised (e.g. "fp32 peak 46.8 -> 184.9 GFLOP/s"), or None when nothing rose."""
    if before is None:
        return None
    parts = [f"{d} peak {before.peak_flops_per_s.get(d, 0.0) / 1e9:.1f} -> {v / 1e9:.1f} GFLOP/s"
             for d, v in after.peak_flops_per_s.items() if v > before.peak_flops_per_s.get(d, 0.0)]
    if after.bandwidth_bytes_per_s > before.bandwidth_bytes_per_s:
        parts.append(f"bandwidth {before.bandwidth_bytes_per_s / 1e9:.1f} -> "
                     f"{after.bandwidth_bytes_per_s / 1e9:.1f} GB/s")
    return "; ".join(parts) or None
