"""Whether a stored row is what it says: its identity, and its figures against the raw samples beside it.

A row file is plain JSON anyone can edit, so before a row is reported or kept on resume it is checked:

- **identity**: the file is named after the row's machine and run id, and the run id is the one its recorded
  settings make (``store.identity``: the digest of ``settings_json``, the seed, the readable fields), the
  settings columns agree with those settings. A row copied under another configuration's name fails here.
- **figures**: each headline figure a row holds (median step time, throughputs, latency percentiles, counts)
  is computed again from the row's ``samples/`` file and must agree within :data:`REL_TOLERANCE` (rounding
  only: the row was computed from those very samples). An edited number, or a figure whose samples are gone
  or out of form (:func:`~benchlib.store.samples_file.parse_samples`), fails here.

A row that fails is listed with its reason and never drawn; a resume measures it again. One samples file read
per row (one compiled pattern over the whole file), each statistic over plain floats (no numpy in the store).
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .identity import readable_head, run_id_tail, settings_digest_of
from .layout import ResultsLayout, row_key
from .samples_file import Series, read_series
from .schema import BATCHES_PER_THROUGHPUT_REPEAT

# A figure and the same figure computed again from its samples differ by float rounding alone (sums in
# another order): far below this. An edited figure differs by far more.
REL_TOLERANCE = 1e-6
# Columns a row copies straight from its settings (others, such as tf32 or threads, are resolved on the device).
SETTING_COLUMNS = ("dataset", "image_size", "variant", "precision", "seed", "optimizer", "lr", "epochs",
                   "pretrained", "freeze_backbone", "num_workers", "memory_format", "compile", "quantization",
                   "warmup_steps")


Values = list[float]


def quantile(values: Values, q: float) -> float:
    """The q-th percentile with linear interpolation between order statistics (numpy's default, as
    ``instruments.samples`` computes a row's figures); NaN of no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    h = (len(ordered) - 1) * q / 100.0
    low = math.floor(h)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (h - low) * (ordered[high] - ordered[low])


def _percentile(q: float, scale: float = 1.0) -> Callable[[Values, Mapping[str, Any]], float]:
    def of(values: Values, row: Mapping[str, Any]) -> float:
        return quantile(values, q) * scale
    return of


def _iqr(values: Values, row: Mapping[str, Any]) -> float:
    return quantile(values, 75) - quantile(values, 25)


def _count(values: Values, row: Mapping[str, Any]) -> float:
    return float(len(values))


def _total(values: Values, row: Mapping[str, Any]) -> float:
    return math.fsum(values)


def _train_rate(values: Values, row: Mapping[str, Any]) -> float:
    """Samples over the summed step times: every step a full batch (training drops the last partial one) on
    each of ``world_size`` processes."""
    world = int(row.get("world_size") or 1)
    per_rank = row.get("per_rank_batch_size") or int(row["batch_size"]) // world
    total = math.fsum(values)
    return float(per_rank) * world * len(values) / total if total > 0 else math.nan


def _infer_rate(values: Values, row: Mapping[str, Any]) -> float:
    total = math.fsum(values)
    return float(row["batch_size"]) * BATCHES_PER_THROUGHPUT_REPEAT * len(values) / total if total > 0 else math.nan


@dataclass(frozen=True)
class Figure:
    """A column of a row and how it follows from one series of its samples."""

    column: str
    series: str
    of: Callable[[Values, Mapping[str, Any]], float]


FIGURES: tuple[Figure, ...] = (
    Figure("train_step_s_median", "train_step_s", _percentile(50)),
    Figure("train_step_s_iqr", "train_step_s", _iqr),
    Figure("train_steps", "train_step_s", _count),
    Figure("train_samples_per_s", "train_step_s", _train_rate),
    Figure("data_wait_s_total", "data_wait_s", _total),
    Figure("epoch_s", "epoch_s", _percentile(50)),
    Figure("epochs_timed", "epoch_s", _count),
    Figure("infer_samples_per_s", "infer_repeat_s", _infer_rate),
    Figure("infer_repeats", "infer_repeat_s", _count),
    Figure("latency_n", "latency_s", _count),
    Figure("batch_latency_n", "batch_latency_s", _count),
    *(Figure(f"{prefix}_p{q}", series, _percentile(q, 1e3))
      for prefix, series in (("latency_ms", "latency_s"), ("batch_latency_ms", "batch_latency_s"))
      for q in (50, 90, 99)),
)


def _agrees(stored: float, again: float) -> bool:
    return math.isclose(stored, again, rel_tol=REL_TOLERANCE, abs_tol=1e-12)


def identity_problem(row: Mapping[str, Any], file_stem: str) -> str | None:
    """Why the row is not the configuration its file and run id say (None when it is)."""
    machine, run_id = str(row["machine"]), str(row["run_id"])
    if file_stem != row_key(machine, run_id):
        return f"its file is named {file_stem}.json but it holds the row of {run_id} on {machine}"
    raw, stored_digest = row.get("settings_json"), row.get("settings_digest")
    if raw is None and stored_digest is None:
        return None  # a row of a benchlib that recorded no settings: its file name is all its identity
    try:
        settings = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        settings = None
    if not isinstance(settings, dict):
        return "its settings_json is not a mapping of settings, so its run id cannot be checked"
    again = settings_digest_of(settings)
    if stored_digest != again:
        return f"its settings_digest {stored_digest!r} is not the digest of its settings ({again})"
    for column in SETTING_COLUMNS:
        if column in row and column in settings and row[column] != settings[column]:
            return f"its {column} {row[column]!r} is not its settings' {settings[column]!r}"
    return _run_id_problem(row, settings, again)


def _run_id_problem(row: Mapping[str, Any], settings: Mapping[str, Any], settings_digest: str) -> str | None:
    """The run id against the one the row's own settings make (``store.identity``)."""
    run_id = str(row["run_id"])
    tail = run_id_tail(settings_digest, int(row.get("world_size") or 1), settings.get("seed", 0))
    hardware = str(row.get("hardware"))
    heads = [readable_head(h, str(row.get("model")), row.get("batch_size"),  # type: ignore[arg-type]
                           str(settings.get("variant")), str(settings.get("precision"))) for h in (hardware, "auto")]
    head = next((h for h in heads if run_id.startswith(h)), None)
    if head is None or not run_id.endswith(tail) or len(run_id) < len(head) + len(tail):
        expected = heads[0] + "..." + tail
        return f"its run id is not the one its settings make ({expected}): a row of another configuration"
    middle = run_id[len(head):len(run_id) - len(tail)]
    swept = middle.split("__")[1:] if middle.startswith("__") else [middle] if middle else []
    spelled = {f"{k}{v}" for k, v in settings.items()}
    stray = [s for s in swept if s not in spelled]
    if stray:
        return f"its run id names {stray[0]!r}, which is not one of its settings: a row of another configuration"
    return None


def figures_problem(row: Mapping[str, Any], series: Series | None) -> str | None:
    """Why a measured row's figures are not those of its samples (None when every figure it holds agrees)."""
    for figure in FIGURES:
        stored = row.get(figure.column)
        if stored is None:
            continue
        values = (series or {}).get(figure.series, [])
        again = figure.of(values, row)
        if _agrees(float(stored), again):
            continue
        if not values:
            behind = "no samples file" if series is None else f"no {figure.series} samples"
            return f"its {figure.column} {stored!r} has {behind} behind it"
        return f"its {figure.column} {stored!r} is not what its {figure.series} samples give ({again:.6g})"
    return None


def integrity_problem(row: Mapping[str, Any], path: Path) -> str | None:
    """Why the row read from ``path`` cannot be believed (None when it can): its identity, then, for a measured
    row, its figures against its samples file (read once, strictly)."""
    problem = identity_problem(row, path.stem)
    if problem is not None or row.get("status") != "ok":
        return problem
    samples = ResultsLayout(path.parent.parent).samples_path(str(row["machine"]), str(row["run_id"]))
    try:
        series = read_series(samples, str(row["run_id"]), str(row["machine"]))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return f"its samples file {samples.name} is not a samples file: {exc}"
    return figures_problem(row, series)
