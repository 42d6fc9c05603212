"""A table's cells as a reader sees them: each column formatted by its unit, missing values as an en dash.

Raw tables keep raw numbers (``results.csv`` and the frames the report computes); what a page shows goes
through :func:`readable`, which picks the formatter of ``fmt`` from the column's unit in the row schema
(or from its name, for the columns the report derives), so one column never mixes ``6,515`` and
``1.02e+04`` and no cell reads ``None``, ``nan`` or ``NaN``.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from ...store.schema import COLUMNS
from . import fmt

# Columns that hold a share of a whole (0..1) and read best as a percentage.
FRACTIONS = frozenset({
    "train_accuracy", "test_accuracy", "fp32_test_accuracy", "roof_fraction", "infer_roof_fraction",
    "data_wait_fraction", "parallel_efficiency", "fraction",
})
# Ratios without an interval of their own (a speedup with one is a text column already).
RATIOS = frozenset({"speedup", "peak_memory_ratio", "model_size_ratio", "epoch_speedup", "train_throughput_ratio",
                    "latency_speedup_bs1", "infer_throughput_ratio"})


def _macs(value: Any) -> str:
    text = fmt.count_text(value)
    return text if text == fmt.MISSING else f"{text} MAC"


def formatter(column: str) -> Callable[[Any], str]:
    """The text of one cell of ``column``: by the schema's unit where the column is there, else by its name."""
    unit = COLUMNS[column].unit if column in COLUMNS else ""
    if column in FRACTIONS:
        return fmt.percent_text
    if column in RATIOS:
        return fmt.ratio_text
    if unit == "bytes/s" or column.endswith("_bytes_per_s"):
        return fmt.bandwidth_text
    if unit == "bytes" or column.endswith("_bytes") or column.endswith("bytes_max"):
        return fmt.bytes_text
    if unit == "FLOP/s" or column.endswith("_flops_per_s"):
        return fmt.flops_text
    if unit == "FLOP" or column.endswith("flops_per_sample"):
        return lambda v: fmt.flops_text(v, per_s=False)
    if unit == "MAC":
        return _macs
    if unit == "parameters" or column in ("params", "params_trainable"):
        return fmt.count_text
    if column.endswith("_per_s") or unit in ("samples/s", "W", "J", "°C", "MHz", "FLOP/byte", "ms", "%"):
        return fmt.significant  # the unit is in the column's name
    if column.endswith(("_ms", "_pct", "_j", "_w")) or re.search(r"_(ms|pct)_", column):
        return fmt.significant
    if unit == "s" or column.endswith("_s") or "_s_" in column:
        return fmt.seconds_text  # 12.3 ms reads better than 0.0123 s
    return fmt.value_text


def readable(df: pd.DataFrame) -> pd.DataFrame:
    """Every cell as text in its column's unit; missing values as an en dash. Column names are kept."""
    out = pd.DataFrame(index=df.index)
    for column in df.columns:
        text = formatter(str(column))
        out[column] = [text(v) for v in df[column].tolist()]
    return out


def numeric_columns(df: pd.DataFrame) -> list[str]:
    """Columns of ``df`` that hold numbers (right-aligned when shown)."""
    return [str(c) for c in df.select_dtypes("number").columns]
