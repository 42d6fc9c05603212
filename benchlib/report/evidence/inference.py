"""One inference per comparison of runs: a t interval on the logs of the runs' figures, its verdict read off
that interval, and the smallest change its run count can tell.

A run (a fresh process) gives one figure per metric (the median of its samples; a throughput's, its inputs over
its summed seconds). The log of a run's figure
varies about its side's mean with a spread ``s``; the comparison's estimate is the difference of the sides'
mean logs, so its ratio is the quotient of the sides' geometric means (``figure_a``, ``figure_b``: the figures
printed beside it divide out to it). Its interval is Student's t on that difference, and its test is the same
t: an interval that excludes 1 and a p under the level are one statement, never two that can disagree.

``s`` comes from the runs themselves (Welch, each side its own spread) or, where this machine's noise floor
measured the metric (``benchlib calibrate``), pooled with the floor's runs: two or three runs a side estimate
a spread poorly, and the floor's ten or so runs of the same machine steady it (and let one run a side be
judged at all). A table of many comparisons controls its false claims as a whole: each interval is taken at
``1 - ALPHA / family`` (Bonferroni over the ``family`` comparisons of the table), so identical sides make any
claim in at most ALPHA of tables.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..words.sentences import undecided
from .stats import (
    ALPHA,
    CONFIDENCE,
    MIN_BOOTSTRAP,
    PRACTICAL_THRESHOLD,
    SEED,
    TARGET_CHANGE,
    Comparison,
    bootstrap_ratio,
    center_of,
    clean,
    exact_test,
    repeat_hint,
    undecided_note,
    verdict_of,
)

POWER = 0.80  # the minimum detectable change is the one caught this often
MAX_RUNS_ADVISED = 50  # "N runs a side would tell X%" looks no further


@dataclass(frozen=True)
class Spread:
    """A metric's run-to-run spread on a machine: the standard deviation of a run figure's log, and the degrees
    of freedom behind it (this machine's noise floor: ``instruments.run_to_run.log_spread``)."""

    log_sd: float
    df: int


def _logs(figures: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(figures, dtype=float).ravel()
    return np.log(x[np.isfinite(x) & (x > 0)])


def _quantile(family: int, df: float) -> float:
    return float(stats.t.ppf(1 - ALPHA / max(1, family) / 2, df))


def detectable(se_log: float, df: float, family: int, threshold: float = PRACTICAL_THRESHOLD) -> float:
    """The smallest change (a fraction) caught with probability ``POWER`` at this standard error of the log
    ratio: never under ``threshold``, below which nothing is claimed."""
    if not (math.isfinite(se_log) and df > 0):
        return math.nan
    return max(threshold, math.exp((_quantile(family, df) + float(stats.t.ppf(POWER, df))) * se_log) - 1.0)


def runs_to_tell(change: float, log_sd: float, floor_df: int, family: int,
                 threshold: float = PRACTICAL_THRESHOLD) -> int | None:
    """The fewest runs a side whose comparison would tell ``change`` (a fraction), at this spread; None when
    not within ``MAX_RUNS_ADVISED``."""
    if not (math.isfinite(log_sd) and log_sd > 0):
        return None
    for n in range(2, MAX_RUNS_ADVISED + 1):
        df = 2 * (n - 1) + floor_df
        if detectable(log_sd * math.sqrt(2 / n), df, family, threshold) <= change:
            return n
    return None


def compare_runs(runs_a: Sequence[Sequence[float] | np.ndarray], runs_b: Sequence[Sequence[float] | np.ndarray], *,
                 higher_is_better: bool, timing: bool = True, floor: Spread | None = None, family: int = 1,
                 threshold: float = PRACTICAL_THRESHOLD, center: str = "median") -> Comparison:
    """Side ``a`` against side ``b``, each a list of runs (a run: its raw samples, or one figure); ``ratio`` > 1
    means ``a`` is better. Each run's figure is its ``center`` (``stats.center_of``: the median, or a
    throughput's rate); see the module for the interval, test and verdict. One run a side is judged only with a
    ``floor``; otherwise the comparison is ``unknown`` (the caller falls back to the steps)."""
    fa = np.asarray([float(center_of(np.asarray(r, dtype=float), center)) for r in runs_a if np.size(r)])
    fb = np.asarray([float(center_of(np.asarray(r, dtype=float), center)) for r in runs_b if np.size(r)])
    return infer(fa, fb, higher_is_better=higher_is_better, timing=timing, floor=floor, family=family,
                 threshold=threshold)


def infer(figures_a: np.ndarray, figures_b: np.ndarray, *, higher_is_better: bool, timing: bool = True,
          floor: Spread | None = None, family: int = 1, threshold: float = PRACTICAL_THRESHOLD) -> Comparison:
    """The comparison of two sides' run figures (one per run); see :func:`compare_runs`."""
    la, lb = _logs(figures_a), _logs(figures_b)
    na, nb = int(la.size), int(lb.size)
    level = "runs" if min(na, nb) >= 2 else "floor"
    base = Comparison(math.nan, math.nan, math.nan, math.nan, "unknown", na, nb, level=level, runs_a=na, runs_b=nb,
                      family=family)
    usable_floor = floor if floor is not None and floor.df >= 1 and math.isfinite(floor.log_sd) else None
    if na == 0 or nb == 0 or (min(na, nb) < 2 and usable_floor is None):
        return base
    gm_a, gm_b = math.exp(float(la.mean())), math.exp(float(lb.mean()))
    d = float(la.mean() - lb.mean()) * (1 if higher_is_better else -1)  # log of the ratio (> 0: a is better)
    ss = float(((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum())
    if usable_floor is not None:
        df = float(na - 1 + nb - 1 + usable_floor.df)
        s = math.sqrt((ss + usable_floor.df * usable_floor.log_sd ** 2) / df)
        se, test = s * math.sqrt(1 / na + 1 / nb), "t-log, spread pooled with the noise floor"
    else:
        va, vb = float(la.var(ddof=1)), float(lb.var(ddof=1))
        se = math.sqrt(va / na + vb / nb)
        df = (va / na + vb / nb) ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)) if se > 0 else math.inf
        test = "welch-log"
    ratio = math.exp(d)
    words = ("faster", "slower") if timing else ("better", "worse")
    done = dataclasses.replace(base, ratio=ratio, figure_a=gm_a, figure_b=gm_b)
    if se == 0:  # constant sides, no floor: the ratio is exact
        p = 1.0 if d == 0 else 0.0
        return dataclasses.replace(done, ci_low=ratio, ci_high=ratio, p_value=p, test="exact", verdict=verdict_of(
            ratio, ratio, ratio, threshold=threshold, words=words))
    q = _quantile(family, df)
    low, high = math.exp(d - q * se), math.exp(d + q * se)
    advised = runs_to_tell(TARGET_CHANGE, se / math.sqrt(1 / na + 1 / nb), usable_floor.df if usable_floor else 0,
                           family, threshold)
    # the verdict reads the interval alone: the p beside it is the same t (Bonferroni-adjusted), so they agree
    verdict = verdict_of(ratio, low, high, threshold=threshold, words=words)
    note = ""
    if verdict == "inconclusive":
        more = repeat_hint(advised) if advised and advised > max(na, nb) else repeat_hint()
        note = f"{undecided(low, high, threshold)}; {more}"
    return dataclasses.replace(done, ci_low=low, ci_high=high, verdict=verdict, test=test, note=note,
                               p_value=min(1.0, 2 * float(stats.t.sf(abs(d) / se, df)) * max(1, family)),
                               mdc=detectable(se, df, family, threshold), runs_for_target=advised)


def compare(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *, higher_is_better: bool,
            timing: bool = True, confidence: float = CONFIDENCE, threshold: float = PRACTICAL_THRESHOLD,
            seed: int = SEED, center: str = "median") -> Comparison:
    """How side ``a`` compares with side ``b`` from their raw samples (step times, latencies, throughputs...).

    The ratio is c(a) / c(b) where higher is better (throughput, accuracy), c(b) / c(a) where lower is (times,
    memory, energy), so > 1 always means ``a`` is better; c is ``center`` (``stats.center_of``: the median, or a
    throughput's rate). ``timing`` picks the verdict's words: faster/slower for speed, better/worse for anything
    else. From ``MIN_BOOTSTRAP`` values a side the interval and its p are one percentile bootstrap of that
    ratio; under that (a bootstrap of two or three values is far too narrow) the t on the logs of ``inference``.
    The verdict reads the interval.
    """
    xa, xb = clean(a), clean(b)
    n_a, n_b = int(xa.size), int(xb.size)
    first, second = (xa, xb) if higher_is_better else (xb, xa)
    if n_a == 0 or n_b == 0 or np.median(second) <= 0 or np.median(first) < 0:
        return Comparison(math.nan, math.nan, math.nan, math.nan, "unknown", n_a, n_b)
    ratio = float(center_of(first, center) / center_of(second, center))
    if n_a < 2 or n_b < 2:
        return Comparison(ratio, math.nan, math.nan, math.nan, "unknown", n_a, n_b)
    words = ("faster", "slower") if timing else ("better", "worse")
    if min(n_a, n_b) < MIN_BOOTSTRAP and np.all(xa > 0) and np.all(xb > 0) and exact_test(xa, xb) is None:
        few = infer(xa, xb, higher_is_better=higher_is_better, timing=timing, threshold=threshold,
                    family=max(1, round(ALPHA / (1 - confidence))))
        return dataclasses.replace(few, level="steps", runs_a=1, runs_b=1)
    exact = exact_test(first, second)
    if exact is not None:  # constant sides: the ratio is exact
        low = high = ratio
        p_value, test = exact
    else:
        low, high, p_value = bootstrap_ratio(first, second, confidence, seed, center)
        test = "bootstrap"
    verdict = verdict_of(ratio, low, high, threshold=threshold, words=words)
    note = undecided_note(low, high, threshold) if verdict == "inconclusive" else ""
    return Comparison(ratio, low, high, p_value, verdict, n_a, n_b, test=test, note=note,
                      figure_a=float(center_of(xa, center)), figure_b=float(center_of(xb, center)))
