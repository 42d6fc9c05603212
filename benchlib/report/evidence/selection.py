"""Which rows a report reads and how it names them: the valid rows of results folders (each under the
roof the page shows), the rows that measured, a configuration's key across seeds and settings digests, the
device label and the baseline variants.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from ...spec.settings import SEED_SUFFIX
from ...store.rows import read_checked
from ..readback.roofs import page_ceilings, placed


def load(results_dirs: Iterable[str]) -> pd.DataFrame:
    """Every valid row of the given results folders, merged and de-duplicated, each placed under the roof the
    page shows for its device (``roofs.placed``); the invalid ones, with why, in ``attrs["invalid_rows"]``."""
    dirs = list(results_dirs)
    rows, invalid = read_checked(dirs)  # each row file read and checked once (store.integrity)
    df = placed(rows, page_ceilings(dirs))
    df.attrs["invalid_rows"] = invalid
    return df


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
