"""Timing samples and their statistics: median, IQR, percentiles with their intervals, the noise flag.

A measurement keeps its raw samples; median, IQR, percentiles and the noise flag derive from them
(the idea of ``torch.utils.benchmark.Measurement``). No torch here: a report reads these figures and
thresholds without importing it.

A percentile is published only with a distribution-free interval from order statistics: how many
samples fall below the true q-th percentile is binomial(n, q) whatever the distribution, so the ranks
of the interval follow from n and q alone, and a p99 of 50 samples (its second-largest sample) is
refused rather than printed.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

NOISY_IQR_OVER_MEDIAN = 0.10
CONFIDENCE = 0.95
# A percentile whose 95% interval spans more than this share of its value is not published: its samples
# do not pin it down better than to a factor of about 1.5, and any figure printed for it would mislead.
MAX_RELATIVE_WIDTH = 0.5


def min_samples_for(q: float, confidence: float = CONFIDENCE) -> int:
    """The fewest samples from which a two-sided ``confidence`` interval of the q-th percentile exists.

    The widest interval n samples offer is [smallest, largest]; it misses the percentile only when no
    sample, or every sample, falls below it: probability (1 - q)^n + q^n. p50 needs 6, p90 29, p99 299.
    """
    p = _fraction(q)
    n = 2
    while p**n + (1 - p) ** n > 1 - confidence + 1e-12:
        n += 1
    return n


def _fraction(q: float) -> float:
    if not 0 < q < 100:
        raise ValueError(f"a percentile strictly between 0 and 100, not {q}")
    return q / 100.0


@lru_cache(maxsize=256)
def order_statistic_ranks(n: int, q: float, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks (l, u) whose samples bracket the q-th percentile with probability >= ``confidence``.

    With B ~ binomial(n, q) the number of samples below the percentile (any continuous distribution),
    x_(l) <= percentile < x_(u) exactly when l <= B < u. Of the pairs that reach ``confidence`` the one
    spanning the fewest ranks is kept (ties: the higher coverage, then the one centred nearer n q).
    None when n samples are too few for any pair (see :func:`min_samples_for`).
    """
    p = _fraction(q)
    if n < 2:
        return None
    cdf = stats.binom.cdf(np.arange(n + 1), n, p)  # cdf[k] = P(B <= k)
    lows = np.arange(1, n)  # l = 1 .. n-1
    below = cdf[lows - 1]  # P(B < l)
    # smallest u - 1 in [0, n - 1] with P(B <= u - 1) - P(B < l) >= confidence
    k = np.searchsorted(cdf[:n], below + confidence - 1e-12, side="left")
    valid = (k < n) & (k + 1 > lows)
    if not valid.any():
        return None
    lows, highs = lows[valid], k[valid] + 1
    coverage = cdf[highs - 1] - below[valid]
    off_centre = np.abs((lows + highs) / 2 - (n * p + 0.5))
    best = np.lexsort((off_centre, -coverage, highs - lows))[0]
    return int(lows[best]), int(highs[best])


@dataclass(frozen=True)
class Percentile:
    """A percentile as published: its value only when its interval exists and is narrow enough."""

    q: float
    value: float  # NaN when not published (``status`` says why)
    low: float
    high: float
    n: int
    needed: int
    status: str  # "ok", "too few samples (n=50, p99 needs 299)" (not published) or "wide interval (...)" (given)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Samples:
    """Raw samples of one figure (seconds unless ``unit`` says otherwise)."""

    values: tuple[float, ...]
    unit: str = "s"

    @classmethod
    def of(cls, values: Sequence[float], unit: str = "s") -> Samples:
        return cls(tuple(float(v) for v in values), unit)

    @property
    def n(self) -> int:
        return len(self.values)

    def percentile(self, q: float) -> float:
        """The q-th percentile (linear interpolation); NaN when there are no samples."""
        return float(np.percentile(self.values, q)) if self.values else math.nan

    def percentile_interval(self, q: float, confidence: float = CONFIDENCE) -> tuple[float, float]:
        """A distribution-free ``confidence`` interval of the q-th percentile; NaN bounds when too few samples."""
        ranks = order_statistic_ranks(self.n, q, confidence)
        if ranks is None:
            return math.nan, math.nan
        ordered = np.sort(self.values)
        return float(ordered[ranks[0] - 1]), float(ordered[ranks[1] - 1])

    def judged_percentile(self, q: float, max_relative_width: float = MAX_RELATIVE_WIDTH) -> Percentile:
        """The q-th percentile with its interval: NaN and the reason without enough samples for an interval;
        marked ``wide interval`` (and given) where the interval is wider than ``max_relative_width`` of it."""
        needed = min_samples_for(q)
        low, high = self.percentile_interval(q)
        value = self.percentile(q)
        label = f"p{q:g}"
        if self.n < needed:
            return Percentile(q, math.nan, low, high, self.n, needed,
                              f"too few samples (n={self.n}, {label} needs {needed})")
        width = (high - low) / value if value > 0 else math.inf
        if not width <= max_relative_width:  # a busy host's figure: given with its interval and marked, not withheld
            return Percentile(q, value, low, high, self.n, needed,
                              f"wide interval ({width:.0%} of the value > {max_relative_width:.0%})")
        return Percentile(q, value, low, high, self.n, needed, "ok")

    @property
    def median(self) -> float:
        return self.percentile(50)

    @property
    def iqr(self) -> float:
        return self.percentile(75) - self.percentile(25) if self.values else math.nan

    @property
    def total(self) -> float:
        return float(sum(self.values))

    @property
    def noisy(self) -> bool:
        """True when IQR/median exceeds 10%: the figure should not be trusted without repeats."""
        med = self.median
        return bool(self.values) and med > 0 and self.iqr / med > NOISY_IQR_OVER_MEDIAN
