"""One device's measured roof as a record: what a ceilings file holds, and how several measurements merge.

No torch here: a report reads and draws ceilings without importing it (``ceilings`` measures them).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store.layout import ResultsLayout
from .history import Attempt, Earlier, bounded
from .model import ridge_point_flops_per_byte
from .oversized import read_skipping

# A ceilings file keeps a bounded history (:mod:`.history`): tens of kB. One over this size was grown by an older
# benchlib's merges and is read without its attempt lists, never loaded whole.
MAX_CEILINGS_FILE_BYTES = 2 * 2**20
_LEGACY_LISTS = ("attempt_peaks_flops_per_s", "attempt_bandwidths_bytes_per_s", "attempt_interference_cpu_pct")


@dataclass
class Ceilings:
    """One device's measured roof: peak FLOP/s per dtype, bandwidth (bytes read + written per second), and how.

    ``samples`` keeps the raw seconds behind every figure; ``noisy`` names figures whose IQR/median is
    over 10%; ``history`` the attempts merged into it that a file keeps whole, ``earlier`` the rest summarised
    (:mod:`.history`); ``path`` is the file it was read from (not stored).
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
    history: list[Attempt] = field(default_factory=list)  # empty for one fresh measurement: it is its own
    earlier: Earlier = field(default_factory=Earlier)
    # other work on the machine while measuring (see instruments.interference): a roof measured under
    # load is too low and puts correct points above it, so such a roof is measured again
    interference_cpu_pct: float | None = None
    steal_pct: float | None = None
    interfered: bool | None = None  # every attempt was interfered (one quiet attempt makes the maximum sound)
    interference: str | None = None
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
    cut_on_read: bool = False  # its file held more history than a file keeps (not stored): to be written back

    @property
    def attempts(self) -> int:
        """How many measurements were merged into these figures: those kept and those summarised."""
        return len(self.attempt_history()) + self.earlier.count

    def attempt_history(self) -> list[Attempt]:
        """The attempts kept whole: ``history``, or a fresh measurement as its own one attempt."""
        return list(self.history) or [Attempt(self.measured_utc, dict(self.peak_flops_per_s),
                                              self.bandwidth_bytes_per_s, self.interference_cpu_pct,
                                              self.interfered, {k: list(v) for k, v in self.samples.items()})]

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
        data.pop("cut_on_read")
        data["attempts"] = self.attempts
        data["ridge_point_flops_per_byte"] = self.ridge_point_flops_per_byte
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: str | None = None) -> Ceilings:
        """Ceilings from a file's JSON; ValueError when it is not a benchlib ceilings file."""
        if not isinstance(data, Mapping) or not isinstance(data.get("peak_flops_per_s"), dict) \
                or not isinstance(data.get("bandwidth_bytes_per_s"), (int, float)) or "device" not in data:
            raise ValueError("not a benchlib ceilings file")
        known = {f.name for f in dataclasses.fields(cls)} - {"path", "cut_on_read", "history", "earlier"}
        values = {k: v for k, v in data.items() if k in known}
        values.setdefault("device_name", str(data["device"]))
        if not isinstance(data.get("history", []), list):
            raise ValueError("its history is not a list of attempts")
        ceilings = cls(**values, path=path)
        history = [Attempt.from_json(a) for a in data.get("history", [])]  # none: it is its own one attempt
        earlier = Earlier.from_json(data.get("earlier")).merged(_legacy_attempts(data))
        ceilings.history, ceilings.earlier = bounded(history, earlier) if history else ([], earlier)
        return ceilings


def _legacy_attempts(data: Mapping[str, Any]) -> Earlier:
    """What an older benchlib's attempt lists held, summarised: each distinct attempt once, beside the file's
    own merged figures (the one attempt it is read as)."""
    peaks = data.get("attempt_peaks_flops_per_s") or []
    bandwidths = data.get("attempt_bandwidths_bytes_per_s") or []
    if not isinstance(peaks, list) or not isinstance(bandwidths, list):
        raise ValueError("its attempt lists are not lists")
    seen = {tuple(sorted(p.items())) for p in peaks if isinstance(p, dict)}
    if len(seen) <= 1:
        return Earlier()
    highest = Earlier().folding([Attempt("", dict(p), 0.0) for p in seen])
    return dataclasses.replace(highest, count=len(seen) - 1, bandwidth_bytes_per_s=max(
        (float(b) for b in bandwidths if isinstance(b, (int, float))), default=0.0))


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

    history, earlier = bounded([h for a in attempts for h in a.attempt_history()],
                               functools.reduce(Earlier.merged, (a.earlier for a in attempts), Earlier()))
    quiet = [a for a in attempts if not a.interfered]
    watched = [a for a in attempts if a.interfered is not None]
    least = min(quiet or attempts, key=lambda a: a.interference_cpu_pct or 0.0)
    return dataclasses.replace(
        attempts[0], peak_flops_per_s=peaks, bandwidth_bytes_per_s=max(a.bandwidth_bytes_per_s for a in attempts),
        matmul_flops_per_s=highest(lambda a: a.matmul_flops_per_s),
        conv_flops_per_s=highest(lambda a: a.conv_flops_per_s),
        kind_flops_per_s=highest_per_kind(lambda a: a.kind_flops_per_s),
        kind_bandwidth_bytes_per_s=highest_per_kind(lambda a: a.kind_bandwidth_bytes_per_s),
        history=history, earlier=earlier, cut_on_read=False,
        interference_cpu_pct=least.interference_cpu_pct, steal_pct=least.steal_pct,
        interfered=(all(a.interfered for a in watched) if watched else None),
        interference=None if quiet else least.interference,
        measured_utc=max(a.measured_utc for a in attempts))


def read_ceilings(path: Path) -> Ceilings:
    """One ceilings file, its history cut to the bound (warned, once, where the file held more); ValueError
    when it is not one."""
    size = path.stat().st_size
    if size > MAX_CEILINGS_FILE_BYTES:
        data = read_skipping(path, (*_LEGACY_LISTS, "history"))
        ceilings = Ceilings.from_json(data, path=str(path))
        ceilings.cut_on_read = True
        warnings.warn(f"ceilings file {path} is {size / 2**20:.0f} MB, grown by an older benchlib's merges: read "
                      "without its attempt history (its roofs, the highest figures, are kept); cut back on the "
                      "next save", stacklevel=2)
    else:
        data = json.loads(path.read_text(encoding="utf-8"))
        ceilings = Ceilings.from_json(data, path=str(path))
        held = sum(len(data.get(k) or []) for k in ("history", _LEGACY_LISTS[0]))
        if held > len(ceilings.attempt_history()):
            ceilings.cut_on_read = True
            warnings.warn(f"ceilings file {path} held {held} attempts: {len(ceilings.attempt_history())} kept whole, "
                          f"{ceilings.earlier.count} others summarised; cut back on the next save", stacklevel=2)
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
