"""Comparisons that carry their uncertainty: a ratio of medians, its bootstrap interval, a rank test, a verdict.

Every claim a report makes is a comparison (GPU against CPU, AMP against fp32, this commit against the
last). A bare ratio of two medians hides how much of it is noise; here each ratio comes from the raw
samples behind the two figures: a seeded bootstrap interval of the ratio of medians (scipy's percentile
bootstrap, each side resampled apart, 95% by default), a test of "is there a difference at all", and a
verdict: ``faster`` (or ``better``) / ``slower`` (``worse``) when the interval excludes 1, the change is at
least the practical threshold (2%) and the test finds a difference (p < 0.05), else ``same``. With fewer
than two samples a side there is no interval and the verdict is ``unknown``: the ratio stands alone.

The test is Mann-Whitney's U where each side has at least four values. With three or fewer a rank test
cannot reach p < 0.05 at all (three against three, fully separated, gives p = 0.1), while a percentile
bootstrap of so few values is too narrow: three runs a side on a machine whose speed drifted 15% between
them were called "faster". There the test is Welch's t on the logarithms (ratios are multiplicative), which
a large, clean difference passes and a drift as large as the runs' own spread does not.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 0.05
MIN_RANK_TEST = 4  # values a side for Mann-Whitney to be able to reach p < ALPHA
PRACTICAL_THRESHOLD = 0.02  # a change under 2% is "same", however sure
RESAMPLES = 2000
SEED = 0
VERDICTS = ("faster", "slower", "better", "worse", "same", "unknown")
WORSE = frozenset({"slower", "worse"})


@dataclass(frozen=True)
class Comparison:
    """``ratio`` > 1: side A is better (faster, smaller, more accurate) than side B by that factor."""

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    verdict: str
    n_a: int
    n_b: int
    level: str = "samples"  # what was resampled: "samples" of one run a side, or "runs" (repeats' figures)
    test: str = ""  # behind p_value: "mann-whitney", "welch-log" (three or fewer a side), "exact" (constant sides)

    def text(self) -> str:
        """``1.23x [1.10, 1.35] faster``: the ratio, its interval and the verdict, for tables."""
        if not math.isfinite(self.ratio):
            return "–"
        interval = (f" [{self.ci_low:.2f}, {self.ci_high:.2f}]" if math.isfinite(self.ci_low)
                    else f" [n={min(self.n_a, self.n_b)}: no interval]")
        return f"{self.ratio:.2f}x{interval} {self.verdict}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


NO_DATA = Comparison(math.nan, math.nan, math.nan, math.nan, "unknown", 0, 0)


def _clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    return array[np.isfinite(array)]


def _median_ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.median(a, axis=axis) / np.median(b, axis=axis))


def verdict_of(ratio: float, ci_low: float, ci_high: float, *, p_value: float = 0.0,
               threshold: float = PRACTICAL_THRESHOLD, words: tuple[str, str] = ("faster", "slower")) -> str:
    """``words[0]``/``words[1]`` when the interval excludes 1, the change is at least ``threshold`` and the
    test found a difference (``p_value`` < 0.05)."""
    if not all(math.isfinite(x) for x in (ratio, ci_low, ci_high)):
        return "unknown"
    if ci_low <= 1.0 <= ci_high or abs(ratio - 1.0) < threshold or not p_value < ALPHA:
        return "same"
    return words[0] if ratio > 1.0 else words[1]


def difference_test(a: np.ndarray, b: np.ndarray) -> tuple[float, str]:
    """(p value, test name) of "a and b differ": Mann-Whitney U, or Welch's t on logs under four values a side.

    ``compare`` settles two constant sides before calling this, so a side here always varies or the other does.
    """
    if min(a.size, b.size) >= MIN_RANK_TEST or np.any(a <= 0) or np.any(b <= 0):  # logs need positive values
        return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue), "mann-whitney"
    return float(stats.ttest_ind(np.log(a), np.log(b), equal_var=False).pvalue), "welch-log"


def compare(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *, higher_is_better: bool,
            timing: bool = True, confidence: float = CONFIDENCE, threshold: float = PRACTICAL_THRESHOLD,
            seed: int = SEED) -> Comparison:
    """How side ``a`` compares with side ``b`` from their raw samples (step times, latencies, throughputs...).

    The ratio is median(a) / median(b) where higher is better (throughput, accuracy), median(b) / median(a)
    where lower is (times, memory, energy), so > 1 always means ``a`` is better. ``timing`` picks the
    verdict's words: faster/slower for speed, better/worse for anything else.
    """
    xa, xb = _clean(a), _clean(b)
    n_a, n_b = int(xa.size), int(xb.size)
    first, second = (xa, xb) if higher_is_better else (xb, xa)
    if n_a == 0 or n_b == 0 or np.median(second) <= 0 or np.median(first) < 0:
        return Comparison(math.nan, math.nan, math.nan, math.nan, "unknown", n_a, n_b)
    ratio = float(np.median(first) / np.median(second))
    if n_a < 2 or n_b < 2:
        return Comparison(ratio, math.nan, math.nan, math.nan, "unknown", n_a, n_b)
    if np.ptp(first) == 0 and np.ptp(second) == 0:  # constant sides: the ratio is exact
        low = high = ratio
        p_value, test = (1.0 if first[0] == second[0] else 0.0), "exact"
    else:
        boot = stats.bootstrap((first, second), _median_ratio, vectorized=True, paired=False,
                               n_resamples=RESAMPLES, confidence_level=confidence, method="percentile",
                               rng=np.random.default_rng(seed))
        low, high = float(boot.confidence_interval.low), float(boot.confidence_interval.high)
        p_value, test = difference_test(xa, xb)
    words = ("faster", "slower") if timing else ("better", "worse")
    verdict = verdict_of(ratio, low, high, p_value=p_value, threshold=threshold, words=words)
    return Comparison(ratio, low, high, p_value, verdict, n_a, n_b, test=test)


def spread(values: Sequence[float] | np.ndarray, *, confidence: float = CONFIDENCE,
           seed: int = SEED) -> tuple[float, float, float]:
    """(median, low, high): the median of repeats with its bootstrap interval (NaN bounds under 2 values)."""
    x = _clean(values)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    median = float(np.median(x))
    if x.size < 2 or np.ptp(x) == 0:
        return (median, median, median) if x.size >= 2 else (median, math.nan, math.nan)
    boot = stats.bootstrap((x,), np.median, vectorized=True, n_resamples=RESAMPLES, confidence_level=confidence,
                           method="percentile", rng=np.random.default_rng(seed))
    return median, float(boot.confidence_interval.low), float(boot.confidence_interval.high)


def floor_pct(runs_a: Sequence[float] | np.ndarray, runs_b: Sequence[float] | np.ndarray | None = None, *,
              confidence: float = CONFIDENCE) -> float:
    """How far apart, in %, a single run like ``runs_a`` and one like ``runs_b`` may land by noise alone.

    ``runs_a`` and ``runs_b`` are one figure per fresh process of identical settings (a step median, a
    throughput), e.g. the calibration's runs at the thread counts of the two sides; ``runs_b`` defaults to
    ``runs_a`` (two runs of one setting). The log of a run's figure varies with spread ``s`` (estimated
    from the runs), so the log ratio of two new runs varies with ``sqrt(s_a**2 + s_b**2)``; with the
    fewer runs' ``n - 1`` degrees of freedom behind the estimate, its two-sided prediction bound is
    Student's ``t`` times that. A ratio of two single runs beyond ``1 + floor_pct / 100`` (either way) is
    not run-to-run noise at the ``confidence`` level. NaN under three runs a side.
    """
    xa = _clean(runs_a)
    xb = xa if runs_b is None else _clean(runs_b)
    xa, xb = xa[xa > 0], xb[xb > 0]
    if min(xa.size, xb.size) < 3:
        return math.nan
    spread_log = math.hypot(float(np.std(np.log(xa), ddof=1)), float(np.std(np.log(xb), ddof=1)))
    t = float(stats.t.ppf(0.5 + confidence / 2, df=min(xa.size, xb.size) - 1))
    return (math.exp(t * spread_log) - 1.0) * 100.0
