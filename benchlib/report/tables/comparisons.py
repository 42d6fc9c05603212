"""Ratios between rows as tables: speed-ups across devices, variants against their baseline, and a
knob's scaling. Every ratio carries its interval and verdict (``evidence.stats``), from the raw samples kept
beside the rows; a ``reader`` gives a row's samples (tests pass their own).
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd

from ..evidence.samples import SampleReader, compare_rows
from ..evidence.selection import BASELINE_VARIANTS, column_median, device_label, ok_rows
from ..evidence.stats import Comparison
from ..readback.samples import SampleFiles

SPEEDUP_COLUMNS = ["model", "batch_size", "device_a", "device_b", "speedup", "ci_low", "ci_high", "p_value", "verdict",
                   "level", "speedup_text"]


def speedup_table(df: pd.DataFrame, metric: str = "train_samples_per_s",
                  reader: SampleReader | None = None) -> pd.DataFrame:
    """Ratio of ``metric`` for every ordered pair of devices, per model and batch size, with its interval.

    One line per (model, batch size, device A, device B): ``speedup`` > 1 means A is faster than B
    (for latency the ratio is inverted so that > 1 still means faster), ``ci_low``/``ci_high`` its 95%
    bootstrap interval, ``verdict`` faster/slower/same. Empty with one device.
    """
    good = ok_rows(df)
    columns = SPEEDUP_COLUMNS[:4] + [metric + "_a", metric + "_b"] + SPEEDUP_COLUMNS[4:]
    if good.empty:
        return pd.DataFrame(columns=columns)
    reader = reader or SampleFiles()
    good["device"] = device_label(good)
    planned = []
    for (model, batch), grp in good.groupby(["model", "batch_size"]):
        sides = {d: rows for d, rows in grp.groupby("device")}
        for a, b in itertools.permutations(sorted(sides), 2):
            va, vb = column_median(sides[a], metric), column_median(sides[b], metric)
            if np.isfinite(va) and np.isfinite(vb) and va > 0 and vb > 0:
                planned.append((model, batch, a, b, sides[a], sides[b], va, vb))
    family = max(1, len(planned) // 2)  # A against B and B against A are one comparison
    out = []
    for model, batch, a, b, rows_a, rows_b, va, vb in planned:
        c = compare_rows(rows_a, rows_b, metric, reader, family=family)
        va, vb = _figures(c, va, vb)
        out.append({"model": model, "batch_size": batch, "device_a": a, "device_b": b, metric + "_a": va,
                    metric + "_b": vb, "speedup": c.ratio, "ci_low": c.ci_low, "ci_high": c.ci_high,
                    "p_value": c.p_value, "verdict": c.verdict, "level": c.level, "speedup_text": c.text()})
    return pd.DataFrame(out, columns=columns)


def _figures(c: Comparison, a: float, b: float) -> tuple[float, float]:
    """The figures a comparison's ratio is the quotient of, where it has them; else the rows' medians."""
    return (c.figure_a, c.figure_b) if np.isfinite(c.figure_a) and np.isfinite(c.figure_b) else (a, b)


def speedup_matrix(df: pd.DataFrame, metric: str = "train_samples_per_s",
                   reader: SampleReader | None = None) -> pd.DataFrame:
    """Speedups as a wide table: rows (model, batch, device A), columns device B, cells
    ``ratio [low, high] verdict``."""
    long = speedup_table(df, metric, reader)
    if long.empty:
        return long
    return long.pivot_table(index=["model", "batch_size", "device_a"], columns="device_b", values="speedup_text",
                            aggfunc="first").fillna("")


def scaling_table(df: pd.DataFrame, knob: str, reader: SampleReader | None = None) -> pd.DataFrame:
    """Throughput against a parallelism knob (threads, num_workers or world_size): speedup with its interval
    and verdict, and parallel efficiency.

    Speedup is against the smallest value measured; efficiency = speedup / (value / smallest value).
    """
    good = ok_rows(df)
    if good.empty or knob not in good or good[knob].nunique() < 2:
        return pd.DataFrame()
    reader = reader or SampleFiles()
    groups = list(good.groupby(["machine", "hardware", "model", "batch_size"]))
    family = max(1, sum(grp[knob].nunique() - 1 for _, grp in groups))
    out = []
    for keys, grp in groups:
        by_value = {n: rows for n, rows in sorted(grp.groupby(knob), key=lambda item: item[0])}
        base_n = next(iter(by_value))
        base_rows = by_value[base_n]
        for n, rows in by_value.items():
            c = compare_rows(rows, base_rows, "train_samples_per_s", reader, family=family)
            v, base = _figures(c, column_median(rows, "train_samples_per_s"),
                               column_median(base_rows, "train_samples_per_s"))
            ratio = n / base_n if base_n else np.nan
            out.append({"machine": keys[0], "hardware": keys[1], "model": keys[2], "batch_size": keys[3], knob: n,
                        "train_samples_per_s": v, "speedup": v / base, "ci_low": c.ci_low, "ci_high": c.ci_high,
                        "verdict": c.verdict if n != base_n else "baseline", "level": c.level, "note": c.note,
                        "speedup_text": c.text(),
                        "parallel_efficiency": (v / base) / ratio if ratio else np.nan})
    return pd.DataFrame(out)


VARIANT_RATIOS = {  # column -> (metric, label of its text column)
    "epoch_speedup": ("epoch_s", "epoch"),
    "train_throughput_ratio": ("train_samples_per_s", "train_throughput"),
    "latency_speedup_bs1": ("latency_ms_p50", "latency_bs1"),
    "infer_throughput_ratio": ("infer_samples_per_s", "infer_throughput"),
}


def variant_speedups(df: pd.DataFrame, reader: SampleReader | None = None) -> pd.DataFrame:
    """Every variant against its hardware's default variant, per model and batch size.

    Speedups > 1 mean faster than the default (epoch time and batch-1 latency as default / variant,
    throughput as variant / default), each with its interval and verdict in a text column
    (``train_throughput``: ``1.31x [1.22, 1.40] faster``); accuracy as the difference in points; memory
    and model size as ratios.
    """
    good = ok_rows(df)
    if good.empty or good["variant"].nunique() < 2:
        return pd.DataFrame()
    reader = reader or SampleFiles()
    groups = list(good.groupby(["machine", "hardware", "model", "batch_size"]))
    family = max(1, len(VARIANT_RATIOS) * sum(grp["variant"].nunique() - 1 for _, grp in groups))
    out = []
    for keys, grp in groups:
        base_rows = grp[grp["variant"].isin(BASELINE_VARIANTS)]
        if base_rows.empty:
            continue
        baseline = str(base_rows["variant"].iloc[0])
        base_rows = base_rows[base_rows["variant"] == baseline]
        for variant, rows in grp.groupby("variant", sort=False):
            rec: dict[str, Any] = {"machine": keys[0], "hardware": keys[1], "model": keys[2], "batch_size": keys[3],
                                   "variant": variant, "baseline": baseline, "family": family}
            for column, (metric, label) in VARIANT_RATIOS.items():
                if variant == baseline:  # the baseline is the unit, not a comparison with itself
                    rec.update({column: 1.0, f"{label}_verdict": "baseline", f"{label}_level": "",
                                f"{label}_note": "", label: "baseline"})
                    continue
                c = compare_rows(rows, base_rows, metric, reader, family=family)
                rec[column] = c.ratio
                rec[f"{label}_verdict"] = c.verdict
                rec[f"{label}_level"] = c.level
                rec[f"{label}_note"] = c.note
                rec[label] = c.text()

            acc, base_acc = column_median(rows, "test_accuracy"), column_median(base_rows, "test_accuracy")
            rec["accuracy_delta_pts"] = (acc - base_acc) * 100
            for col, name in (("peak_rss_bytes", "peak_memory_ratio"), ("model_size_bytes", "model_size_ratio")):
                num, den = column_median(rows, col), column_median(base_rows, col)
                rec[name] = num / den if np.isfinite(num) and np.isfinite(den) and den > 0 else np.nan
            out.append(rec)
    return pd.DataFrame(out)
