"""Ceilings on disk: one file per machine and device in a results folder, measured on first use.

A cached file is reused only for the device, torch build and driver it was measured with: a file another
GPU model, torch version or driver left under the same machine name is measured again.
"""
from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import torch

from ..env.devices import device_name
from ..env.manifest import driver_version, machine_name
from ..log import ProgressFn
from ..store.atomic import atomic_write_json
from ..store.layout import ResultsLayout
from .ceilings import _resolve_device, measure_ceilings_robust, measure_watched
from .measured import Ceilings, best_of, read_ceilings


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
    if cached.torch and cached.torch != torch.__version__:
        return f"measured with torch {cached.torch}, not {torch.__version__}"
    if device.type == "cuda":
        driver = driver_version()[0]
        if cached.driver != driver:
            return f"measured with driver {cached.driver}, not {driver}"
    return None


def _cached(path: Path, dev: torch.device) -> Ceilings | None:
    """The cached ceilings at ``path`` if they describe ``dev`` with this torch build, else None (warned)."""
    if not path.exists():
        return None
    try:
        cached = read_ceilings(path)
    except (OSError, ValueError, TypeError, UnicodeDecodeError) as exc:
        warnings.warn(f"re-measuring ceilings: unreadable file {path}: {exc}", stacklevel=3)
        return None
    reason = stale_reason(cached, dev)
    if reason is not None:
        warnings.warn(f"re-measuring ceilings in {path}: {reason}", stacklevel=3)
        return None
    return cached


def _save(ceilings: Ceilings, results_dir: str | Path) -> Ceilings:
    ceilings = dataclasses.replace(ceilings, machine=machine_name())
    ceilings.path = str(save_ceilings(ceilings, results_dir))
    return ceilings


def ensure_ceilings(results_dir: str | Path, device: str | torch.device,
                    progress: ProgressFn | None = None) -> Ceilings:
    """This machine's ceilings for ``device`` from ``results_dir``, measured and saved when missing or stale.

    Cached ceilings measured while other work interfered are measured again, keeping the higher of each
    figure (a roof is a maximum: a busy machine only ever lowers it). ``progress`` hears when they are measured.
    """
    dev = _resolve_device(device)
    path = ResultsLayout.of(results_dir).ceilings_path(machine_name(), str(dev))
    cached = _cached(path, dev)
    if cached is not None and not cached.interfered:
        return cached
    if progress:
        progress(f"measuring the roofline ceilings of {dev} (matmul per dtype, copy bandwidth)")
    if cached is not None:
        warnings.warn(f"re-measuring ceilings in {path}: {cached.interference}", stacklevel=2)
        return _save(best_of([cached, measure_ceilings_robust(dev)]), results_dir)
    return _save(measure_ceilings_robust(dev), results_dir)


def remeasure_ceilings(results_dir: str | Path, device: str | torch.device) -> tuple[Ceilings, Ceilings | None]:
    """Measure the ceilings once more and keep the higher of each figure: at the end of a study, or when a
    row lands above its roof. Returns (the ceilings now, those before or None)."""
    dev = _resolve_device(device)
    path = ResultsLayout.of(results_dir).ceilings_path(machine_name(), str(dev))
    cached = _cached(path, dev)
    fresh = measure_watched(dev)
    return _save(best_of([cached, fresh]) if cached is not None else fresh, results_dir), cached


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
