"""Test accuracy comes with a binomial (Wilson) 95% interval on the size of the test set."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from benchlib.instruments.accuracy import wilson_interval
from benchlib.report.display import pages
from benchlib.report.tables import headline
from benchlib.report.words import fmt
from benchlib.run.columns import accuracy_columns
from benchlib.store import schema


@pytest.mark.parametrize(("correct", "n"), [(334, 360), (360, 360), (0, 360), (5, 10), (1, 1), (9_000, 10_000)])
def test_wilson_matches_scipy(correct, n):
    expected = stats.binomtest(correct, n).proportion_ci(0.95, method="wilson")
    low, high = wilson_interval(correct / n, n)
    assert low == pytest.approx(expected.low, abs=1e-12) and high == pytest.approx(expected.high, abs=1e-12)
    assert 0.0 <= low <= correct / n <= high <= 1.0


def test_the_interval_covers_the_true_accuracy_in_about_95_percent_of_test_sets():
    """Seeded test sets of 360 images (the default study's) from a model that is right 95% of the time."""
    rng = np.random.default_rng(7)
    truth, n, draws = 0.95, 360, 4000
    covered = [low <= truth <= high for low, high in (wilson_interval(k / n, n) for k in rng.binomial(n, truth, draws))]
    assert 0.93 <= float(np.mean(covered)) <= 0.975


def test_a_smaller_test_set_gives_a_wider_interval():
    small, large = wilson_interval(0.93, 360), wilson_interval(0.93, 36_000)
    assert small[1] - small[0] > 5 * (large[1] - large[0])
    assert 0.89 < small[0] < 0.90 and 0.95 < small[1] < 0.96  # 93% of 360 images: about +-2.6 points


def test_no_accuracy_no_interval():
    assert all(math.isnan(v) for v in wilson_interval(None, 360) + wilson_interval(0.5, 0))
    assert accuracy_columns(None, 256) == {"test_accuracy": None, "test_accuracy_ci_low": None,
                                           "test_accuracy_ci_high": None}
    row = accuracy_columns(0.93, 360)
    assert set(row) <= set(schema.COLUMNS)
    assert all(schema.COLUMNS[c].kind == "number" for c in row)
    with pytest.raises(ValueError):
        wilson_interval(1.5, 10)


def test_accuracy_reads_with_its_interval_where_the_report_shows_it():
    low, high = wilson_interval(0.93, 360)
    assert fmt.accuracy_text(0.93, low, high) == "93.0% [89.9, 95.2]"
    assert fmt.accuracy_text(0.93) == "93.0%" and fmt.accuracy_text(None, low, high) == fmt.MISSING
    row = {"batch_size": 64, "status": "ok", "hardware": "cpu", "test_accuracy": 0.93, "test_accuracy_ci_low": low,
           "test_accuracy_ci_high": high}
    assert pages.pair_results([row]).data.iloc[0]["test accuracy"] == "93.0% [89.9, 95.2]"
    rows = pd.DataFrame([{**row, "study": "s", "machine": "m", "model": "resnet18", "variant": "default",
                          "run_id": "a__seed0"}])
    assert headline.headline_table(rows).table.iloc[0]["test accuracy"] == "93.0% [89.9, 95.2]"
