"""How sure a test accuracy is: a binomial interval on the size of the test set.

An accuracy of 0.97 on 360 images and on 36,000 images are different claims. Each test image is a
Bernoulli trial, so the interval is a binomial one: Wilson's score interval, which unlike the normal
approximation stays inside [0, 1] and keeps close to its 95% coverage near 0 and 1 and on small sets.
It covers the sampling of the test set only; another seed (another training run) moves the figure
by its own amount, which only repeats show.
"""
from __future__ import annotations

import math

Z_95 = 1.959963984540054  # the normal quantile of 0.975: a two-sided 95% interval


def wilson_interval(accuracy: float | None, samples: int | None, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``accuracy`` observed on ``samples`` trials; NaN bounds
    when there is no accuracy or no sample."""
    if accuracy is None or samples is None or samples <= 0 or not math.isfinite(accuracy):
        return math.nan, math.nan
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"an accuracy between 0 and 1, not {accuracy}")
    n = float(samples)
    z2 = z * z
    centre = (accuracy + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(accuracy * (1 - accuracy) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # the interval always holds the observed accuracy; min/max only undo rounding at 0 and 1
    return min(accuracy, max(0.0, centre - half)), max(accuracy, min(1.0, centre + half))
