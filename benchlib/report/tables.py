"""Tables the summary shows, computed from result rows (pandas; no plotting).

Ratios carry their interval and verdict (see ``stats``), from the raw samples kept beside the rows; a
``reader`` gives a row's samples (by default from the row's results folder; tests pass their own).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ..instruments.timing import NOISY_IQR_OVER_MEDIAN
from ..spec.settings import SEED_SUFFIX
from ..store.rows import flag_mask, invalid_rows, read_results
from .evidence import SampleFiles, SampleReader, compare_rows
from .stats import spread

PAIR_COLUMNS = [
    "machine", "hardware", "device_name", "model", "dataset", "batch_size", "variant", "status", "interfered",
    "interference_cpu_pct", "train_step_noisy", "train_samples_per_s", "train_step_s_median", "train_step_s_iqr",
    "epoch_s", "val_samples_per_s",
    "train_accuracy", "test_accuracy", "test_accuracy_ci_low", "test_accuracy_ci_high", "test_samples",
    "latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "latency_ms_p99_status", "latency_n",
    "batch_latency_ms_p50", "infer_samples_per_s", "peak_rss_bytes", "peak_cuda_allocated_bytes", "params",
]
SPEEDUP_METRICS = {"train_samples_per_s": "higher", "infer_samples_per_s": "higher", "latency_ms_p50": "lower"}


def load(results_dirs: Iterable[str]) -> pd.DataFrame:
    """Every valid row of the given results folders, merged and de-duplicated; the invalid ones, with why,
    in ``attrs["invalid_rows"]``."""
    dirs = list(results_dirs)
    df = read_results(dirs)
    df.attrs["invalid_rows"] = invalid_rows(dirs)
    return df


def device_label(df: pd.DataFrame) -> pd.Series:
    """'machine:hardware' where rows come from several machines, else the hardware name."""
    if df["machine"].nunique() > 1:
        return df["machine"].astype(str) + ":" + df["hardware"].astype(str)
    return df["hardware"].astype(str)


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"].copy()


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
    out = []
    for (model, batch), grp in good.groupby(["model", "batch_size"]):
        sides = {d: rows for d, rows in grp.groupby("device")}
        for a, b in itertools.permutations(sorted(sides), 2):
            va = pd.to_numeric(sides[a][metric], errors="coerce").median()
            vb = pd.to_numeric(sides[b][metric], errors="coerce").median()
            if not (np.isfinite(va) and np.isfinite(vb)) or va <= 0 or vb <= 0:
                continue
            c = compare_rows(sides[a], sides[b], metric, reader)
            out.append({"model": model, "batch_size": batch, "device_a": a, "device_b": b, metric + "_a": va,
                        metric + "_b": vb, "speedup": c.ratio, "ci_low": c.ci_low, "ci_high": c.ci_high,
                        "p_value": c.p_value, "verdict": c.verdict, "level": c.level, "speedup_text": c.text()})
    return pd.DataFrame(out, columns=columns)


def speedup_matrix(df: pd.DataFrame, metric: str = "train_samples_per_s",
                   reader: SampleReader | None = None) -> pd.DataFrame:
    """Speedups as a wide table: rows (model, batch, device A), columns device B, cells
    ``ratio [low, high] verdict``."""
    long = speedup_table(df, metric, reader)
    if long.empty:
        return long
    return long.pivot_table(index=["model", "batch_size", "device_a"], columns="device_b", values="speedup_text",
                            aggfunc="first").fillna("")


def devices_count(df: pd.DataFrame) -> int:
    good = ok_rows(df)
    return 0 if good.empty else int(device_label(good).nunique())


def human_bytes(n: float | None) -> str:
    if n is None or not np.isfinite(n):
        return ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


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


def ceilings_device(hardware: str) -> str:
    """The ceilings file's device name for a row's hardware ('cuda' runs on cuda:0)."""
    return "cuda:0" if hardware == "cuda" else hardware


REPEAT_METRICS = ("train_samples_per_s", "epoch_s", "test_accuracy", "latency_ms_p50", "infer_samples_per_s",
                  "peak_rss_bytes")


def config_key(run_id: pd.Series) -> pd.Series:
    """A run_id without its seed: the configuration that repeats share."""
    return run_id.astype(str).str.replace(SEED_SUFFIX, "", regex=True)


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


def scaling_table(df: pd.DataFrame, knob: str, reader: SampleReader | None = None) -> pd.DataFrame:
    """Throughput against a parallelism knob (threads, num_workers or world_size): speedup with its interval
    and verdict, and parallel efficiency.

    Speedup is against the smallest value measured; efficiency = speedup / (value / smallest value).
    """
    good = ok_rows(df)
    if good.empty or knob not in good or good[knob].nunique() < 2:
        return pd.DataFrame()
    reader = reader or SampleFiles()
    out = []
    for keys, grp in good.groupby(["machine", "hardware", "model", "batch_size"]):
        by_value = {n: rows for n, rows in sorted(grp.groupby(knob), key=lambda item: item[0])}
        base_n = next(iter(by_value))
        base_rows = by_value[base_n]
        base = pd.to_numeric(base_rows["train_samples_per_s"], errors="coerce").median()
        for n, rows in by_value.items():
            v = pd.to_numeric(rows["train_samples_per_s"], errors="coerce").median()
            c = compare_rows(rows, base_rows, "train_samples_per_s", reader)
            ratio = n / base_n if base_n else np.nan
            out.append({"machine": keys[0], "hardware": keys[1], "model": keys[2], "batch_size": keys[3], knob: n,
                        "train_samples_per_s": v, "speedup": v / base, "ci_low": c.ci_low, "ci_high": c.ci_high,
                        "verdict": c.verdict if n != base_n else "baseline", "level": c.level, "note": c.note,
                        "speedup_text": c.text(),
                        "parallel_efficiency": (v / base) / ratio if ratio else np.nan})
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


BASELINE_VARIANTS = ("default", "cpu-default", "gpu-default")


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
    out = []
    for keys, grp in good.groupby(["machine", "hardware", "model", "batch_size"]):
        base_rows = grp[grp["variant"].isin(BASELINE_VARIANTS)]
        if base_rows.empty:
            continue
        baseline = str(base_rows["variant"].iloc[0])
        base_rows = base_rows[base_rows["variant"] == baseline]
        for variant, rows in grp.groupby("variant", sort=False):
            rec: dict[str, Any] = {"machine": keys[0], "hardware": keys[1], "model": keys[2], "batch_size": keys[3],
                                   "variant": variant, "baseline": baseline}
            for column, (metric, label) in VARIANT_RATIOS.items():
                c = compare_rows(rows, base_rows, metric, reader)
                rec[column] = c.ratio
                rec[f"{label}_verdict"] = c.verdict
                rec[f"{label}_level"] = c.level
                rec[f"{label}_note"] = c.note
                rec[label] = c.text()

            def median(rows: pd.DataFrame, col: str) -> float:
                return float(pd.to_numeric(rows[col], errors="coerce").median()) if col in rows else np.nan

            acc, base_acc = median(rows, "test_accuracy"), median(base_rows, "test_accuracy")
            rec["accuracy_delta_pts"] = (acc - base_acc) * 100
            for col, name in (("peak_rss_bytes", "peak_memory_ratio"), ("model_size_bytes", "model_size_ratio")):
                num, den = median(rows, col), median(base_rows, col)
                rec[name] = num / den if np.isfinite(num) and np.isfinite(den) and den > 0 else np.nan
            out.append(rec)
    return pd.DataFrame(out)
