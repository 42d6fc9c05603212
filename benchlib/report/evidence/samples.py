"""The evidence behind a comparison of two sets of rows: each run's samples and this machine's noise floor.

A row's headline figures are medians of raw samples kept beside it (``samples/<machine>__<run_id>.csv``:
every timed training step, every latency repeat, every throughput repeat). A row is one run (one fresh
process); a side of a comparison is one or more rows (seeds, repeats, several studies). A figure with no
series behind it (accuracy, peak memory, energy) is one value per row. Which evidence a verdict rests on
follows ``stats``: two or more runs a side are compared run by run; one run a side only beyond the noise
floor ``benchlib calibrate`` measured on the rows' machine (``noise_floor/`` of their results folder),
or step by step where both rows come from one process.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from ...instruments.run_to_run import bounds, floor_groups, floor_of, log_spread
from ...store.noise_floor import NoiseFloor
from ...store.rows import flag_mask
from ...store.schema import BATCHES_PER_THROUGHPUT_REPEAT, finite_float
from .inference import Spread, compare, compare_runs
from .stats import (
    ALPHA,
    NO_DATA,
    PRACTICAL_THRESHOLD,
    Comparison,
    center_of,
    judge_single_runs,
    proportion_ratio,
)


@dataclass(frozen=True)
class Metric:
    """How one metric's samples are found and which way is better."""

    column: str  # the row's figure
    series: str | None  # the raw samples behind it (seconds), or None: one value per row
    higher_is_better: bool
    timing: bool  # a speed (verdict faster/slower) rather than a size or a score (better/worse)
    convert: str = "value"  # value | per_second (inputs per second of each timed item) | ms
    floor: str | None = None  # the noise floor metric (store.noise_floor.FLOOR_METRICS) its runs vary like

    @property
    def center(self) -> str:
        """How a run's samples make its figure (``stats.center_of``): a throughput is its inputs over its summed
        seconds ("rate", as the row's own column), anything else the median."""
        return "rate" if self.convert == "per_second" else "median"

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
    "train_samples_per_s": Metric("train_samples_per_s", "train_step_s", True, True, "per_second", "train_step_s"),
    "train_step_s": Metric("train_step_s_median", "train_step_s", False, True, floor="train_step_s"),
    "epoch_s": Metric("epoch_s", "epoch_s", False, True, floor="train_step_s"),
    "infer_samples_per_s": Metric("infer_samples_per_s", "infer_repeat_s", True, True, "per_second",
                                  "infer_samples_per_s"),
    "latency_ms_p50": Metric("latency_ms_p50", "latency_s", False, True, "ms", "latency_ms_p50"),
    "batch_latency_ms_p50": Metric("batch_latency_ms_p50", "batch_latency_s", False, True, "ms",
                                   "infer_samples_per_s"),
    "peak_rss_bytes": Metric("peak_rss_bytes", None, False, False, floor="peak_rss_bytes"),
    "peak_cuda_allocated_bytes": Metric("peak_cuda_allocated_bytes", None, False, False),
    "model_size_bytes": Metric("model_size_bytes", None, False, False),
    "train_energy_j_per_sample": Metric("train_energy_j_per_sample", None, False, False),
    "infer_energy_j_per_sample": Metric("infer_energy_j_per_sample", None, False, False),
    "test_accuracy": Metric("test_accuracy", None, True, False),
}


class SampleReader(Protocol):
    """Where a comparison finds a row's raw samples, its machine's noise floors and its per-layer file
    (``readback.samples.SampleFiles`` reads them from files; a test may hand frames)."""

    def __call__(self, row: Mapping[str, Any]) -> pd.DataFrame: ...

    def floors(self, folder: object) -> list[NoiseFloor]: ...

    def layer_files(self, rows: pd.DataFrame) -> tuple[list[dict[str, Any]], list[Mapping[str, Any]]]: ...


def _processes(rows: pd.DataFrame, by_process: bool = True) -> list[pd.DataFrame]:
    """``rows`` grouped by the process that measured them (a row without ``process_uid`` is its own; every
    row is its own where not ``by_process``)."""
    if "process_uid" not in rows or not by_process:
        return [rows.iloc[[i]] for i in range(len(rows))]
    uid = rows["process_uid"].astype(str)
    known = ~uid.isin(["", "nan", "None"])
    keys = uid.where(known, "row:" + pd.Series(range(len(rows)), index=rows.index).astype(str))
    return [grp for _, grp in rows.groupby(keys, sort=False)]


def run_samples(rows: pd.DataFrame, metric: Metric, reader: SampleReader) -> list[np.ndarray]:
    """The metric's samples of each run of ``rows``. For a speed a run is a process, so rows (seeds) measured
    in one process pool their samples into one run; for a size or a score (accuracy differs between
    trainings, not processes) each row is a run. A row's samples are its raw series where kept, else its value."""
    out = [_pooled(grp, metric, reader) for grp in _processes(rows, by_process=metric.timing)]
    return [x for x in out if x.size]


class _Row(Mapping[str, Any]):
    """Row ``i`` of a frame, each cell read when asked for: a sample reader needs a few of a row's ~190 columns,
    and converting every one of them per row made resampling hundreds of comparisons take hours."""

    def __init__(self, frame: pd.DataFrame, i: int) -> None:
        self._frame, self._i = frame, i

    def __getitem__(self, key: str) -> Any:
        if key not in self._frame.columns:
            raise KeyError(key)
        value = self._frame[key].iat[self._i]
        return value.item() if isinstance(value, np.generic) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._frame.columns)

    def __len__(self) -> int:
        return len(self._frame.columns)


def _pooled(rows: pd.DataFrame, metric: Metric, reader: SampleReader) -> np.ndarray:
    out: list[np.ndarray] = []
    for row in (_Row(rows, i) for i in range(len(rows))):
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


def figure(rows: pd.DataFrame, metric: str | Metric, reader: SampleReader) -> float:
    """A configuration's figure as every comparison takes it: each run's figure (its median sample; a throughput's
    inputs over its summed seconds, as the row's own column), their geometric mean over the runs (``inference``'s
    ``figure_a``); NaN without samples. One figure for the headline and the ratios beside it."""
    m = METRICS[metric] if isinstance(metric, str) else metric
    medians = np.asarray([float(center_of(r, m.center)) for r in run_samples(rows, m, reader)])
    medians = medians[np.isfinite(medians) & (medians > 0)]
    return float(np.exp(np.log(medians).mean())) if medians.size else math.nan


def samples(rows: pd.DataFrame, metric: Metric, reader: SampleReader) -> np.ndarray:
    """The metric's samples over ``rows``, pooled."""
    out = run_samples(rows, metric, reader)
    return np.concatenate(out) if out else np.asarray([], dtype=float)


def _floors(rows: pd.DataFrame, reader: SampleReader) -> list[NoiseFloor]:
    """The noise floors that describe ``rows``: their machine's, on their device type (none where not measured)."""
    if rows.empty:
        return []
    row = rows.iloc[0]
    device = str(row.get("hardware") or "cpu").split(":")[0]
    machine = str(row.get("machine"))
    return [f for f in reader.floors(row.get("results_dir")) if f.machine == machine and f.device == device]


def noise_floor_pct(a: pd.DataFrame, b: pd.DataFrame, metric: str | Metric, reader: SampleReader) -> float:
    """How far a single run of ``a`` and one of ``b`` may differ by this machine's noise alone, in % (NaN where
    either side's machine has no floor): ``floor_of`` both sides' floors (one, where they share a machine)."""
    m = METRICS[metric] if isinstance(metric, str) else metric
    fa, fb = _floors(a, reader), _floors(b, reader)
    return floor_of([*fa, *fb], m.floor) if fa and fb and m.floor else math.nan


def floor_spread(a: pd.DataFrame, b: pd.DataFrame, metric: Metric, reader: SampleReader) -> Spread | None:
    """The run-to-run spread this machine's noise floor measured for ``metric``'s kind of figure, where both
    sides' machines have a floor that bounds (not one calibrated on a busy host); else None."""
    fa, fb = _floors(a, reader), _floors(b, reader)
    if not (fa and fb and metric.floor) or not bounds(floor_of([*fa, *fb], metric.floor)):
        return None
    sd, df = log_spread(floor_groups([*fa, *fb], metric.floor))
    return Spread(sd, df) if df >= 1 else None


def one_process(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether every row of both sides was measured in one and the same process."""
    if "process_uid" not in a or "process_uid" not in b:
        return False
    uids = {str(u) for u in (*a["process_uid"].tolist(), *b["process_uid"].tolist())}
    return len(uids) == 1 and next(iter(uids)) not in ("", "nan", "None")


def _accuracy(a: pd.DataFrame, b: pd.DataFrame, threshold: float) -> Comparison | None:
    """Test accuracy of one training a side judged on the test set's size (None without its size)."""
    def pooled(rows: pd.DataFrame) -> tuple[float, int] | None:
        if "test_accuracy" not in rows or "test_samples" not in rows:
            return None
        acc = pd.to_numeric(rows["test_accuracy"], errors="coerce")
        n = pd.to_numeric(rows["test_samples"], errors="coerce")
        ok = acc.notna() & n.notna() & (n > 0)
        if not ok.any():
            return None
        return float((acc[ok] * n[ok]).sum() / n[ok].sum()), int(n[ok].sum())
    pa, pb = pooled(a), pooled(b)
    if pa is None or pb is None:
        return None
    return dataclasses.replace(proportion_ratio(pa[0], pa[1], pb[0], pb[1], threshold=threshold),
                               runs_a=len(a), runs_b=len(b))


MIN_RUNS = 2  # runs a side from which the runs, not the steps, are what is resampled


def compare_rows(a: pd.DataFrame, b: pd.DataFrame, metric: str | Metric, reader: SampleReader, *,
                 threshold: float = PRACTICAL_THRESHOLD, family: int = 1) -> Comparison:
    """Side ``a`` against side ``b`` on one metric (ratio > 1: ``a`` is better), at the level the rows allow.

    A run is a process: seeds measured in one process are one run. Two or more runs a side, or any runs
    where this machine's noise floor measured the metric's spread: the runs' figures (``inference``, the
    floor's runs pooled into the spread). Otherwise, one run on a side: test accuracy is judged on the test
    set's size; other metrics on their steps (``stats.judge_single_runs``), which claim nothing across
    processes. ``family``: the comparisons of the table this one is part of (each interval at
    ``1 - ALPHA / family``).
    """
    m = METRICS[metric] if isinstance(metric, str) else metric
    for side, rows in (("A", a), ("B", b)):
        if (why := refused(rows, m.column)) is not None:  # the row itself published no figure: no ratio either
            return dataclasses.replace(NO_DATA, note=f"side {side}'s {m.column} was refused by its own row ({why})")
    runs_a, runs_b = run_samples(a, m, reader), run_samples(b, m, reader)
    spread = floor_spread(a, b, m, reader)
    if (len(runs_a) >= MIN_RUNS and len(runs_b) >= MIN_RUNS) or (spread is not None and runs_a and runs_b):
        return compare_runs(runs_a, runs_b, higher_is_better=m.higher_is_better, timing=m.timing, floor=spread,
                            family=family, threshold=threshold, center=m.center)
    if m.column == "test_accuracy":
        judged = _accuracy(a, b, threshold)
        if judged is not None:
            return judged

    def pool(runs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(runs) if runs else np.asarray([], dtype=float)

    steps = compare(pool(runs_a), pool(runs_b), higher_is_better=m.higher_is_better, timing=m.timing,
                    threshold=threshold, confidence=1 - ALPHA / max(1, family), center=m.center)
    steps = dataclasses.replace(steps, runs_a=len(runs_a), runs_b=len(runs_b))
    return judge_single_runs(steps, noise_floor_pct(a, b, m, reader), same_process=one_process(a, b))


def refused(rows: pd.DataFrame, column: str) -> str | None:
    """Why ``rows`` published no ``column`` where every row refused it (a percentile whose interval was too wide,
    or too few samples for it: its ``<column>_status``); None where any row published it or none says why."""
    status = f"{column}_status"
    if rows.empty or status not in rows or column not in rows:
        return None
    values = pd.to_numeric(rows[column], errors="coerce")
    said = rows[status].astype(str)
    if values.notna().any() or not (said.ne("ok") & rows[status].notna()).all():
        return None
    return str(said.iloc[0])


def flagged(rows: pd.DataFrame, columns: Sequence[str]) -> bool:
    """Whether any of ``rows`` sets any of the flag ``columns``."""
    return bool(any(flag_mask(rows[c]).any() for c in columns if c in rows))


NOISE_FLAGS = ("train_step_noisy", "latency_noisy", "batch_latency_noisy", "infer_noisy")
