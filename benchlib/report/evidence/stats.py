"""Comparisons that carry their uncertainty: a ratio of medians, its interval, a test, a verdict, and its level.

Every claim a report makes is a comparison (GPU against CPU, AMP against fp32, this commit against the
last). A bare ratio of two medians hides how much of it is noise. The unit of a comparison is the run (a
fresh process): steps of one process share its allocator, thread placement, CPU speed and neighbours, so
the spread that decides whether two configurations differ is the one between processes. Each comparison
says which evidence its verdict rests on (``level``):

- ``runs``: two or more runs a side. Each run gives one figure (the median of its samples); the interval is
  Student's t on the difference of the sides' mean log figures, and its p is that same t (``inference``).
- ``floor``: one run or more a side, and this machine's run-to-run noise floor measured the metric (``benchlib
  calibrate``): the same t, its spread pooled with the floor's runs (which also lets one run a side be judged).
- ``steps``: one run a side and no floor: the steps' own interval (a percentile bootstrap of the medians'
  ratio, its p read off the same replicates; the t on logs under ``MIN_BOOTSTRAP`` values). Steps never give
  a verdict across processes (``inconclusive``) unless both rows were measured in one process (interleaved
  variants), where the process's state is shared and the steps are the evidence.

Every level has one procedure for its interval and its p, and the verdict reads the interval alone:
``faster`` (``better``) / ``slower`` (``worse``) when it excludes 1 and the change is at least the practical
threshold (``PRACTICAL_THRESHOLD``); ``same`` only when the whole interval lies within the threshold of 1 (no
change that matters is left possible); ``inconclusive`` otherwise (an interval that holds 1 but also a change
beyond the threshold rules out nothing), with the reason and what would settle it; ``unknown`` without data.
The same rule at every level: runs, floor, steps and test set.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from ...instruments.run_to_run import bounds
from ..words.sentences import bounds_text, detectable, ratio_interval, undecided
from .floors import apart_text

CONFIDENCE = 0.95
ALPHA = 0.05
MIN_BOOTSTRAP = 10  # values a side from which a percentile bootstrap's interval is not too narrow
PRACTICAL_THRESHOLD = 0.02  # a change under this is "same", however sure
RESAMPLES = 2000
SEED = 0
WORSE = frozenset({"slower", "worse"})
CLAIMS = frozenset({"faster", "slower", "better", "worse"})
# The verdict rule in words, for every page and command that prints a verdict: one sentence, one threshold.
def verdict_rule(threshold: float = PRACTICAL_THRESHOLD) -> str:
    """The verdict rule in words (``verdict_of``): what every legend and headline follows."""
    return (f"faster/slower when the interval excludes 1 and the change is at least {threshold:.0%}; same when the "
            f"whole interval lies within {threshold:.0%} of 1; inconclusive otherwise (the interval holds both no "
            f"change and a change of {threshold:.0%} or more, or excludes 1 but may hold a change under "
            f"{threshold:.0%}); unknown with one sample a side")


VERDICT_RULE = verdict_rule()
SETTLE_REPEATS = 5  # what a "repeat each side N times" hint asks for
TARGET_CHANGE = 0.05  # the change "N runs a side would tell" is said for


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
    level: str = "steps"  # the evidence the verdict rests on: runs, floor, steps (see the module) or test set
    test: str = ""  # behind interval and p alike: welch-log or t-log pooled (runs), bootstrap (steps), exact
    runs_a: int = 1  # fresh processes (rows) behind each side
    runs_b: int = 1
    note: str = ""  # why a verdict is inconclusive and what would settle it
    mdc: float = math.nan  # the smallest change (a fraction) this comparison catches 80% of the time
    family: int = 1  # comparisons in its table: its interval is at 1 - ALPHA / family (Bonferroni)
    figure_a: float = math.nan  # the sides' figures the ratio is the quotient of (geometric means of runs)
    figure_b: float = math.nan
    runs_for_target: int | None = None  # runs a side that would tell TARGET_CHANGE at this spread

    def reach(self) -> str:
        """What this comparison can tell: ``with 3 runs a side, changes under 7% cannot be told here; 8 runs a
        side would tell 5%`` (empty where no spread was measured)."""
        return detectable(self.mdc, self.runs_a, self.runs_b, TARGET_CHANGE, self.runs_for_target)

    def text(self) -> str:
        """``1.23x [1.10, 1.35] faster (runs)``: the ratio, its interval, the verdict and its level, for tables."""
        if not math.isfinite(self.ratio):
            return "–"
        shown = (ratio_interval(self.ratio, self.ci_low, self.ci_high) if math.isfinite(self.ci_low)
                 else f"{self.ratio:.2f}x [n={min(self.n_a, self.n_b)}: no interval]")
        level = f" ({self.level})" if self.level and self.verdict != "unknown" else ""
        return f"{shown} {self.verdict}{level}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


NO_DATA = Comparison(math.nan, math.nan, math.nan, math.nan, "unknown", 0, 0)
_OPPOSITE = {"faster": "slower", "slower": "faster", "better": "worse", "worse": "better"}


def inverted(c: Comparison) -> Comparison:
    """The same comparison seen from the other side: B against A (ratio, interval and verdict turned over)."""
    def over(x: float) -> float:
        return 1.0 / x if math.isfinite(x) and x != 0 else math.nan

    return dataclasses.replace(c, ratio=over(c.ratio), ci_low=over(c.ci_high), ci_high=over(c.ci_low),
                               verdict=_OPPOSITE.get(c.verdict, c.verdict), n_a=c.n_b, n_b=c.n_a,
                               runs_a=c.runs_b, runs_b=c.runs_a)


def clean(values: Sequence[float] | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    return array[np.isfinite(array)]


def within_threshold(ci_low: float, ci_high: float, threshold: float = PRACTICAL_THRESHOLD) -> bool:
    """The whole interval lies within ``threshold`` of 1 (a ratio's band: 1 / (1 + t) .. 1 + t)."""
    return 1.0 / (1.0 + threshold) <= ci_low and ci_high <= 1.0 + threshold


def verdict_of(ratio: float, ci_low: float, ci_high: float, *, threshold: float = PRACTICAL_THRESHOLD,
               words: tuple[str, str] = ("faster", "slower")) -> str:
    """``words[0]``/``words[1]`` when the interval excludes 1 and the change is at least ``threshold``; ``same``
    when the whole interval lies within ``threshold`` of 1; ``inconclusive`` otherwise: the evidence leaves both
    a change that matters and none possible. The interval alone decides: each level's p is read off the same
    procedure, so it cannot say otherwise."""
    if not all(math.isfinite(x) for x in (ratio, ci_low, ci_high)):
        return "unknown"
    excludes_one = ci_high < 1.0 or ci_low > 1.0
    if excludes_one and abs(ratio - 1.0) >= threshold:
        return words[0] if ratio > 1.0 else words[1]
    return "same" if within_threshold(ci_low, ci_high, threshold) else "inconclusive"


def undecided_note(ci_low: float, ci_high: float, threshold: float = PRACTICAL_THRESHOLD) -> str:
    """Why an ``inconclusive`` verdict is one: what its interval leaves possible (``words.sentences``)."""
    return f"{undecided(ci_low, ci_high, threshold)}; {repeat_hint()}"


def exact_test(a: np.ndarray, b: np.ndarray) -> tuple[float, str] | None:
    """(p, "exact") where both sides are constant (p 1 when equal, 0 when not: nothing to test); else None."""
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return (1.0 if a[0] == b[0] else 0.0), "exact"
    return None


# A run's figure from its samples: "median" for a time, a size or a score; "rate" for a throughput, whose samples
# are each timed item's inputs per second: the run's inputs over its summed seconds (the harmonic mean of equal
# items' rates), so a throughput is samples over the sum of timed work, as the row's own column is.
CENTERS = ("median", "rate")


def center_of(x: np.ndarray, center: str = "median", axis: int | None = None) -> Any:
    """The ``center`` (``CENTERS``) of ``x``, along ``axis``."""
    x = np.asarray(x, dtype=float)
    if center == "rate":
        return (x.size if axis is None else x.shape[axis]) / np.sum(1.0 / x, axis=axis)
    return np.median(x, axis=axis)


def _bootstrap_medians(x: np.ndarray, rng: np.random.Generator, resamples: int = RESAMPLES,
                       center: str = "median") -> np.ndarray:
    """``resamples`` bootstrap centers (medians, or rates) of ``x`` (in chunks: a side may hold thousands of
    steps)."""
    chunk = max(1, 2_000_000 // x.size)
    return np.concatenate([center_of(x[rng.integers(0, x.size, size=(min(chunk, resamples - k), x.size))], center,
                                     axis=1) for k in range(0, resamples, chunk)])


def bootstrap_ratio(first: np.ndarray, second: np.ndarray, confidence: float, seed: int,
                    center: str = "median") -> tuple[float, float, float]:
    """The percentile interval of center(first) / center(second) (``center_of``) and its p from the same
    replicates: twice the share of replicates on the far side of 1, scaled to ALPHA as the interval's level is
    (so the interval excludes 1 exactly where p < ALPHA; one procedure, never two that can disagree)."""
    rng = np.random.default_rng(seed)
    reps = _bootstrap_medians(first, rng, center=center) / _bootstrap_medians(second, rng, center=center)
    tail = (1 - confidence) / 2
    low, high = (float(v) for v in np.quantile(reps, [tail, 1 - tail]))
    p = 2 * min(float(np.mean(reps <= 1.0)), float(np.mean(reps >= 1.0)))
    return low, high, min(1.0, p * ALPHA / (1 - confidence))


def _run_medians(run: np.ndarray, rng: np.random.Generator, resamples: int, center: str = "median") -> np.ndarray:
    """``resamples`` bootstrap centers of one run's samples."""
    if run.size == 1 or np.ptp(run) == 0:
        return np.full(resamples, float(run[0]))
    return _bootstrap_medians(run, rng, resamples, center)


def hierarchical_medians(runs: Sequence[np.ndarray], *, resamples: int = RESAMPLES,
                         rng: np.random.Generator, center: str = "median") -> np.ndarray:
    """Bootstrap distribution of a side's figure (the median of its runs' figures, each run's ``center``), runs
    first, then samples.

    Each replicate draws as many runs as there are, with replacement, then each drawn run's own bootstrap
    figure: the spread between processes and inside each one both enter, in that order.
    """
    per_run = np.stack([_run_medians(r, rng, resamples, center) for r in runs])  # (runs, resamples)
    pick = rng.integers(0, len(runs), size=(resamples, len(runs)))
    return np.asarray(np.median(per_run[pick, np.arange(resamples)[:, None]], axis=1))


def repeat_hint(runs: int = SETTLE_REPEATS) -> str:
    return f"repeat each side {runs} times (`repeats: {runs}` in the study, `--repeats {runs}`)"


def judge_single_runs(steps: Comparison, floor: float, *, same_process: bool) -> Comparison:
    """The verdict of a comparison with one run on a side and no noise floor that bounds it, from its steps.

    ``floor`` is how far (in %) two single runs of identical settings may differ on this machine: NaN when not
    measured, or a floor that bounds nothing (a calibration on a busy host). A floor that bounds is pooled
    into the runs' own inference instead (``inference.compare_runs``, level ``floor``). Rows of one process keep
    the steps' verdict (``level="steps"``); rows of different processes are ``inconclusive``.
    """
    if not math.isfinite(steps.ratio) or steps.verdict == "unknown" and not math.isfinite(floor):
        return steps
    if math.isfinite(floor) and not bounds(floor):  # a calibration on a busy host: no bound, so no floor
        why = (f"this machine's noise floor bounds nothing (identical runs may differ {apart_text(floor)}: "
               "calibrated on a busy host)")
        if same_process:
            return dataclasses.replace(steps, level="steps", note=f"steps of one process (interleaved); {why}")
        return dataclasses.replace(steps, verdict="inconclusive" if steps.verdict != "unknown" else "unknown",
                                   level="steps", note=f"1 run a side in different processes and {why}: run "
                                                       f"`benchlib calibrate` on a quiet machine or {repeat_hint()}")
    if same_process:
        note = "steps of one process (interleaved): the comparison leaves out the machine's run-to-run noise"
        if steps.verdict == "inconclusive":
            note = f"{steps.note}; {note}"
        return dataclasses.replace(steps, level="steps", note=note)
    note = ("1 run a side in different processes and no noise floor measured: steps alone cannot tell; run "
            f"`benchlib calibrate` or {repeat_hint()}")
    return dataclasses.replace(steps, verdict="inconclusive" if steps.verdict != "unknown" else "unknown",
                               level="steps", note=note)


def proportion_ratio(acc_a: float, n_a: int, acc_b: float, n_b: int, *, confidence: float = CONFIDENCE,
                     threshold: float = PRACTICAL_THRESHOLD) -> Comparison:
    """Accuracy ``acc_a`` (of ``n_a`` test samples) against ``acc_b``, one training a side: the ratio with its
    log (Katz) interval and the p of the same z on the log ratio (``level="test set"``).

    The interval covers the test set's sampling only, not the spread between trainings (seeds, a machine's
    numerics): ``same`` where it holds 1, and ``inconclusive`` where it does not, since one training a side
    cannot tell a real change from training noise. The sides are taken as independent, which is
    conservative when they share one test set.
    """
    if not (0 < n_a and 0 < n_b and 0 < acc_b and 0 <= acc_a <= 1 and acc_b <= 1):
        return NO_DATA
    ratio = acc_a / acc_b
    words = ("better", "worse")
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    hits_a, hits_b = acc_a * n_a, acc_b * n_b
    # 0.5 added to each cell keeps the interval finite when a side is all right or all wrong (Haldane).
    ha, hb = hits_a + 0.5, hits_b + 0.5
    se = math.sqrt(max(1 / ha - 1 / (n_a + 1), 0.0) + max(1 / hb - 1 / (n_b + 1), 0.0))
    center = math.log(ha / (n_a + 1)) - math.log(hb / (n_b + 1))
    low, high = math.exp(center - z * se), math.exp(center + z * se)
    p_value = 1.0 if se == 0 else float(2 * stats.norm.sf(abs(center) / se))
    verdict = verdict_of(ratio, low, high, threshold=threshold, words=words)
    note = ""
    if verdict == "inconclusive":
        note = (f"the test set's {min(n_a, n_b)} images leave an interval {bounds_text(low, high)} that holds both no "
                f"change and changes beyond {threshold:.0%}; a larger test set or {repeat_hint()} with seeds")
    if verdict in CLAIMS:  # beyond the test set's sampling, but one training cannot tell a change from its seed
        verdict = "inconclusive"
        note = (f"accuracy differs beyond the test set's sampling (the interval {bounds_text(low, high)} excludes "
                "no change), but one training a side "
                f"cannot tell a real change from training noise (same code and seed differed by 4 points across "
                f"two machines); {repeat_hint()} with seeds")
    return Comparison(ratio, low, high, p_value, verdict, n_a, n_b, level="test set", test="z on the log ratio",
                      note=note)


def geometric_mean(ratios: Sequence[float] | np.ndarray, *, confidence: float = CONFIDENCE,
                   seed: int = SEED) -> tuple[float, float, float]:
    """(geometric mean, low, high) of ratios with the bootstrap interval of their logs' mean (NaN bounds under
    2 values): paired rounds vary by process, symmetrically in the log, so their mean is the efficient figure
    where a median of a few dozen wastes a third of them."""
    x = clean(ratios)
    x = np.log(x[x > 0])
    if x.size == 0:
        return math.nan, math.nan, math.nan
    point = float(np.exp(x.mean()))
    if x.size < 2 or np.ptp(x) == 0:
        return (point, point, point) if x.size >= 2 else (point, math.nan, math.nan)
    boot = stats.bootstrap((x,), np.mean, vectorized=True, n_resamples=RESAMPLES, confidence_level=confidence,
                           method="percentile", rng=np.random.default_rng(seed))
    return point, float(np.exp(boot.confidence_interval.low)), float(np.exp(boot.confidence_interval.high))


def spread(values: Sequence[float] | np.ndarray, *, confidence: float = CONFIDENCE,
           seed: int = SEED) -> tuple[float, float, float]:
    """(median, low, high): the median of repeats with its bootstrap interval (NaN bounds under 2 values)."""
    x = clean(values)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    median = float(np.median(x))
    if x.size < 2 or np.ptp(x) == 0:
        return (median, median, median) if x.size >= 2 else (median, math.nan, math.nan)
    boot = stats.bootstrap((x,), np.median, vectorized=True, n_resamples=RESAMPLES, confidence_level=confidence,
                           method="percentile", rng=np.random.default_rng(seed))
    return median, float(boot.confidence_interval.low), float(boot.confidence_interval.high)
