"""Latency percentiles are published only with enough samples and a narrow distribution-free interval."""
from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats
from torch import nn

from benchlib.engine.inference import measure_latency
from benchlib.instruments.samples import (
    MAX_RELATIVE_WIDTH,
    Samples,
    min_samples_for,
    order_statistic_ranks,
)
from benchlib.report.display import pages
from benchlib.report.tables import headline
from benchlib.report.words import fmt
from benchlib.run.columns import measured_row, percentile_columns
from benchlib.store import schema


def _coverage(n: int, q: float, ranks: tuple[int, int]) -> float:
    """P(l <= B < u) for B ~ binomial(n, q/100): the exact coverage of [x_(l), x_(u)]."""
    low, high = ranks
    return float(stats.binom.cdf(high - 1, n, q / 100) - stats.binom.cdf(low - 1, n, q / 100))


def test_how_many_samples_each_percentile_needs():
    assert [min_samples_for(q) for q in (50, 90, 99)] == [6, 29, 299]
    for q in (50, 90, 99):
        n = min_samples_for(q)
        assert order_statistic_ranks(n - 1, q) is None
        assert order_statistic_ranks(n, q) is not None


@pytest.mark.parametrize("q", [10, 50, 90, 95, 99])
def test_ranks_reach_95_percent_and_hold_the_point_estimate(q):
    for n in [min_samples_for(q), min_samples_for(q) + 1, 100, 299, 300, 1000, 5000]:
        ranks = order_statistic_ranks(n, q)
        if ranks is None:
            assert n < min_samples_for(q)
            continue
        low, high = ranks
        assert 1 <= low < high <= n
        assert _coverage(n, q, ranks) >= 0.95 - 1e-9
        position = 1 + (n - 1) * q / 100  # numpy's linear interpolation reads between these two ranks
        assert low <= math.floor(position) and math.ceil(position) <= high


@pytest.mark.parametrize(("n", "q"), [(50, 50), (100, 90), (400, 99), (1000, 99)])
def test_the_interval_covers_the_true_percentile_in_about_95_percent_of_draws(n, q):
    """Seeded draws from a known, skewed distribution (lognormal, like latencies)."""
    draws = 4000
    rng = np.random.default_rng(12345)
    sorted_draws = np.sort(rng.lognormal(mean=1.0, sigma=0.5, size=(draws, n)), axis=1)
    truth = math.exp(1.0 + 0.5 * stats.norm.ppf(q / 100))
    low, high = order_statistic_ranks(n, q)
    covered = (sorted_draws[:, low - 1] <= truth) & (truth <= sorted_draws[:, high - 1])
    exact = _coverage(n, q, (low, high))
    se = math.sqrt(exact * (1 - exact) / draws)
    assert exact >= 0.95
    assert abs(covered.mean() - exact) < 4 * se, (covered.mean(), exact)
    # the same through Samples, on one draw
    s = Samples.of(sorted_draws[0])
    assert s.percentile_interval(q) == (sorted_draws[0, low - 1], sorted_draws[0, high - 1])


def test_too_few_samples_give_no_interval_and_no_p99():
    s = Samples.of(np.linspace(1.0, 2.0, 50))
    low, high = s.percentile_interval(99)
    assert math.isnan(low) and math.isnan(high)
    p99 = s.judged_percentile(99)
    assert math.isnan(p99.value) and not p99.ok
    assert p99.status == "too few samples (n=50, p99 needs 299)"
    p50 = s.judged_percentile(50)
    assert p50.ok and p50.low <= p50.value <= p50.high


def test_a_wide_interval_is_given_and_marked_and_a_narrow_one_published():
    rng = np.random.default_rng(0)
    tight = Samples.of(rng.normal(4.0, 0.1, 1000))
    p99 = tight.judged_percentile(99)
    assert p99.ok and p99.low <= p99.value <= p99.high
    assert (p99.high - p99.low) / p99.value <= MAX_RELATIVE_WIDTH
    heavy = Samples.of(rng.pareto(1.0, 400) + 1.0)  # a tail with no mean: its p99 is anyone's guess
    wide = heavy.judged_percentile(99)
    assert wide.status.startswith("wide interval") and wide.low <= wide.value <= wide.high  # never withheld
    assert wide.low < wide.high  # the interval is kept: the reader sees how wide it was


def test_row_columns_of_50_samples_publish_p50_and_p90_but_not_p99():
    row = percentile_columns("latency_ms", Samples.of(np.linspace(0.004, 0.0042, 50)))
    assert set(row) <= set(schema.COLUMNS)
    assert row["latency_ms_p50_status"] == row["latency_ms_p90_status"] == "ok"
    assert row["latency_ms_p50_ci_low"] <= row["latency_ms_p50"] <= row["latency_ms_p50_ci_high"]
    assert math.isnan(row["latency_ms_p99"]) and math.isnan(row["latency_ms_p99_ci_high"])
    assert row["latency_ms_p99_status"] == "too few samples (n=50, p99 needs 299)"


def test_the_schema_states_the_width_rule_the_code_applies():
    assert schema.PERCENTILE_MAX_WIDTH_TEXT == f"{MAX_RELATIVE_WIDTH:.0%}"
    for prefix in ("latency_ms", "batch_latency_ms"):
        for q in (50, 90, 99):
            for suffix in ("", "_ci_low", "_ci_high", "_status"):
                assert f"{prefix}_p{q}{suffix}" in schema.COLUMNS


class _Sleepy(nn.Module):
    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return x


def test_a_series_goes_on_to_its_target_and_stops_at_its_budget():
    x = torch.zeros(1, 3)
    assert measure_latency(nn.Identity(), x, warmup=0, repeats=3).n == 3
    assert measure_latency(nn.Identity(), x, warmup=0, repeats=3, budget_s=30.0, target=400).n == 400
    assert measure_latency(nn.Identity(), x, warmup=0, repeats=500, budget_s=30.0, target=400).n == 500
    t0 = time.perf_counter()
    slow = measure_latency(_Sleepy(0.02), x, warmup=0, repeats=3, budget_s=0.3, target=1000)
    assert 3 <= slow.n <= 0.3 / 0.02 + 1 and time.perf_counter() - t0 < 0.3 + 2 * 0.02 + 0.5
    assert measure_latency(_Sleepy(0.02), x, warmup=0, repeats=5, budget_s=0.01, target=1000).n == 5


OLD_ROW = {"batch_size": 64, "status": "ok", "hardware": "cpu", "latency_ms_p50": 4.0}


def test_a_refused_percentile_shows_why_never_a_number():
    refused = "too few samples (n=50, p99 needs 299)"
    assert fmt.percentile_text(float("nan"), refused) == "\u2013 (n=50 < 299)"
    assert fmt.percentile_text(9.9, refused) == "\u2013 (n=50 < 299)", "a refused value is never shown"
    assert fmt.percentile_text(9.9, "wide interval (80% of the value > 50%)", low=5.0, high=13.0) == \
        "9.90 ms [5.00, 13.0] (wide interval)", "a busy host's figure is given with its interval, marked"
    assert fmt.percentile_text(2.94, "ok") == "2.94 ms" and fmt.percentile_text(2.94) == "2.94 ms"
    row = {**OLD_ROW, "latency_ms_p50_status": "ok", "latency_ms_p99": float("nan"), "latency_ms_p99_status": refused}
    table = pages.pair_results([row]).data
    assert table.iloc[0]["latency, batch 1 (p50 / p99)"] == "4.00 ms / \u2013 (n=50 < 299)"
    row = {**row, "latency_ms_p50_ci_low": 3.91, "latency_ms_p50_ci_high": 4.12, "latency_ms_p99_ci_low": 8.0}
    table = pages.pair_results([row]).data  # the interval beside a published percentile, never a refused one
    assert table.iloc[0]["latency, batch 1 (p50 / p99)"] == "4.00 ms [3.91, 4.12] / \u2013 (n=50 < 299)"
    assert fmt.percentile_text(2.94, "ok", low=2.9, high=float("nan")) == "2.94 ms"  # half an interval is none


def test_the_headline_shows_a_refused_p99_with_its_reason():
    refused = "too few samples (n=50, p99 needs 299)"
    rows = [{**OLD_ROW, "study": "s", "machine": "m", "model": "resnet18", "variant": "default",
             "run_id": f"a__seed{i}", "latency_ms_p50_status": "ok", "latency_ms_p99": 12.0 if i else None,
             "latency_ms_p99_status": "ok" if i else refused} for i in range(2)]
    out = headline.headline_table(pd.DataFrame(rows))
    cell = out.table.iloc[0]["latency p99 (ms)"]
    assert cell == "\u2013 (n=50 < 299)", "one run refused it: the median of the other is not shown"
    assert f"latency p99 (ms): \u2013 in 1 of 1 configurations ({refused})" in out.notes


def test_a_real_tiny_run_has_its_intervals_ordered():
    """A measured row: every published figure lies inside its interval, and a refused one says why."""
    from conftest import TINY

    from benchlib.run.measure import measure
    from benchlib.spec.settings import RunConfig, RunSettings

    cfg = RunConfig("t", "cpu", "squeezenet1_1", 16, RunSettings.of(**{**TINY, "latency_budget_s": 1.0}))
    m = measure(cfg, machine="m")
    assert m is not None
    row = measured_row(m)
    assert row["latency_n"] == len(m.samples["latency_s"]) >= 5
    assert row["batch_latency_n"] == len(m.samples["batch_latency_s"]) >= 5
    for prefix in ("latency_ms", "batch_latency_ms"):
        for q in (50, 90, 99):
            name = f"{prefix}_p{q}"
            status = row[f"{name}_status"]
            if status == "ok":
                assert row[f"{name}_ci_low"] <= row[name] <= row[f"{name}_ci_high"], name
            else:
                assert math.isnan(row[name]) and status.startswith("too few samples") or \
                    status.startswith("wide interval") and row[f"{name}_ci_low"] <= row[name], name
    assert row["test_samples"] == 64
    assert 0 <= row["test_accuracy_ci_low"] <= row["test_accuracy"] <= row["test_accuracy_ci_high"] <= 1


def test_a_busy_hosts_percentile_reaches_the_headline_marked_not_withheld():
    """On a busy host `benchlib.benchmark` once returned no latency at all, where a plain loop gave a number."""
    import pandas as pd

    from benchlib.report.tables import headline

    rows = pd.DataFrame([{"latency_ms_p50": 9.9, "latency_ms_p50_status": "wide interval (80% of the value > 50%)"}])
    shown, why = headline._cell(rows, "latency_ms_p50", fmt.ms_text)
    assert shown == "9.90 ms (wide interval)" and why is None
    from benchlib.report.display.show import WIDE_STYLE, table_html

    page = table_html(pd.DataFrame({"latency": [shown, "5.00 ms"]}), text=True)
    assert page.count(WIDE_STYLE) == 1, "the wide figure is greyed on the page, the quiet one is not"
    heavy = Samples.of(np.random.default_rng(1).pareto(1.0, 400) + 1.0)
    row = percentile_columns("latency_ms", heavy)
    assert row["latency_ms_p99"] > 0 and row["latency_ms_p99_status"].startswith("wide interval")
