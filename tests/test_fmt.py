"""Numbers as a reader sees them: no scientific notation, no None/nan, human units."""
from __future__ import annotations

import math

import pytest

from benchlib.report.words import fmt


@pytest.mark.parametrize("value,text", [(6515, "6,520"), (10234, "10,200"), (0.012345, "0.0123"), (9.996, "10.0"),
                                        (62.18190943212281, "62.2"), (0, "0"), (-1.5, "-1.50")])
def test_three_significant_digits_without_exponents(value, text):
    assert fmt.significant(value) == text


@pytest.mark.parametrize("missing", [None, math.nan, math.inf, "nan", "None", ""])
def test_missing_is_an_en_dash(missing):
    assert fmt.value_text(missing) == fmt.MISSING == "\u2013"
    assert fmt.bytes_text(missing if not isinstance(missing, str) else None) == fmt.MISSING


def test_units():
    assert fmt.bytes_text(1.264e9) == "1.18 GiB"
    assert fmt.bytes_text(300) == "300 B"
    assert fmt.count_text(2.237e6) == "2.24 M"
    assert fmt.flops_text(172.1e9) == "172 GFLOP/s"
    assert fmt.bandwidth_text(30.7e9) == "30.7 GB/s"
    assert fmt.ms_text(5.04) == "5.04 ms"
    assert fmt.seconds_text(249) == "4 min 09 s"
    assert fmt.seconds_text(7500) == "2 h 05 min"
    assert fmt.percent_text(0.9694) == "96.9%"
    assert fmt.percent_text(0.0000250) == "<0.01%" and fmt.percent_text(0) == "0%"
    assert fmt.ratio_text(1.2634, 1.19, 1.33) == "1.26x [1.19, 1.33]"
    assert fmt.value_text(True) == "yes" and fmt.value_text(12) == "12"
