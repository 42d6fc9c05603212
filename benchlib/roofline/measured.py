"""One device's measured roof as a record: what a ceilings file holds, and how several measurements merge.

No torch here: a report reads and draws ceilings without importing it (``ceilings`` measures them).
"""
from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store.layout import ResultsLayout
from .model import ridge_point_flops_per_byte


@dataclass
class Ceilings:
    """One device's measured roof: peak FLOP/s per dtype, bandwidth (bytes read + written per second), and how.

    ``samples`` keeps the raw seconds behind every figure; ``noisy`` names figures whose IQR/median is
    over 10%; ``path`` is the file it was read from (not stored).
    """

    device: str
    device_name: str
    peak_flops_per_s: dict[str, float]  # the compute roof: the faster of the matmul and the convolution
    bandwidth_bytes_per_s: float
    samples: dict[str, list[float]] = field(default_factory=dict)
    iqr_over_median: dict[str, float] = field(default_factory=dict)
    noisy: list[str] = field(default_factory=list)
    skipped_dtypes: dict[str, str] = field(default_factory=dict)
    matmul_size: int = 0
    matmul_products_per_repeat: dict[str, int] = field(default_factory=dict)
    copy_bytes: int = 0
    copies_per_repeat: int = 0
    repeats: int = 0
    warmup: int = 0
    threads: int = 0
    torch: str = ""
    driver: str | None = None
    measured_utc: str = ""
    method: str = ""
    machine: str = ""
    attempts: int = 1
    attempt_peaks_flops_per_s: list[dict[str, float]] = field(default_factory=list)
    attempt_bandwidths_bytes_per_s: list[float] = field(default_factory=list)
    # other work on the machine while measuring (see instruments.interference): a roof measured under
    # load is too low and puts correct points above it, so such a roof is measured again
    interference_cpu_pct: float | None = None
    steal_pct: float | None = None
    interfered: bool | None = None  # every attempt was interfered (one quiet attempt makes the maximum sound)
    interference: str | None = None
    attempt_interference_cpu_pct: list[float | None] = field(default_factory=list)
    matmul_flops_per_s: dict[str, float] = field(default_factory=dict)
    conv_flops_per_s: dict[str, float] = field(default_factory=dict)
    conv_shape: list[int] = field(default_factory=list)  # batch, channels, side of the roof's convolution
    conv_kernel: int = 3  # its kernel size: 3 on a CPU, 1 on CUDA (no Winograd shortcut to inflate the roof)
    # the roof of each kind of operation a layer is judged by (spec.vocab.OP_KINDS), per dtype: FLOP/s of
    # conv3x3, conv1x1, depthwise and matmul; bytes/s of elementwise work on DRAM- and cache-sized tensors
    kind_flops_per_s: dict[str, dict[str, float]] = field(default_factory=dict)
    kind_bandwidth_bytes_per_s: dict[str, dict[str, float]] = field(default_factory=dict)
    # the conditions it was measured under (env.fingerprint): the machine cache keeps it only while they hold
    fingerprint: dict[str, str] = field(default_factory=dict)
    path: str | None = None

    def kind_roof(self, kind: str, dtype: str, cache_resident: bool = False) -> tuple[float, float]:
        """The (FLOP/s, bytes/s) roof a layer of ``kind`` (``spec.vocab.OP_KINDS``) in ``dtype`` meets: its
        kind's product (the whole roof for elementwise work or a kind not measured), and the cache's bandwidth
        where its tensors fit in the last-level cache, else DRAM's."""
        peak = self.kind_flops_per_s.get(kind, {}).get(dtype) or self.peak_flops_per_s[dtype]
        where = "cache" if cache_resident else "dram"
        bandwidth = self.kind_bandwidth_bytes_per_s.get(where, {}).get(dtype) or 0.0
        return peak, max(bandwidth, self.bandwidth_bytes_per_s)  # a roof is the highest figure measured for it

    @property
    def ridge_point_flops_per_byte(self) -> dict[str, float]:
        """Per dtype, the intensity where the roof turns from memory-bound to compute-bound."""
        return {k: ridge_point_flops_per_byte(v, self.bandwidth_bytes_per_s) for k, v in self.peak_flops_per_s.items()}

    def to_json(self) -> dict[str, Any]:
        """What the ceilings file holds (the derived ridge points included for readers; ``path`` left out)."""
        data = dataclasses.asdict(self)
        data.pop("path")
        data["ridge_point_flops_per_byte"] = self.ridge_point_flops_per_byte
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: str | None = None) -> Ceilings:
        """Ceilings from a file's JSON; ValueError when it is not a benchlib ceilings file."""
        if not isinstance(data, Mapping) or not isinstance(data.get("peak_flops_per_s"), dict) \
                or not isinstance(data.get("bandwidth_bytes_per_s"), (int, float)) or "device" not in data:
            raise ValueError("not a benchlib ceilings file")
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known and k != "path"}
        values.setdefault("device_name", str(data["device"]))
        return cls(**values, path=path)


def best_of(attempts: Sequence[Ceilings]) -> Ceilings:
    """Merge ceiling measurements: per figure, the attempt with the highest median wins.

    A ceiling is what the machine can do; a median taken while something else loaded it is lower,
    never higher, so the highest of a few medians is the better estimate of the roof.
    """
    def highest(figures: Callable[[Ceilings], dict[str, float]]) -> dict[str, float]:
        out: dict[str, float] = {}
        for dtype in dict.fromkeys(d for a in attempts for d in figures(a)):
            values = [figures(a)[dtype] for a in attempts if figures(a).get(dtype)]
            if values:
                out[dtype] = max(values)
        return out

    peaks = highest(lambda a: a.peak_flops_per_s)

    def highest_per_kind(figures: Callable[[Ceilings], dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
        def of_kind(kind: str) -> Callable[[Ceilings], dict[str, float]]:
            return lambda a: figures(a).get(kind, {})

        kinds = dict.fromkeys(k for a in attempts for k in figures(a))
        return {k: highest(of_kind(k)) for k in kinds}

    quiet = [a for a in attempts if not a.interfered]
    watched = [a for a in attempts if a.interfered is not None]
    least = min(quiet or attempts, key=lambda a: a.interference_cpu_pct or 0.0)
    return dataclasses.replace(
        attempts[0], peak_flops_per_s=peaks, bandwidth_bytes_per_s=max(a.bandwidth_bytes_per_s for a in attempts),
        matmul_flops_per_s=highest(lambda a: a.matmul_flops_per_s),
        conv_flops_per_s=highest(lambda a: a.conv_flops_per_s),
        kind_flops_per_s=highest_per_kind(lambda a: a.kind_flops_per_s),
        kind_bandwidth_bytes_per_s=highest_per_kind(lambda a: a.kind_bandwidth_bytes_per_s),
        attempts=sum(max(1, a.attempts) for a in attempts),
        attempt_peaks_flops_per_s=[p for a in attempts for p in (a.attempt_peaks_flops_per_s or
                                                                  [dict(a.peak_flops_per_s)])],
        attempt_bandwidths_bytes_per_s=[b for a in attempts for b in (a.attempt_bandwidths_bytes_per_s or
                                                                       [a.bandwidth_bytes_per_s])],
        interference_cpu_pct=least.interference_cpu_pct, steal_pct=least.steal_pct,
        interfered=(all(a.interfered for a in watched) if watched else None),
        interference=None if quiet else least.interference,
        attempt_interference_cpu_pct=[x for a in attempts for x in a.attempt_interference_cpu_pct],
        measured_utc=max(a.measured_utc for a in attempts))


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
