"""Figures of the summary and pair notebooks; every figure is also saved as a PNG file."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from .report import device_label, ok_rows

METRIC_LABELS = {
    "train_samples_per_s": "training throughput (samples/s)",
    "val_samples_per_s": "validation throughput (samples/s)",
    "infer_samples_per_s": "inference throughput at working batch (samples/s)",
    "latency_ms_p50": "inference latency, batch 1, p50 (ms)",
    "peak_rss_bytes": "peak RSS (MiB)",
    "peak_cuda_allocated_bytes": "peak CUDA allocated (MiB)",
    "test_accuracy": "test accuracy (top-1)",
    "epoch_s": "epoch time (s)",
}


def save(fig: plt.Figure, figures_dir: str | Path, name: str) -> Path:
    out = Path(figures_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def metric_bars(df: pd.DataFrame, metric: str, figures_dir: str | Path) -> plt.Figure | None:
    """Bars of ``metric`` per model, one colour per device (and batch size where several)."""
    good = ok_rows(df)
    good = good[good[metric].notna()] if metric in good else good.iloc[0:0]
    if good.empty:
        return None
    good["device"] = device_label(good)
    if good["batch_size"].nunique() > 1:
        good["device"] = good["device"] + " bs" + good["batch_size"].astype(str)
    values = good[metric].astype(float)
    if metric.endswith("_bytes"):
        values = values / 2**20
    good = good.assign(value=values)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    sns.barplot(data=good, x="model", y="value", hue="device", ax=ax, errorbar=("pi", 50))
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_xlabel("")
    ax.set_title(METRIC_LABELS.get(metric, metric))
    fig.tight_layout()
    save(fig, figures_dir, metric)
    return fig


def step_time_distribution(samples: pd.DataFrame, title: str, figures_dir: str | Path, name: str) -> plt.Figure | None:
    """Per-step training time over the run (warmup shown apart): where the median comes from."""
    steps = samples[samples["series"].isin(["warmup_step_s", "train_step_s"])].copy()
    if steps.empty:
        return None
    steps["step"] = range(len(steps))
    steps["ms"] = steps["value"] * 1000
    fig, ax = plt.subplots(figsize=(7, 3))
    sns.scatterplot(data=steps, x="step", y="ms", hue="series", ax=ax, s=14)
    ax.set_ylabel("step time (ms)")
    ax.set_title(title)
    fig.tight_layout()
    save(fig, figures_dir, name)
    return fig
