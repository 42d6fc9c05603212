"""The summary's other tables, computed from result rows (pandas; no plotting): one line per
configuration, the failures, model complexity, the roofline placement, repeats, batch sweeps, a tuning
study's best trial against its default, the environment manifests.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from ...instruments.samples import NOISY_IQR_OVER_MEDIAN
from ...store.rows import flag_mask
from ..evidence.selection import config_key, ok_rows
from ..evidence.stats import spread
from ..words import fmt

PAIR_COLUMNS = [
    "machine", "hardware", "device_name", "model", "dataset", "batch_size", "variant", "status", "interfered",
    "interference_cpu_pct", "train_step_noisy", "train_samples_per_s", "train_step_s_median", "train_step_s_iqr",
    "epoch_s", "val_samples_per_s",
    "train_accuracy", "test_accuracy", "test_accuracy_ci_low", "test_accuracy_ci_high", "test_samples",
    "latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "latency_ms_p99_status", "latency_n",
    "batch_latency_ms_p50", "infer_samples_per_s", "peak_rss_bytes", "peak_cuda_allocated_bytes", "params",
]


def pair_table(df: pd.DataFrame) -> pd.DataFrame:
    """One line per configuration with the headline figures, sorted for reading."""
    cols = [c for c in PAIR_COLUMNS if c in df.columns]
    return df[cols].sort_values(["machine", "hardware", "model", "batch_size", "variant"]).reset_index(drop=True)


def failures_table(df: pd.DataFrame, invalid: pd.DataFrame | None = None) -> pd.DataFrame:
    """Configurations that did not produce a measurement, with the reason; row files that could not be read
    (``invalid``: hand-edited or corrupt) are listed as ``invalid`` with theirs, never drawn."""
    cols = ["machine", "hardware", "model", "batch_size", "variant", "status", "error"]
    table = df[df["status"] != "ok"][cols]
    if invalid is not None and not invalid.empty:
        bad = pd.DataFrame({"status": "invalid", "error": invalid["reason"] + " (" + invalid["path"] + ")"})
        table = pd.concat([table, bad.reindex(columns=cols)], ignore_index=True)
    return table.reset_index(drop=True)


COMPLEXITY_COLUMNS = [
    "model",
    "image_size",
    "num_classes",
    "params",
    "macs_per_sample",
    "flops_per_sample",
    "train_flops_per_sample",
    "model_size_bytes",
    "activation_bytes_per_sample",
    "batch_size",
    "bytes_per_sample",
    "train_bytes_per_sample",
    "arithmetic_intensity",
    "train_arithmetic_intensity",
    "uncounted_ops",
]


ROOF_COLUMNS = ["machine", "hardware", "model", "batch_size", "variant", "roof_dtype", "train_arithmetic_intensity",
                "achieved_train_flops_per_s", "train_roof_flops_per_s", "roof_fraction", "arithmetic_intensity",
                "achieved_infer_flops_per_s", "infer_roof_flops_per_s", "infer_roof_fraction", "above_roof"]


def complexity_table(df: pd.DataFrame) -> pd.DataFrame:
    """Params, MACs, FLOPs, model size, bytes moved and intensity per model (and batch size)."""
    cols = [c for c in COMPLEXITY_COLUMNS if c in df.columns]
    if "flops_per_sample" not in df.columns:
        return pd.DataFrame(columns=COMPLEXITY_COLUMNS)
    have = df[df["flops_per_sample"].notna()]
    return have[cols].drop_duplicates(subset=["model", "image_size", "batch_size"]).sort_values(
        ["model", "image_size", "batch_size"]).reset_index(drop=True)


def roof_table(df: pd.DataFrame) -> pd.DataFrame:
    """Where every successful configuration sits under its measured roof."""
    good = ok_rows(df)
    cols = [c for c in ROOF_COLUMNS if c in good.columns]
    return good[cols].reset_index(drop=True)


def above_roof_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Points above their roof: a measurement error to chase, never a finding."""
    if "above_roof" not in df.columns:
        return pd.DataFrame(columns=ROOF_COLUMNS)
    flagged = df[flag_mask(df["above_roof"])]
    return flagged[[c for c in ROOF_COLUMNS if c in flagged.columns]].reset_index(drop=True)


REPEAT_METRICS = ("train_samples_per_s", "epoch_s", "test_accuracy", "latency_ms_p50", "infer_samples_per_s",
                  "peak_rss_bytes")


def repeat_summary(df: pd.DataFrame, metrics: Iterable[str] = REPEAT_METRICS) -> pd.DataFrame:
    """Per configuration over its seeds: n, median with its 95% bootstrap interval, IQR, min, max and the
    noise flag (IQR/median > 10%)."""
    good = ok_rows(df)
    if good.empty:
        return pd.DataFrame()
    good["config"] = config_key(good["run_id"].astype(str))
    keys = ["machine", "config", "hardware", "model", "batch_size", "variant"]
    out = []
    for values, grp in good.groupby(keys, sort=True):
        rec = dict(zip(keys, values))
        rec["n"] = len(grp)
        for m in metrics:
            if m not in grp:
                continue
            v = pd.to_numeric(grp[m], errors="coerce").dropna()
            if v.empty:
                continue
            q1, med, q3 = np.percentile(v, [25, 50, 75])
            _, low, high = spread(v.to_numpy(dtype=float))
            rec.update({f"{m}_median": med, f"{m}_ci_low": low, f"{m}_ci_high": high, f"{m}_iqr": q3 - q1,
                        f"{m}_min": v.min(), f"{m}_max": v.max(),
                        f"{m}_noisy": bool(med > 0 and (q3 - q1) / med > NOISY_IQR_OVER_MEDIAN)})
        out.append(rec)
    return pd.DataFrame(out)


def sweep_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per pair: the largest stable batch and the batch with the best training throughput."""
    if df.empty:
        return pd.DataFrame()
    out = []
    for (machine, hardware, model, variant), grp in df.groupby(["machine", "hardware", "model", "variant"]):
        ok = grp[grp["status"] == "ok"]
        failed = grp[grp["status"].isin(["oom", "unstable", "failed"])]
        best = ok.loc[pd.to_numeric(ok["train_samples_per_s"]).idxmax()] if not ok.empty else None
        out.append(
            {
                "machine": machine,
                "hardware": hardware,
                "model": model,
                "variant": variant,
                "batch_sizes_tried": ", ".join(map(str, sorted(grp["batch_size"].unique()))),
                "largest_stable_batch": int(ok["batch_size"].max()) if not ok.empty else None,
                "best_throughput_batch": int(best["batch_size"]) if best is not None else None,
                "best_train_samples_per_s": float(best["train_samples_per_s"]) if best is not None else None,
                "failed_batches": ", ".join(f"{int(b)} ({s})" for b, s in zip(failed["batch_size"], failed["status"]))
                or None,
            }
        )
    return pd.DataFrame(out)


def best_against_default(trials: pd.DataFrame) -> pd.DataFrame:
    """The default trial (the study's first) beside the best completed trial, per objective metric."""
    if trials.empty or "is_default" not in trials:
        return pd.DataFrame()
    done = trials[trials["state"] == "COMPLETE"]
    metrics = [m for m in ("test_accuracy", "train_samples_per_s") if m in done and done[m].notna().any()]
    default = done[done["is_default"]]
    if done.empty or default.empty or not metrics:
        return pd.DataFrame()
    best = done.loc[pd.to_numeric(done[metrics[0]]).idxmax()]
    rows = []
    for label, trial in (("default", default.iloc[0]), ("best", best)):
        rows.append({"trial": label, "number": int(trial["number"]), **{m: trial[m] for m in metrics},
                     **{k: v for k, v in trial.items() if str(k).startswith("params_")}})
    out = pd.DataFrame(rows)
    for m in metrics:
        out[f"{m}_vs_default"] = out[m] / out.loc[0, m] if out.loc[0, m] else np.nan
    return out


REPEAT_LABELS = {"train_samples_per_s": "train (samples/s)", "latency_ms_p50": "latency p50 (ms)",
                 "epoch_s": "epoch (s)", "infer_samples_per_s": "infer (samples/s)", "test_accuracy": "test accuracy",
                 "peak_rss_bytes": "peak RSS"}


def _repeat_cell(rec: pd.Series, metric: str) -> str:
    text = fmt.percent_text if metric == "test_accuracy" else (
        fmt.bytes_text if metric.endswith("_bytes") else fmt.significant)
    median = rec.get(f"{metric}_median")
    if median is None or pd.isna(median):
        return fmt.MISSING
    low, high = rec.get(f"{metric}_ci_low"), rec.get(f"{metric}_ci_high")
    interval = f" [{text(low)}, {text(high)}]" if low is not None and pd.notna(low) else ""
    return f"{text(median)}{interval}" + (" noisy" if rec.get(f"{metric}_noisy") else "")


def repeat_cells(agg: pd.DataFrame) -> pd.DataFrame:
    """A ``repeat_summary`` as read: per metric one cell, the median with its interval and ``noisy`` flag."""
    compact = agg[["model", "hardware", "variant", "batch_size", "n"]].copy()
    for metric, label in REPEAT_LABELS.items():
        if f"{metric}_median" in agg:
            compact[label] = [_repeat_cell(r, metric) for _, r in agg.iterrows()]
    return compact
