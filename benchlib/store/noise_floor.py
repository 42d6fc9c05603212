"""The machine's noise floor: how far two runs of identical settings, each in a fresh process, differ.

Steps of one process share its allocator, thread placement, CPU frequency and neighbours, so the spread
that decides whether two single runs differ is the one between processes. ``benchlib calibrate`` runs one
small configuration in several fresh processes and keeps each run's figures here; from them follows, per
metric, how far apart two single runs of identical settings may land on this machine (the 99% prediction
bound of their ratio, ``instruments.run_to_run.floor_pct``). A comparison of one run a side claims a
difference only beyond it. One file per machine and device type, beside the ceilings:
``noise_floor/<machine>__<device>.json``, in the machine cache (``machine_cache``) and, copied, in each results
folder whose comparisons rest on it.
"""
from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .atomic import atomic_write_json
from .layout import ResultsLayout

FLOOR_METRICS = ("train_step_s", "infer_samples_per_s", "latency_ms_p50", "peak_rss_bytes")
STALE_AFTER_DAYS = 7.0  # a floor older than this is measured again: a VM's neighbours change
@dataclass(frozen=True)
class NoiseFloor:
    """Run-to-run figures of one small configuration in fresh processes, per intra-op thread count.

    ``values[threads][metric]`` holds each run's figure (the training step median in seconds, inference
    samples/s, batch-1 latency p50 in ms, peak RSS in bytes). How far two single runs may differ follows
    from them (``instruments.run_to_run.floor_pct``), the spread pooled over the thread counts, each about
    its own level.
    """

    machine: str
    measured_utc: str
    torch: str
    configuration: str  # what was run, as a command line a user can repeat (threads left out)
    values: Mapping[int, Mapping[str, tuple[float, ...]]]
    minutes: float  # how long the calibration took
    interfered: bool = False  # another process took CPU while it ran: the floor is too wide
    interference: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    device: str = "cpu"  # the device type the configuration ran on (cpu, cuda, mps)
    # the conditions it was measured under (env.fingerprint): the machine cache keeps it only while they hold
    fingerprint: Mapping[str, str] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        """Fresh processes per thread count (the fewest; counted on the training step, which every run has)."""
        counts = [len(per.get("train_step_s") or max(per.values(), key=len, default=()))
                  for per in self.values.values()]
        return min(counts) if counts else 0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["values"] = {str(n): {m: list(v) for m, v in per.items()} for n, per in self.values.items()}
        out["extra"] = dict(self.extra)
        out["fingerprint"] = dict(self.fingerprint)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NoiseFloor:
        """ValueError when ``data`` is not a noise floor."""
        try:
            values = {int(n): {str(m): tuple(float(x) for x in v) for m, v in dict(per).items()}
                      for n, per in dict(data["values"]).items()}
            return cls(machine=str(data["machine"]), measured_utc=str(data["measured_utc"]),
                       torch=str(data.get("torch", "")), configuration=str(data.get("configuration", "")),
                       values=values, minutes=float(data.get("minutes", math.nan)),
                       interfered=bool(data.get("interfered", False)),
                       interference=str(data.get("interference", "")), extra=dict(data.get("extra", {})),
                       device=str(data.get("device", "cpu")),
                       fingerprint={str(k): str(v) for k, v in dict(data.get("fingerprint") or {}).items()})
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a noise floor: {exc}") from exc


def save_noise_floor(floor: NoiseFloor, results_dir: str | Path) -> Path:
    path = ResultsLayout.of(results_dir).noise_floor_path(floor.machine, floor.device)
    atomic_write_json(path, floor.to_json())
    return path


def read_noise_floor(path: Path) -> NoiseFloor:
    """One floor file; ValueError when it is not one."""
    return NoiseFloor.from_json(json.loads(path.read_text(encoding="utf-8")))


def load_noise_floors(results_dirs: Iterable[str | Path]) -> list[NoiseFloor]:
    """Every floor file under the given results folders (unreadable ones skipped with a warning)."""
    found: list[NoiseFloor] = []
    for d in results_dirs:
        for path in ResultsLayout.of(d).noise_floor_files():
            try:
                found.append(read_noise_floor(path))
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                warnings.warn(f"skipping unreadable noise floor file {path}: {exc}", stacklevel=2)
    return found
