"""The summary's compact tables: the headline figures of every configuration, and the study's settings.

A reader compares configurations on a dozen figures, not on the row's hundred columns: model, device,
variant and batch, throughput, latency p50/p99, peak memory above the baseline (what the configuration
added: CUDA allocated on GPU rows, resident memory elsewhere), accuracy and energy, in human units with one
rounding rule. A missing figure is an en dash, and why it is missing is said under the table.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ...store.identity import settings_of
from ...store.rows import flag_mask
from ..evidence.samples import NOISE_FLAGS, SampleReader, figure
from ..evidence.selection import column_median, config_key, device_label, ok_rows
from ..readback.samples import SampleFiles
from ..words import fmt

# shown name -> (row column, formatter); the row column is aggregated as the median over seeds
HEADLINE: dict[str, tuple[str, Callable[[Any], str]]] = {
    "train (samples/s)": ("train_samples_per_s", fmt.significant),
    "infer (samples/s)": ("infer_samples_per_s", fmt.significant),
    "latency p50 (ms)": ("latency_ms_p50", fmt.significant),
    "latency p99 (ms)": ("latency_ms_p99", fmt.significant),
    "peak memory above baseline": ("memory_above_baseline_bytes", fmt.bytes_text),
    "test accuracy": ("test_accuracy", fmt.percent_text),
    "train energy (J/sample)": ("train_energy_j_per_sample", fmt.significant),
}
# why a figure may be missing: row column -> the column that says why
REASONS = {"train_energy_j_per_sample": "train_energy_unmeasurable"}
# percentiles published only with enough samples and a narrow interval: row column -> its status column
PERCENTILE_STATUS = {"latency_ms_p50": "latency_ms_p50_status", "latency_ms_p99": "latency_ms_p99_status"}
# figures shown with their 95% interval: row column -> (low, high) columns, each the median over seeds
INTERVALS = {"test_accuracy": ("test_accuracy_ci_low", "test_accuracy_ci_high")}
# throughputs shown as every comparison takes them (``samples.figure``: each run's samples over its summed timed
# work, geometric mean over the runs), so a ratio printed elsewhere divides out from the headline's figures
AS_COMPARED = ("train_samples_per_s", "infer_samples_per_s")


def memory_above_baseline(df: pd.DataFrame) -> pd.Series:
    """Peak memory the configuration added: CUDA allocated peak on CUDA rows, else peak RSS above the baseline."""
    def column(name: str) -> pd.Series:
        return pd.to_numeric(df[name], errors="coerce") if name in df else pd.Series(float("nan"), index=df.index)

    rss = column("peak_rss_above_baseline_bytes")
    rss = rss.fillna(column("peak_rss_bytes") - column("rss_baseline_bytes"))
    cuda = column("peak_cuda_allocated_bytes")
    on_gpu = df["hardware"].astype(str).str.startswith("cuda") if "hardware" in df else False
    return cuda.where(on_gpu & cuda.notna(), rss)


def memory_label(df: pd.DataFrame) -> str:
    """What the memory figure measures, for a caption."""
    gpu = "hardware" in df and df["hardware"].astype(str).str.startswith("cuda").any()
    return ("peak memory above baseline: CUDA allocated on GPU rows, resident (RSS) above the pre-model baseline "
            "elsewhere" if gpu else "peak resident memory (RSS) above the pre-model baseline")


@dataclass
class Headline:
    """The table as text cells, and one line per kind of missing figure saying why."""

    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def flags(rows: pd.DataFrame) -> str:
    """What makes the rows' figures less sure, comma-separated: interfered, machine drifted, noisy, above roof."""
    out = []
    if "interfered" in rows and flag_mask(rows["interfered"]).any():
        out.append("interfered")
    if "machine_drifted" in rows and flag_mask(rows["machine_drifted"]).any():
        out.append("machine drifted")
    if any(c in rows and flag_mask(rows[c]).any() for c in NOISE_FLAGS):
        out.append("noisy")
    if "above_roof" in rows and flag_mask(rows["above_roof"]).any():
        out.append("above roof")
    return ", ".join(out)


GENERIC_REASON = "not measured for this configuration"


def _reason(rows: pd.DataFrame, column: str) -> str:
    """Why ``column`` has no value in ``rows``: the row's own reason column where it has one."""
    trained_by = rows["weights_trained_by"].dropna() if "weights_trained_by" in rows else pd.Series(dtype=str)
    if column.startswith("train_") and not trained_by.astype(str).str.strip().eq("").all():
        return "it trains nothing: it evaluates the weights another configuration trained"
    why = REASONS.get(column)
    values = [str(v) for v in rows[why].dropna()] if why and why in rows else []
    values = [v for v in values if v.strip() and v.lower() not in ("nan", "none")]
    return values[0] if values else GENERIC_REASON


def _refused(rows: pd.DataFrame, column: str) -> str | None:
    """The status of a percentile that some run of the configuration did not publish (None: every run did)."""
    status = PERCENTILE_STATUS.get(column)
    if status is None or status not in rows:
        return None
    return next((str(s) for s in rows[status] if fmt.percentile_reason(s) is not None), None)


def _cell(rows: pd.DataFrame, column: str, text: Callable[[Any], str],
          reader: SampleReader | None = None) -> tuple[str, str | None]:
    """A figure's cell (the median over the configuration's runs; a throughput as compared, ``AS_COMPARED``)
    and, when it has no value, why.

    A percentile that any run refused is shown as refused, with its reason: a median over the runs that
    did publish it would be a figure from fewer runs than the line claims.
    """
    refused = _refused(rows, column)
    if refused is not None:
        return fmt.percentile_text(None, refused), refused
    value = figure(rows, column, reader or SampleFiles()) if column in AS_COMPARED else math.nan
    value = value if math.isfinite(value) else column_median(rows, column)
    if column in INTERVALS:
        low, high = (column_median(rows, c) for c in INTERVALS[column])
        shown = fmt.accuracy_text(value, low, high)
    else:
        shown = text(value)
    status = PERCENTILE_STATUS.get(column)
    if status in rows and shown != fmt.MISSING and rows[status].astype(str).str.startswith(fmt.WIDE).any():
        shown += f" ({fmt.WIDE})"  # a busy host's figure: given, and said to be less sure than a quiet one's
    return shown, (_reason(rows, column) if shown == fmt.MISSING else None)


def _notes(missing: dict[str, dict[str, int]], total: int, empty: list[str]) -> list[str]:
    """One line per column with missing values: where and why (a specific reason hides the generic one)."""
    notes = []
    for shown, reasons in missing.items():
        named = {r: n for r, n in reasons.items() if r != GENERIC_REASON} or reasons
        why = "; ".join(named)
        if shown in empty:
            notes.append(f"{shown}: not measured in any configuration ({why})")
        else:
            notes.append(f"{shown}: {fmt.MISSING} in {sum(reasons.values())} of {total} configurations ({why})")
    return notes


def headline_table(df: pd.DataFrame, columns: Mapping[str, tuple[str, Callable[[Any], str]]] = HEADLINE,
                   reader: SampleReader | None = None) -> Headline:
    """One line per configuration (the median over its seeds; throughputs as compared, ``AS_COMPARED``), in
    human units; sorted by model, device, variant.

    ``columns``: shown name -> (row column, formatter), the summary's dozen figures unless told otherwise.
    """
    reader = reader or SampleFiles()
    good = ok_rows(df) if not df.empty else df
    if good.empty:
        return Headline(pd.DataFrame())
    good = good.assign(device=device_label(good), config=config_key(good["run_id"].astype(str)),
                       memory_above_baseline_bytes=memory_above_baseline(good))
    records: list[dict[str, Any]] = []
    missing: dict[str, dict[str, int]] = {}
    seeds = good.groupby(["device", "config"])["run_id"].count().max() > 1
    for (device, _), rows in sorted(good.groupby(["device", "config"]), key=lambda item: (
            str(item[1]["model"].iloc[0]), item[0][0], str(item[1]["variant"].iloc[0]),
            int(item[1]["batch_size"].iloc[0]))):
        first = rows.iloc[0]
        rec: dict[str, Any] = {"model": first["model"], "device": device, "variant": first["variant"],
                               "batch": int(first["batch_size"])}
        if seeds:
            rec["runs"] = len(rows)
        for shown, (column, text) in columns.items():
            rec[shown], why = _cell(rows, column, text, reader)
            if why is not None:
                reasons = missing.setdefault(shown, {})
                reasons[why] = reasons.get(why, 0) + 1
        rec["flags"] = flags(rows) or fmt.MISSING
        records.append(rec)
    table = pd.DataFrame(records)
    empty = [c for c in columns if (table[c] == fmt.MISSING).all()]
    notes = _notes(missing, len(table), empty)
    table = table.drop(columns=empty + (["flags"] if (table["flags"] == fmt.MISSING).all() else []))
    return Headline(table, notes)


# The study's settings
# ----------------------------------------------------------------------------------------------------------

GRID = {"hardware": "devices", "device_name": "device names", "model": "models", "batch_size": "batch sizes",
        "variant": "variants", "seed": "seeds", "dataset": "data set", "image_size": "image size (px)"}
FIRST = ("epochs", "train_steps", "warmup_steps", "optimizer", "lr", "momentum", "weight_decay", "precision",
         "threads", "num_workers", "latency_repeats", "latency_budget_s", "infer_warmup_batches", "train_subset",
         "test_subset")


def _listed(values: list[Any]) -> str:
    """Distinct values in order (numbers by value, text alphabetically), as text."""
    distinct = {v for v in values if fmt.value_text(v) != fmt.MISSING}
    numbers = sorted(v for v in distinct if isinstance(v, int | float) and not isinstance(v, bool))
    texts = sorted(str(v) for v in distinct if not (isinstance(v, int | float) and not isinstance(v, bool)))
    return ", ".join([fmt.value_text(v) for v in numbers] + texts) or fmt.MISSING


def _setting_text(value: Any) -> str:
    """A setting as it was given (settings are inputs, not measurements: no rounding)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


UNSET = "unset"  # a setting left to benchlib's choice in some configurations


def settings_table(df: pd.DataFrame, main: bool = True) -> pd.DataFrame:
    """The study's grid and the settings its configurations ran with (``varies`` where they differ).

    ``main``: the grid and the training and timing settings a reader looks for first; else every other
    setting with a value. Columns ``setting`` and ``value``.
    """
    if df.empty:
        return pd.DataFrame(columns=["setting", "value"])
    rows: list[dict[str, str]] = []
    if main:
        rows += [{"setting": name, "value": _listed(df[column].dropna().tolist())}
                 for column, name in GRID.items() if column in df]
    parsed = [p for s in df.get("settings_json", pd.Series(dtype=str)).dropna() if (p := settings_of(s))]
    settings = pd.DataFrame(parsed)
    keys = [k for k in FIRST if k in settings] if main else sorted(k for k in settings if k not in FIRST)
    for key in keys:
        if key in GRID:
            continue
        given = [p[key] for p in parsed if key in p]  # a row written before the setting existed says nothing
        values = [v for v in given if v is not None and not (isinstance(v, float) and pd.isna(v))]
        if not values:
            continue
        # left unset (benchlib chose: threads from the CPU affinity, for one) beside a value: the study varied it
        texts = sorted({_setting_text(v) for v in values} | ({UNSET} if len(values) < len(given) else set()))
        rows.append({"setting": key, "value": ", ".join(texts) + (" (varies)" if len(texts) > 1 else "")})
    return pd.DataFrame(rows, columns=["setting", "value"])
