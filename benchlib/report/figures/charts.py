"""Figures of measured figures: a metric per configuration, a step-time distribution, a batch sweep, a knob's
scaling, and a ``benchmark()`` result's throughput bars. Rooflines are in ``figures.roofline``; profiles in
``figures.profile``.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..evidence.selection import device_label, ok_rows
from ..tables.headline import memory_above_baseline, memory_label
from ..words import fmt
from .style import MEMORY_METRIC, METRIC_LABELS, OKABE_ITO, batch_axis, legend_outside, palette, save


def metric_bars(df: pd.DataFrame, metric: str, figures_dir: str | Path) -> plt.Figure | None:
    """Bars of ``metric`` per model, one colour per device (and variant and batch size where several).

    ``memory_above_baseline_bytes``: the peak the configuration added (CUDA allocated on GPU rows, RSS above
    the pre-model baseline elsewhere), not the process total, most of which is imported libraries.
    """
    good = ok_rows(df)
    if metric == MEMORY_METRIC and not good.empty:
        good[MEMORY_METRIC] = memory_above_baseline(good)
    good = good[pd.to_numeric(good[metric], errors="coerce").notna()] if metric in good else good.iloc[0:0]
    if good.empty:
        return None
    good["device"] = device_label(good)
    if good["variant"].nunique() > 1:
        good["device"] = good["device"] + " " + good["variant"].astype(str)
    if good["batch_size"].nunique() > 1:
        good["device"] = good["device"] + " bs" + good["batch_size"].astype(str)
    scale = 2.0**-20 if metric.endswith("_bytes") else 100.0 if metric == "test_accuracy" else 1.0  # MiB, %
    good = good.assign(value=pd.to_numeric(good[metric], errors="coerce").astype(float) * scale)
    hues = sorted(good["device"].unique())
    runs = good.groupby(["model", "device"]).size()
    own = runs.max() == 1 and {f"{metric}_ci_low", f"{metric}_ci_high"} <= set(good.columns)
    fig, ax = plt.subplots(figsize=(5.6, 3.2))
    sns.barplot(data=good, x="model", y="value", hue="device", hue_order=hues, ax=ax,
                errorbar=None if runs.max() == 1 else ("pi", 50), palette=palette(len(hues)), legend=len(hues) > 1)
    if own:
        _own_intervals(ax, good, metric, scale)
    label = METRIC_LABELS.get(metric, metric)
    ax.set_ylabel(label, fontsize=8)
    ax.set_xlabel(_whiskers(metric, runs, own), fontsize=7)
    title = memory_label(good) if metric == MEMORY_METRIC else label
    ax.set_title(title if len(hues) > 1 else f"{title}, {hues[0]}", fontsize=9, wrap=True)
    legend_outside(ax)
    fig.tight_layout()
    save(fig, figures_dir, metric)
    return fig


def _whiskers(metric: str, runs: pd.Series, own: bool) -> str:
    """What the whiskers are, under the bars: a figure without its certainty said would claim more than it holds."""
    if runs.max() > 1:
        counts = f"{runs.min()}-{runs.max()}" if runs.min() != runs.max() else f"{runs.max()}"
        return f"whiskers: the middle half of each bar's runs ({counts} runs a bar, fresh processes)"
    if own:
        of = "the test set's sampling (Wilson)" if metric == "test_accuracy" else "the run's own samples"
        return f"one run a bar; whiskers: its 95% interval over {of}, not run-to-run spread"
    return "one run a bar: no interval (repeats give one; the tables say how noisy each run was)"


def _own_intervals(ax: plt.Axes, good: pd.DataFrame, metric: str, scale: float) -> None:
    """Each bar's one run's own 95% interval, drawn where the bar stands (matched by its model and hue)."""
    models = [t.get_text() for t in ax.get_xticklabels()]
    hues = sorted(good["device"].unique())
    rows = good.set_index(["model", "device"])
    for hue, container in zip(hues, [c for c in ax.containers if isinstance(c, BarContainer)]):
        for bar in container:
            x = bar.get_x() + bar.get_width() / 2
            index = int(round(x))
            if not 0 <= index < len(models) or (models[index], hue) not in rows.index:
                continue
            row = rows.loc[(models[index], hue)]
            low, high = (pd.to_numeric(row[f"{metric}_ci_{end}"], errors="coerce") * scale for end in ("low", "high"))
            height = bar.get_height()
            if not (np.isfinite(low) and np.isfinite(high) and np.isfinite(height)):
                continue
            ax.errorbar([x], [height], yerr=[[max(height - low, 0.0)], [max(high - height, 0.0)]], fmt="none",
                        ecolor="black", elinewidth=1, capsize=3)


def step_time_distribution(samples: pd.DataFrame, title: str, figures_dir: str | Path, name: str) -> plt.Figure | None:
    """Every training step's time in order: warmup steps first, shaded and not timed, then the timed ones.

    The y axis fits the timed steps; a warmup step above it (the first one often is) is drawn on the top
    edge and its time said in the legend.
    """
    warm = pd.to_numeric(samples.loc[samples["series"] == "warmup_step_s", "value"], errors="coerce").dropna() * 1e3
    timed = pd.to_numeric(samples.loc[samples["series"] == "train_step_s", "value"], errors="coerce").dropna() * 1e3
    if timed.empty:
        return None
    x_warm = np.arange(1, len(warm) + 1)
    x_timed = np.arange(len(warm) + 1, len(warm) + len(timed) + 1)
    top = float(np.percentile(timed, 99)) * 1.25
    fig, ax = plt.subplots(figsize=(8, 3))
    if len(warm):
        ax.axvspan(0.5, len(warm) + 0.5, color="#DDDDDD", alpha=0.6, linewidth=0,
                   label=f"warmup: {len(warm)} steps, not timed")
        over = warm > top
        ax.scatter(x_warm[~over.to_numpy()], warm[~over], marker="x", s=18, color="#555555", label="warmup step")
        if over.any():
            top = max(top, float(timed.max()) * 1.05)
            ax.scatter(x_warm[over.to_numpy()], np.full(int(over.sum()), top), marker="^", s=30, color="#555555",
                       clip_on=False, label=f"warmup step off scale (up to {fmt.significant(warm.max())} ms)")
    ax.scatter(x_timed, timed, s=10, color=OKABE_ITO[0], label=f"timed step ({len(timed)})")
    median = float(np.median(timed))
    ax.axhline(median, color=OKABE_ITO[1], linewidth=1.2, label=f"median of timed steps: {fmt.significant(median)} ms")
    ax.set_ylim(0, max(top, float(timed.max()) * 1.05))
    ax.set_xlim(0.5, len(warm) + len(timed) + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("training step, in the order run")
    ax.set_ylabel("step time (ms)")
    ax.set_title(title, fontsize=9)
    legend_outside(ax)
    fig.tight_layout()
    save(fig, figures_dir, name)
    return fig


def batch_sweep(df: pd.DataFrame, figures_dir: str | Path) -> plt.Figure | None:
    """Throughput, peak memory above baseline and step time against batch size; failed batches marked."""
    if df.empty or df["batch_size"].nunique() < 2:
        return None
    data = df.copy()
    data["device"] = device_label(data)
    data["curve"] = data["model"] + " @ " + data["device"]
    for knob, word in (("variant", ""), ("threads", " threads"), ("num_workers", " workers")):
        if knob in data and data[knob].nunique() > 1:  # one curve per swept setting, never an average over it
            data["curve"] = data["curve"] + ", " + data[knob].astype(str) + word
    good = data[data["status"] == "ok"].copy()
    good["memory_mib"] = memory_above_baseline(good) / 2**20
    good["step_ms"] = pd.to_numeric(good["train_step_s_median"], errors="coerce") * 1000
    curves = sorted(good["curve"].unique())
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, col, label in zip(axes, ("train_samples_per_s", "memory_mib", "step_ms"),
                              ("training throughput (samples/s)", "peak memory above baseline (MiB)",
                               "median step time (ms)")):
        if not good.empty:
            sns.lineplot(data=good, x="batch_size", y=col, hue="curve", hue_order=curves, marker="o", ax=ax,
                         errorbar=None, legend=ax is axes[-1], palette=palette(len(curves)))
        failed = data[data["status"].isin(["oom", "unstable", "failed"])]
        for _, r in failed.iterrows():
            ax.axvline(r["batch_size"], color=OKABE_ITO[3], linestyle=":", alpha=0.8)
            ax.annotate(r["status"], (r["batch_size"], 0.02), xycoords=("data", "axes fraction"), color=OKABE_ITO[3],
                        fontsize=7, rotation=90)
        batch_axis(ax, data["batch_size"])
        ax.set_ylabel(label)
    legend_outside(axes[-1])
    fig.suptitle("batch-size sweep (dotted: batch sizes that failed)", fontsize=10)
    fig.tight_layout()
    save(fig, figures_dir, "sweep_batch_size")
    return fig


def scaling(table: pd.DataFrame, knob: str, figures_dir: str | Path) -> plt.Figure | None:
    """Throughput and parallel efficiency against threads, DataLoader workers or processes."""
    if table.empty:
        return None
    t = table.copy()
    t["curve"] = t["model"] + " bs" + t["batch_size"].astype(str) + " @ " + t["hardware"].astype(str)
    curves = sorted(t["curve"].unique())
    colours = palette(len(curves))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    sns.lineplot(data=t, x=knob, y="train_samples_per_s", hue="curve", hue_order=curves, marker="o", ax=axes[0],
                 legend=False, palette=colours)
    sns.lineplot(data=t, x=knob, y="parallel_efficiency", hue="curve", hue_order=curves, marker="o", ax=axes[1],
                 palette=colours)
    axes[0].set_ylabel("training throughput (samples/s)")
    axes[1].set_ylabel("parallel efficiency")
    axes[1].axhline(1.0, color="#999999", linewidth=0.8)
    for ax in axes:
        ax.set_xlabel({"num_workers": "DataLoader workers", "world_size": "processes"}.get(knob, knob))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    legend_outside(axes[1])
    fig.tight_layout()
    save(fig, figures_dir, f"scaling_{knob}")
    return fig


def throughput_bars(good: pd.DataFrame, labels: list[str]) -> Figure | None:
    """Training samples/s per configuration of ``good`` (named by ``labels``; samples over the summed step times),
    whiskers as wide relative to it as the middle half of its step times is relative to their median, the roof
    share beside: a ``benchmark()`` result's one figure."""
    if good.empty or "train_samples_per_s" not in good:
        return None
    keep = pd.to_numeric(good["train_samples_per_s"], errors="coerce").notna().to_numpy()
    good, labels = good[keep], [label for label, k in zip(labels, keep) if k]
    if good.empty:
        return None
    value = pd.to_numeric(good["train_samples_per_s"], errors="coerce").to_numpy(float)
    step = pd.to_numeric(good["train_step_s_median"], errors="coerce").to_numpy(float)
    half_iqr = pd.to_numeric(good.get("train_step_s_iqr"), errors="coerce").to_numpy(float) / 2
    # the spread of the steps as a relative band around the throughput (which is over the mean step)
    low = np.where(np.isfinite(half_iqr), value * step / (step + half_iqr), value)
    high = np.where(np.isfinite(half_iqr) & (step > half_iqr), value * step / np.maximum(step - half_iqr, 1e-12),
                    value)
    fig = Figure(figsize=(5.6, 0.45 * len(labels) + 1.3))
    ax = fig.subplots()
    y = np.arange(len(labels))
    ax.barh(y, value, color=OKABE_ITO[0], height=0.6)
    ax.errorbar(value, y, xerr=[np.clip(value - low, 0, None), np.clip(high - value, 0, None)], fmt="none",
                ecolor="black", capsize=3, linewidth=1)
    roof = pd.to_numeric(good.get("roof_fraction"), errors="coerce").to_numpy(float)
    for i, share in enumerate(roof):
        if np.isfinite(share):
            ax.annotate(f" {fmt.percent_text(share)} of roof", (max(high[i], value[i]), i), va="center", fontsize=7)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, float(np.nanmax(high)) * 1.35)
    ax.set_xlabel("training throughput (samples/s); whiskers: middle half of the step times", fontsize=8)
    model, device = str(good["model"].iloc[0]), str(good["hardware"].iloc[0])
    ax.set_title(f"{model} on {device}", fontsize=9)
    fig.tight_layout()
    return fig
