"""Which rows a report compares and how it names them: the rows that measured, a configuration's key across
seeds and settings digests, the device label and the baseline variants (the rows themselves are read by
``readback.folders.load_rows``).
"""
from __future__ import annotations

import math

import pandas as pd

from ...spec.settings import SEED_SUFFIX


def device_label(df: pd.DataFrame) -> pd.Series:
    """'machine:hardware' where rows come from several machines, else the hardware name."""
    if df["machine"].nunique() > 1:
        return df["machine"].astype(str) + ":" + df["hardware"].astype(str)
    return df["hardware"].astype(str)


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"].copy()


def devices_count(df: pd.DataFrame) -> int:
    good = ok_rows(df)
    return 0 if good.empty else int(device_label(good).nunique())


def config_key(run_id: pd.Series) -> pd.Series:
    """A run_id without its seed: the configuration that repeats share."""
    return run_id.astype(str).str.replace(SEED_SUFFIX, "", regex=True)


BASELINE_VARIANTS = ("default", "cpu-default", "gpu-default")


def column_median(rows: pd.DataFrame, column: str) -> float:
    """The median of a column's numbers, NaN when it has none (no warning: an all-NaN column is common,
    a figure a configuration did not measure)."""
    values = pd.to_numeric(rows[column], errors="coerce").dropna() if column in rows else pd.Series(dtype=float)
    return float(values.median()) if not values.empty else math.nan
