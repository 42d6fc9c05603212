"""How far fresh runs of identical settings differ: the noise floor's bound.

A calibration (``pipeline.calibrate``) keeps one figure per fresh process in a ``store.noise_floor.NoiseFloor``,
one set per thread count. From them follows how far two new single runs may land apart by noise alone
(``floor_pct``), which the report uses to decide what one run a side can claim.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
from scipy import stats

from ..store.noise_floor import NoiseFloor

# The floor's prediction bound: 99%, not 95%. A calibration takes two minutes of back-to-back runs, while the
# comparisons it judges are runs minutes or days apart, and several metrics of one run are judged at once: at
# 95%, 4 of 30 identical-settings comparisons (5 pairs of single runs, 6 metrics) were claimed, 6.5% and 8.1%
# apart against a 6.4% floor (benchmarks/false_alarms.py).
FLOOR_CONFIDENCE = 0.99
# A floor from 100% up says two runs of identical settings may land twofold apart or more by noise alone: it bounds
# no comparison a benchmark makes, and says only that the calibration ran while the host was busy (one VM's
# calibration beside other test suites gave 545%, and 190,000% for inference throughput). Such a floor is not
# used as a bound, and a report says why instead of printing it as one.
NO_BOUND_PCT = 100.0


def floor_pct(groups: Sequence[Iterable[float]], *, confidence: float = FLOOR_CONFIDENCE) -> float:
    """How far apart, in %, two single runs of identical settings may land by noise alone on this machine.

    ``groups`` holds one set of run figures per setting (a step median or a throughput per fresh process;
    the calibration's thread counts). The log of a run's figure varies about its setting's mean with one
    spread ``s``, pooled over the groups (each centred on its own mean, so a setting's level is no spread),
    and the log ratio of two new single runs varies with ``s * sqrt(2)``. With the pooled estimate's
    ``N - groups`` degrees of freedom behind it, the two-sided prediction bound is Student's ``t`` times
    that. Pooling is why it is one floor for the machine: five runs per thread count alone give ``t`` = 4.6
    at 99%, and one stray run in five would set the floor on its own; ten runs pooled give 3.4 and share
    the stray run's weight. A ratio of two single runs beyond ``1 + floor_pct / 100`` (either way) is not
    run-to-run noise at the ``confidence`` level. NaN under two degrees of freedom.
    """
    spread_log, df = log_spread(groups)
    if df < 2:
        return math.nan
    t = float(stats.t.ppf(0.5 + confidence / 2, df=df))
    return (math.exp(t * spread_log * math.sqrt(2)) - 1.0) * 100.0


def log_spread(groups: Sequence[Iterable[float]]) -> tuple[float, int]:
    """(the standard deviation of a run figure's log, its degrees of freedom), pooled over ``groups`` (one set of
    run figures per setting, each about its own mean); (NaN, 0) with no group of two."""
    logs = [np.log(x) for x in (_positive(g) for g in groups) if x.size >= 2]
    df = sum(x.size - 1 for x in logs)
    if df < 1:
        return math.nan, 0
    return math.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in logs) / df), df


def bounds(floor: float) -> bool:
    """Whether a floor (in %) bounds anything: measured (finite) and under ``NO_BOUND_PCT``."""
    return math.isfinite(floor) and floor < NO_BOUND_PCT


def floor_groups(floors: Iterable[NoiseFloor], metric: str) -> list[tuple[float, ...]]:
    """The run figures of ``metric`` per thread count of the given floors (each calibration once, however many
    folders hold a copy of it)."""
    unique = list({(f.machine, f.device, f.measured_utc): f for f in floors}.values())
    return [tuple(v) for f in unique for per in f.values.values() if (v := per.get(metric))]


def floor_of(floors: Iterable[NoiseFloor], metric: str) -> float:
    """``floor_pct`` of ``metric`` from every thread count of the given floors."""
    return floor_pct(floor_groups(floors, metric))


def floor_pcts(floor: NoiseFloor) -> dict[str, float | None]:
    """``{metric: floor %}`` rounded to 0.1% (None where too few runs), as the manifest keeps it."""
    metrics = dict.fromkeys(m for per in floor.values.values() for m in per)
    return {m: (round(x, 1) if math.isfinite(x := floor_of([floor], m)) else None) for m in metrics}


def _positive(values: Iterable[float]) -> np.ndarray:
    x = np.asarray(list(values), dtype=float).ravel()
    return np.asarray(x[np.isfinite(x) & (x > 0)])
