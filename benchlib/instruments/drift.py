"""Whether the machine's own speed changed while a run was timed: identical steps that drift together in time.

Every timed training step of a run does the same work on the same device. Step-to-step jitter (a page
fault, an interrupt) is independent from one step to the next; a change of the machine's own speed
(other tenants of a shared host on the sibling hyperthread or the memory bus, a clock that moves, thermal
throttling) lasts seconds and makes neighbouring steps alike. Neither the process list nor the
hypervisor's steal counter shows it, but the order of the steps does:

- ``autocorr``: the lag-1 autocorrelation of the step times in the order they ran;
- ``p_value``: how often the same times in a shuffled order (a seeded permutation test) correlate at
  least as much: small when the order matters, i.e. when the speed moved during the run;
- ``drift_pct``: how much it moved, the range of the medians of consecutive blocks of steps as a
  percentage of the run's median.

A run whose steps are serially correlated (p < 0.01) and drift by at least 5% (the run-to-run stability
goal) ran on a machine whose speed changed under it: the spread of repeated runs there is of that order,
whatever the harness does, and a comparison needs repeats on both sides. Pure computation: it reads no
clock and no file.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_STEPS = 10  # under this, an autocorrelation says nothing
BLOCKS = 5
ALPHA = 0.01
DRIFT_THRESHOLD_PCT = 5.0  # the stability goal: a drift under it is within what a comparison tolerates
RESAMPLES = 2000
PERMUTATIONS_PER_BATCH = 200
SEED = 0


def lag1_autocorr(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Lag-1 autocorrelation along ``axis`` (vectorized for scipy's permutation test)."""
    centred = x - x.mean(axis=axis, keepdims=True)
    head = np.take(centred, np.arange(1, centred.shape[axis]), axis=axis)
    tail = np.take(centred, np.arange(0, centred.shape[axis] - 1), axis=axis)
    return np.asarray((head * tail).sum(axis=axis) / (centred * centred).sum(axis=axis))


@dataclass(frozen=True)
class Drift:
    """How the speed of identical steps moved during one run (None: too few steps, or all equal)."""

    drift_pct: float | None
    autocorr: float | None
    p_value: float | None
    steps: int
    threshold_pct: float = DRIFT_THRESHOLD_PCT

    @property
    def drifted(self) -> bool | None:
        """Serially correlated steps whose speed moved by at least the threshold; None when unmeasurable."""
        if self.p_value is None or self.drift_pct is None:
            return None
        return self.p_value < ALPHA and self.drift_pct >= self.threshold_pct

    def describe(self) -> str | None:
        """The finding in words for a row and a warning; None when the speed held."""
        if not self.drifted:
            return None
        return (f"the step time of identical steps moved by {self.drift_pct:.0f}% during the run and neighbouring "
                f"steps were alike (lag-1 autocorrelation {self.autocorr:.2f}, p={self.p_value:.3g}): the machine's "
                "own speed changed under the run")


def measure(step_s: Sequence[float], *, threshold_pct: float = DRIFT_THRESHOLD_PCT, seed: int = SEED) -> Drift:
    """The drift of one run's timed steps, taken in the order they ran."""
    x = np.asarray(step_s, dtype=float)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n < MIN_STEPS or float(np.median(x)) <= 0:
        return Drift(None, None, None, n, threshold_pct)
    blocks = [float(np.median(b)) for b in np.array_split(x, min(BLOCKS, n // 2))]
    drift_pct = 100.0 * (max(blocks) - min(blocks)) / float(np.median(x))
    if np.ptp(x) == 0:  # region-timed steps (one figure spread evenly): no order to read
        return Drift(drift_pct, None, None, n, threshold_pct)
    # in batches: a run of thousands of steps would otherwise hold every permutation at once
    test = stats.permutation_test((x,), lag1_autocorr, permutation_type="pairings", vectorized=True,
                                  n_resamples=RESAMPLES, batch=PERMUTATIONS_PER_BATCH, alternative="greater",
                                  rng=np.random.default_rng(seed))
    return Drift(drift_pct, float(test.statistic), float(test.pvalue), n, threshold_pct)
