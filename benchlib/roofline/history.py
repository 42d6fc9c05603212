"""A ceilings file's attempts, bounded: each kept once by its identity, the best and latest few with their raw
samples, every older one folded into a summary.

A roof is measured again and again (an interfered one on next use, every study at its end), and a results
folder keeps a copy of the machine cache's. Merging a copy with its source must not count an attempt twice,
and no history may grow with use: so an attempt carries an identity (when it was measured and a digest of its
figures), a merge keeps each identity once, and what falls outside ``KEPT_LATEST`` and the holders of the
highest figures is counted, not kept. The roofs themselves are the highest figure ever merged
(:func:`.measured.best_of`), so cutting the history loses no measured roof.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# The latest attempts a file keeps whole (beside those holding a highest figure): enough to see a busy
# afternoon's retries, few enough that a file stays a few tens of kB.
KEPT_LATEST = 3


@dataclass(frozen=True)
class Attempt:
    """One measurement of the roofs: when, its figures, whether other work interfered, and its raw seconds."""

    measured_utc: str
    peak_flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float
    interference_cpu_pct: float | None = None
    interfered: bool | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)

    @property
    def identity(self) -> str:
        """When it was measured and a digest of its figures: a copy of an attempt is the same attempt."""
        figures = json.dumps([self.measured_utc, sorted(self.peak_flops_per_s.items()), self.bandwidth_bytes_per_s])
        return hashlib.sha256(figures.encode()).hexdigest()[:16]

    @classmethod
    def from_json(cls, data: Any) -> Attempt:
        """An attempt from its JSON; ValueError when it is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("peak_flops_per_s"), dict) \
                or not isinstance(data.get("bandwidth_bytes_per_s"), (int, float)):
            raise ValueError("an attempt needs peak_flops_per_s and bandwidth_bytes_per_s")
        return cls(measured_utc=str(data.get("measured_utc", "")),
                   peak_flops_per_s={str(k): float(v) for k, v in data["peak_flops_per_s"].items()},
                   bandwidth_bytes_per_s=float(data["bandwidth_bytes_per_s"]),
                   interference_cpu_pct=data.get("interference_cpu_pct"), interfered=data.get("interfered"),
                   samples={str(k): [float(x) for x in v] for k, v in (data.get("samples") or {}).items()})


@dataclass(frozen=True)
class Earlier:
    """Attempts no longer kept whole: how many, their first and last dates, their highest figures.

    Copies of one history fold their attempts each on its own, so merging two summaries keeps the larger count
    rather than the sum: merging a summary with itself changes nothing, and the count grows only with new
    attempts (it may miss or repeat one that two copies folded apart)."""

    count: int = 0
    first_utc: str = ""
    last_utc: str = ""
    peak_flops_per_s: dict[str, float] = field(default_factory=dict)
    bandwidth_bytes_per_s: float = 0.0

    @classmethod
    def from_json(cls, data: Any) -> Earlier:
        """A summary from its JSON (an empty one for None); ValueError when it is not one."""
        if data is None:
            return cls()
        if not isinstance(data, dict) or not isinstance(data.get("count", 0), int):
            raise ValueError("earlier attempts need a whole count")
        return cls(count=max(0, data.get("count", 0)), first_utc=str(data.get("first_utc", "")),
                   last_utc=str(data.get("last_utc", "")),
                   peak_flops_per_s={str(k): float(v) for k, v in (data.get("peak_flops_per_s") or {}).items()},
                   bandwidth_bytes_per_s=float(data.get("bandwidth_bytes_per_s") or 0.0))

    def merged(self, other: Earlier) -> Earlier:
        """Two summaries of possibly overlapping histories as one (idempotent: ``x.merged(x) == x``)."""
        return Earlier(count=max(self.count, other.count),
                       first_utc=min((d for d in (self.first_utc, other.first_utc) if d), default=""),
                       last_utc=max(self.last_utc, other.last_utc),
                       peak_flops_per_s=_highest([self.peak_flops_per_s, other.peak_flops_per_s]),
                       bandwidth_bytes_per_s=max(self.bandwidth_bytes_per_s, other.bandwidth_bytes_per_s))

    def folding(self, attempts: Sequence[Attempt]) -> Earlier:
        """This summary with ``attempts`` counted into it."""
        if not attempts:
            return self
        dates = [a.measured_utc for a in attempts if a.measured_utc]
        return Earlier(count=self.count + len(attempts),
                       first_utc=min([d for d in (self.first_utc, *dates) if d], default=""),
                       last_utc=max([self.last_utc, *dates]),
                       peak_flops_per_s=_highest([self.peak_flops_per_s, *(a.peak_flops_per_s for a in attempts)]),
                       bandwidth_bytes_per_s=max([self.bandwidth_bytes_per_s,
                                                  *(a.bandwidth_bytes_per_s for a in attempts)]))


def _highest(figures: Iterable[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for one in figures:
        for key, value in one.items():
            out[key] = max(out.get(key, value), value)
    return out


def distinct(attempts: Iterable[Attempt]) -> list[Attempt]:
    """Each attempt once by identity, oldest first (ties in the order met)."""
    seen: dict[str, Attempt] = {}
    for attempt in attempts:
        seen.setdefault(attempt.identity, attempt)
    return sorted(seen.values(), key=lambda a: a.measured_utc)


def bounded(attempts: Sequence[Attempt], earlier: Earlier) -> tuple[list[Attempt], Earlier]:
    """What a file keeps: each distinct attempt holding a highest figure (per dtype, and the bandwidth) and the
    ``KEPT_LATEST`` latest, oldest first; the rest folded into ``earlier``. Deterministic in the set of
    attempts, so bounding a bounded history changes nothing."""
    ordered = distinct(attempts)
    keep = {a.identity for a in ordered[-KEPT_LATEST:]}
    for dtype in dict.fromkeys(d for a in ordered for d in a.peak_flops_per_s):
        holders = [a for a in ordered if dtype in a.peak_flops_per_s]
        keep.add(max(holders, key=lambda a: (a.peak_flops_per_s[dtype], a.measured_utc)).identity)
    if ordered:
        keep.add(max(ordered, key=lambda a: (a.bandwidth_bytes_per_s, a.measured_utc)).identity)
    kept = [a for a in ordered if a.identity in keep]
    return kept, earlier.folding([a for a in ordered if a.identity not in keep])
