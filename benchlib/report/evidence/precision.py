"""How precisely a study's runs pin down its figures: what ``repeats: auto`` stops on.

A figure measured in several fresh processes (a study's rounds) is as sure as its interval across them
is narrow. Per configuration this is the hierarchical bootstrap interval of its training throughput (runs
first, then each run's steps); where a pair compares configurations at one batch size (variants, swept
values) it is also each one's ratio against the pair's first configuration, since a ratio is what a
comparison claims. The precision is the interval's half-width relative to the figure, in %.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...spec.settings import SEED_SUFFIX
from .inference import detectable
from .samples import METRICS, SampleReader, compare_rows, run_samples
from .stats import CONFIDENCE, center_of, hierarchical_medians


@dataclass(frozen=True)
class Precision:
    """The widest relative half-width of the study's intervals, and what it belongs to."""

    worst_pct: float  # NaN until every configuration has two runs
    worst: str  # the configuration or ratio with that half-width
    runs: int  # the fewest runs any configuration has
    per_item: dict[str, float]  # configuration or "A vs B" -> half-width, %
    can_tell_pct: float = math.nan  # the largest of the smallest changes each comparison can tell, %
    can_tell_worst: str = ""  # the comparison it belongs to


def half_width_pct(center: float, low: float, high: float) -> float:
    """The wider side of an interval around ``center``, relative to it, in % (NaN where undefined)."""
    if not all(math.isfinite(x) for x in (center, low, high)) or center <= 0 or low <= 0:
        return math.nan
    return max(center / low, high / center) * 100 - 100


def figure_half_width(rows: pd.DataFrame, metric: str, reader: SampleReader, seed: int = 0) -> tuple[float, int]:
    """(half-width %, runs) of one configuration's figure over its runs."""
    m = METRICS[metric]
    runs = run_samples(rows, m, reader)
    if len(runs) < 2:
        return math.nan, len(runs)
    boot = hierarchical_medians(runs, rng=np.random.default_rng(seed), center=m.center)
    tail = (1 - CONFIDENCE) / 2 * 100
    center = float(np.median([center_of(r, m.center) for r in runs]))
    return half_width_pct(center, float(np.percentile(boot, tail)), float(np.percentile(boot, 100 - tail))), len(runs)


def study_precision(rows: pd.DataFrame, reader: SampleReader, metric: str = "train_samples_per_s") -> Precision:
    """The precision of every configuration of ``rows`` (ok rows of one study) and of the pair's ratios."""
    good = rows[rows["status"] == "ok"] if "status" in rows else rows
    if good.empty:
        return Precision(math.nan, "", 0, {})
    config = good["run_id"].astype(str).str.replace(SEED_SUFFIX, "", regex=True)
    per_item: dict[str, float] = {}
    tells: dict[str, float] = {}
    fewest = None
    groups = {name: grp for name, grp in good.groupby(config, sort=False)}
    for name, grp in groups.items():
        width, runs = figure_half_width(grp, metric, reader)
        per_item[name] = width
        tells[name] = alike_can_tell_pct(grp, metric, reader)
        fewest = runs if fewest is None else min(fewest, runs)
    for _, pair in good.assign(_config=config).groupby(["machine", "hardware", "model", "batch_size"], sort=False):
        names = list(dict.fromkeys(pair["_config"]))
        for other in names[1:]:
            c = compare_rows(groups[other], groups[names[0]], metric, reader)
            if c.level == "runs":
                per_item[f"{other} vs {names[0]}"] = half_width_pct(c.ratio, c.ci_low, c.ci_high)
                tells[f"{other} vs {names[0]}"] = c.mdc * 100
    told = {k: v for k, v in tells.items() if math.isfinite(v)}
    tell_worst = max(told, key=lambda k: told[k]) if told and len(told) == len(tells) else ""
    can_tell = told[tell_worst] if tell_worst else math.nan
    widths = {k: v for k, v in per_item.items() if math.isfinite(v)}
    if len(widths) < len(per_item) or not widths:
        return Precision(math.nan, "", fewest or 0, per_item, can_tell, tell_worst)
    worst = max(widths, key=lambda k: widths[k])
    return Precision(widths[worst], worst, fewest or 0, per_item, can_tell, tell_worst)


def alike_can_tell_pct(rows: pd.DataFrame, metric: str, reader: SampleReader) -> float:
    """The smallest change (%) a comparison of this configuration's runs against as many runs of another, as
    spread, would catch 80% of the time (NaN under two runs)."""
    figures = [float(center_of(r, METRICS[metric].center)) for r in run_samples(rows, METRICS[metric], reader)]
    logs = np.log([f for f in figures if f > 0])
    if logs.size < 2:
        return math.nan
    n = logs.size
    return detectable(float(logs.std(ddof=1)) * math.sqrt(2 / n), 2 * (n - 1), 1) * 100
