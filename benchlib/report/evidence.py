"""The samples behind a figure: what a comparison of two sets of rows resamples.

A row's headline figures are medians of raw samples kept beside it (``samples/<machine>__<run_id>.csv``:
every timed training step, every latency repeat, every throughput repeat). A comparison resamples those,
pooled over the rows of one side (several seeds of one configuration). A figure with no series behind it
(accuracy, peak memory, energy) is one value per row: its samples are the rows themselves.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..engine.inference import BATCHES_PER_THROUGHPUT_REPEAT
from ..store.rows import read_samples
from ..store.schema import finite_float
from .stats import PRACTICAL_THRESHOLD, Comparison, compare


@dataclass(frozen=True)
class Metric:
    """How one metric's samples are found and which way is better."""

    column: str  # the row's figure
    series: str | None  # the raw samples behind it (seconds), or None: one value per row
    higher_is_better: bool
    timing: bool  # a speed (verdict faster/slower) rather than a size or a score (better/worse)
    convert: str = "value"  # value | per_second (inputs per second of each timed item) | ms

    def of_samples(self, seconds: np.ndarray, row: Mapping[str, Any]) -> np.ndarray:
        """Raw seconds in the column's units (a throughput sample is the inputs of that item per second)."""
        if self.convert == "ms":
            return seconds * 1e3
        if self.convert == "per_second":
            batch = float(row.get("batch_size") or math.nan)
            inputs = batch * (BATCHES_PER_THROUGHPUT_REPEAT if self.series == "infer_repeat_s" else 1)
            with np.errstate(divide="ignore"):
                return inputs / seconds
        return seconds


METRICS: dict[str, Metric] = {
    "train_samples_per_s": Metric("train_samples_per_s", "train_step_s", True, True, "per_second"),
    "train_step_s": Metric("train_step_s_median", "train_step_s", False, True),
    "epoch_s": Metric("epoch_s", "epoch_s", False, True),
    "infer_samples_per_s": Metric("infer_samples_per_s", "infer_repeat_s", True, True, "per_second"),
    "latency_ms_p50": Metric("latency_ms_p50", "latency_s", False, True, "ms"),
    "batch_latency_ms_p50": Metric("batch_latency_ms_p50", "batch_latency_s", False, True, "ms"),
    "peak_rss_bytes": Metric("peak_rss_bytes", None, False, False),
    "peak_cuda_allocated_bytes": Metric("peak_cuda_allocated_bytes", None, False, False),
    "model_size_bytes": Metric("model_size_bytes", None, False, False),
    "train_energy_j_per_sample": Metric("train_energy_j_per_sample", None, False, False),
    "infer_energy_j_per_sample": Metric("infer_energy_j_per_sample", None, False, False),
    "test_accuracy": Metric("test_accuracy", None, True, False),
}

SampleReader = Callable[[Mapping[str, Any]], pd.DataFrame]


class SampleFiles:
    """Reads a row's samples file once (rows carry ``results_dir`` from ``read_results``)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, str], pd.DataFrame] = {}

    def __call__(self, row: Mapping[str, Any]) -> pd.DataFrame:
        folder = row.get("results_dir")
        if not folder:
            return pd.DataFrame(columns=["series", "value"])
        key = (str(folder), str(row["machine"]), str(row["run_id"]))
        if key not in self._cache:
            self._cache[key] = read_samples(Path(str(folder)), row)
        return self._cache[key]


def samples(rows: pd.DataFrame, metric: Metric, reader: SampleReader) -> np.ndarray:
    """The metric's samples over ``rows``: each row's raw series where kept, else its one value."""
    out: list[np.ndarray] = []
    for row in rows.to_dict("records"):
        if metric.series is not None:
            table = reader(row)
            part = pd.to_numeric(table.loc[table["series"] == metric.series, "value"], errors="coerce").dropna()
            if not part.empty:
                out.append(metric.of_samples(part.to_numpy(dtype=float), row))
                continue
        value = finite_float(row.get(metric.column))
        if value is not None:
            out.append(np.asarray([value]))
    return np.concatenate(out) if out else np.asarray([], dtype=float)


MIN_RUNS = 3  # repeats a side needs before its runs, not its steps, are what is resampled


def compare_rows(a: pd.DataFrame, b: pd.DataFrame, metric: str | Metric, reader: SampleReader, *,
                 threshold: float = PRACTICAL_THRESHOLD) -> Comparison:
    """Side ``a`` against side ``b`` on one metric (ratio > 1: ``a`` is better).

    Steps of one run are not independent of the run: a process that drew a slow core or a busy minute is
    slow on every step, so an interval from one run's steps covers step-to-step noise but not run-to-run
    drift. Where both sides have ``MIN_RUNS`` repeats, the repeats' own figures are resampled instead
    (``level="runs"``); otherwise the pooled raw samples are (``level="samples"``), and the table says so.
    """
    m = METRICS[metric] if isinstance(metric, str) else metric
    if m.series is not None and len(a) >= MIN_RUNS and len(b) >= MIN_RUNS:
        runs_a = pd.to_numeric(a[m.column], errors="coerce") if m.column in a else pd.Series(dtype=float)
        runs_b = pd.to_numeric(b[m.column], errors="coerce") if m.column in b else pd.Series(dtype=float)
        found = compare(runs_a.to_numpy(dtype=float), runs_b.to_numpy(dtype=float),
                        higher_is_better=m.higher_is_better, timing=m.timing, threshold=threshold)
        return dataclasses.replace(found, level="runs")
    level = "samples" if m.series is not None else "runs"
    found = compare(samples(a, m, reader), samples(b, m, reader), higher_is_better=m.higher_is_better,
                    timing=m.timing, threshold=threshold)
    return dataclasses.replace(found, level=level)


def flagged(rows: pd.DataFrame, columns: Sequence[str]) -> bool:
    """Whether any of ``rows`` sets any of the flag ``columns``."""
    return bool(any(rows[c].fillna(False).astype(bool).any() for c in columns if c in rows))


NOISE_FLAGS = ("train_step_noisy", "latency_noisy", "batch_latency_noisy", "infer_noisy")
