"""Words that cannot contradict their numbers: thousands of drawn comparisons, every sentence checked against the
numbers it was written from (issue 52). Breaking any one sentence function by hand fails this module."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from benchlib.report.evidence.inference import Spread, compare_runs
from benchlib.report.evidence.stats import CLAIMS, undecided_note, verdict_of, within_threshold
from benchlib.report.words.sentences import detectable, percent_interval, ratio_interval, undecided

CASES = 10_000
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _numbers(text: str) -> list[float]:
    return [float(x) for x in NUMBER.findall(text)]


def _draw(rng: np.random.Generator) -> tuple[float, float, float, float]:
    """A ratio and an interval around it: either side of 1, straddling, inside and outside the threshold, some
    exactly at a bound or at 1, some NaN."""
    kind = rng.integers(0, 6)
    threshold = float(rng.choice([0.01, 0.02, 0.05]))
    if kind == 0:
        return math.nan, math.nan, math.nan, threshold
    center = float(np.exp(rng.normal(0, [0.005, 0.03, 0.2, 1.0][rng.integers(0, 4)])))
    half = float(np.exp(rng.uniform(-9, 0.7)))  # half-widths from 0.01% to twofold
    low, high = center * math.exp(-half * rng.uniform(0, 2)), center * math.exp(half * rng.uniform(0, 2))
    if kind == 1:
        low = 1.0  # an interval that ends exactly at no change
    if kind == 2:
        low = high = center  # constant sides: an exact ratio
    return center, min(low, center), max(high, center), threshold


def test_printed_intervals_hold_their_point_and_round_outward():
    rng = np.random.default_rng(52)
    for _ in range(CASES):
        ratio, low, high, _ = _draw(rng)
        for text, scale in ((ratio_interval(ratio, low, high), 1.0), (ratio_interval(ratio, low, high, 3), 1.0),
                            (percent_interval(ratio / 4, low / 4, high / 4), 100 / 4)):
            if not math.isfinite(ratio):
                assert text == "–"
                continue
            point, lo, hi = _numbers(text)
            assert lo <= point <= hi, text
            assert lo <= low * scale + 1e-9 and hi >= high * scale - 1e-9, (text, low, high)


def test_verdicts_and_their_reasons_say_only_what_the_interval_holds():
    rng = np.random.default_rng(53)
    seen = set()
    for _ in range(CASES):
        ratio, low, high, threshold = _draw(rng)
        verdict = verdict_of(ratio, low, high, threshold=threshold)
        seen.add(verdict)
        if not math.isfinite(ratio):
            assert verdict == "unknown"
            continue
        excludes = low > 1.0 or high < 1.0
        if verdict in CLAIMS:
            assert excludes and abs(ratio - 1) >= threshold
            assert (verdict == "faster") == (ratio > 1)
        elif verdict == "same":
            assert within_threshold(low, high, threshold)
        else:
            assert verdict == "inconclusive"
        # the reason an interval gives, whatever the verdict made of it
        said = undecided(low, high, threshold)
        if excludes:
            assert "holds both no change" not in said and "excludes no change" in said, (said, low, high)
        else:
            assert "holds both no change" in said and "excludes" not in said, (said, low, high)
        lo, hi = _numbers(said)[:2]
        assert lo <= low + 1e-9 and hi >= high - 1e-9, (said, low, high)
        assert f"{threshold:.0%}" in said and said in undecided_note(low, high, threshold)
    assert {"faster", "slower", "same", "inconclusive", "unknown"} <= seen


def test_one_inference_its_interval_its_p_and_its_verdict_agree():
    """Drawn comparisons of runs (2-8 a side, with and without a floor, in a table of 1-40): the verdict claims
    exactly when the interval excludes 1 (and the change counts), the adjusted p is under 5% exactly then, the
    ratio is the quotient of the figures beside it, and the smallest detectable change is what was said."""
    rng = np.random.default_rng(54)
    for case in range(CASES // 5):
        na, nb = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        sd = float(np.exp(rng.uniform(-6, -1)))
        shift = float(rng.choice([0.0, 0.0, 0.03, 0.1, -0.2]))
        floor = Spread(float(np.exp(rng.uniform(-6, -1))), int(rng.integers(2, 20))) if rng.random() < 0.5 else None
        family = int(rng.integers(1, 41))
        higher = bool(rng.random() < 0.5)
        a = list(np.exp(rng.normal(0, sd, na)))
        b = list(np.exp(rng.normal(shift, sd, nb)))
        c = compare_runs([[x] for x in a], [[x] for x in b], higher_is_better=higher, floor=floor, family=family)
        if min(na, nb) < 2 and floor is None:
            assert c.verdict == "unknown" and math.isnan(c.ratio)
            continue
        quotient = c.figure_a / c.figure_b if higher else c.figure_b / c.figure_a
        assert c.ratio == pytest.approx(quotient, rel=1e-12), case
        assert c.ci_low <= c.ratio <= c.ci_high and c.family == family
        excludes = c.ci_low > 1.0 or c.ci_high < 1.0
        if c.test != "exact":
            assert (c.p_value < 0.05) == excludes or abs(c.p_value - 0.05) < 1e-9, (c, case)
            assert c.mdc >= 0.02 and ("cannot be told" in c.reach())
            assert f"{c.mdc:.0%}" in c.reach()
        assert (c.verdict in CLAIMS) == (excludes and abs(c.ratio - 1) >= 0.02), c
        if c.verdict == "inconclusive":
            assert ("holds both no change" in c.note) == (not excludes), c.note


def test_the_detectable_change_sentence_says_its_numbers():
    rng = np.random.default_rng(55)
    for _ in range(CASES // 10):
        mdc, runs, advised = float(rng.uniform(0.02, 0.5)), int(rng.integers(1, 9)), int(rng.integers(2, 50))
        said = detectable(mdc, runs, runs, 0.05, advised)
        assert said.startswith(f"with {runs} run") and f"changes under {mdc:.0%} cannot be told" in said
        assert (f"{advised} runs a side would tell 5%" in said) == (mdc > 0.05)
    assert detectable(math.nan, 3, 3) == ""


def test_a_steps_comparison_says_why_it_is_inconclusive_from_its_own_numbers():
    """Few values a side: a percentile bootstrap may exclude 1 where the test beside it finds nothing; the reason
    then names the test, never "holds no change" for an interval that excludes 1."""
    from benchlib.report.evidence.inference import compare

    rng = np.random.default_rng(56)
    for _ in range(CASES // 20):
        n = int(rng.integers(2, 9))
        a = np.exp(rng.normal(0, 0.1, n))
        b = np.exp(rng.normal(float(rng.choice([0.0, 0.05, 0.2])), 0.1, n))
        c = compare(a, b, higher_is_better=False)
        if c.verdict != "inconclusive":
            continue
        excludes = c.ci_low > 1.0 or c.ci_high < 1.0
        assert ("holds both no change" in c.note) == (not excludes), (c.note, c.ci_low, c.ci_high)
        if excludes:
            assert "excludes no change" in c.note
