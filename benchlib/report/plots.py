"""Figures of the summary and pair notebooks; every figure is also saved as a PNG file.

Colours come from the Okabe-Ito palette (distinguishable with the common colour-vision deficiencies),
legends sit outside the data, and every axis says its unit. Rooflines are in ``plots_roofline``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..instruments.profiler import BREAKDOWN_CATEGORIES
from ..store.atomic import safe_name
from . import fmt
from .headline import memory_above_baseline, memory_label
from .tables import device_label, ok_rows

# Okabe & Ito (2008), yellow moved last: it reads poorly as a line on white.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442")
MEMORY_METRIC = "memory_above_baseline_bytes"

METRIC_LABELS = {
    "train_samples_per_s": "training throughput (samples/s)",
    "val_samples_per_s": "validation throughput (samples/s)",
    "infer_samples_per_s": "inference throughput at working batch (samples/s)",
    "latency_ms_p50": "inference latency, batch 1, p50 (ms)",
    MEMORY_METRIC: "peak memory above baseline (MiB)",
    "peak_rss_bytes": "peak RSS, total (MiB)",
    "peak_cuda_allocated_bytes": "peak CUDA allocated (MiB)",
    "test_accuracy": "test accuracy (%)",
    "epoch_s": "epoch time (s)",
}


def palette(n: int) -> list[str]:
    """``n`` colour-blind-safe colours (Okabe-Ito, then seaborn's colorblind palette past eight)."""
    if n <= len(OKABE_ITO):
        return list(OKABE_ITO[:max(n, 1)])
    return list(OKABE_ITO) + [str(c) for c in sns.color_palette("colorblind", n - len(OKABE_ITO)).as_hex()]


def legend_outside(ax: plt.Axes, below: bool = False, **kwargs: Any) -> None:
    """The legend to the right of the axes (``below``: under them), never over the data; nothing when empty.

    Call it after ``tight_layout`` where the legend is below, so the axes keep their size: the saved figure
    (``bbox_inches="tight"``) grows to hold it."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    anchor = (0.0, -0.16) if below else (1.01, 1.0)
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=anchor, fontsize=7, frameon=False, **kwargs)


def batch_axis(ax: plt.Axes, sizes: Any) -> None:
    """A log-2 batch-size axis ticked at the sizes measured, labelled 16, 32, 64 (not 2^4, 2^5, 2^6)."""
    ticks = sorted({int(b) for b in pd.to_numeric(pd.Series(list(sizes)), errors="coerce").dropna()})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("batch size")


def save(fig: plt.Figure, figures_dir: str | Path, name: str) -> Path:
    out = Path(figures_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


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
    values = pd.to_numeric(good[metric], errors="coerce").astype(float)
    if metric.endswith("_bytes"):
        values = values / 2**20
    elif metric == "test_accuracy":
        values = values * 100
    good = good.assign(value=values)
    hues = sorted(good["device"].unique())
    fig, ax = plt.subplots(figsize=(5.6, 3.2))
    sns.barplot(data=good, x="model", y="value", hue="device", hue_order=hues, ax=ax, errorbar=("pi", 50),
                palette=palette(len(hues)), legend=len(hues) > 1)
    label = METRIC_LABELS.get(metric, metric)
    ax.set_ylabel(label, fontsize=8)
    ax.set_xlabel("")
    title = memory_label(good) if metric == MEMORY_METRIC else label
    ax.set_title(title if len(hues) > 1 else f"{title}, {hues[0]}", fontsize=9, wrap=True)
    legend_outside(ax)
    fig.tight_layout()
    save(fig, figures_dir, metric)
    return fig


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


CATEGORY_LABELS = {"data_loading": "data loading", "memcpy": "memory copies", "compute": "compute (GPU kernels)",
                   "forward": "forward", "backward": "backward", "optimizer": "optimizer step",
                   "cpu_exec": "CPU-side execution", "other": "other"}


def profile_breakdowns(profiles: list[dict[str, Any]], figures_dir: str | Path) -> plt.Figure | None:
    """Step-time breakdown per profiled pair: stacked shares of data loading, copies, then GPU kernels and the
    host time beside them, or on a CPU the forward, backward and optimizer step; the rest as other."""
    if not profiles:
        return None
    frames = []
    for p in profiles:
        b = p["breakdown"].copy()
        b["pair"] = f"{p['machine']}:{p['hardware']} {p['model']} bs{p['batch_size']}"
        frames.append(b)
    wide = pd.concat(frames).pivot_table(index="pair", columns="category", values="fraction", aggfunc="sum").fillna(0)
    order = [c for c in BREAKDOWN_CATEGORIES if c in wide] + [c for c in wide if c not in BREAKDOWN_CATEGORIES]
    colours = dict(zip(BREAKDOWN_CATEGORIES, (OKABE_ITO[1], OKABE_ITO[3], OKABE_ITO[0], OKABE_ITO[5], OKABE_ITO[7],
                                              OKABE_ITO[4], OKABE_ITO[2], "#999999")))
    wide = wide[order].rename(columns=CATEGORY_LABELS)
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.45 * len(wide)))
    wide.mul(100).plot.barh(stacked=True, ax=ax, color=[colours.get(c, "#999999") for c in order], width=0.7)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of profiled step time (%)")
    ax.set_ylabel("")
    ax.set_title("step-time breakdown (torch.profiler)", fontsize=10)
    legend_outside(ax)
    fig.tight_layout()
    save(fig, figures_dir, "profile_step_breakdown")
    return fig


def top_operators(profile: dict[str, Any], figures_dir: str | Path, n: int = 12) -> plt.Figure | None:
    """The operators with the most self time (device time where a GPU ran, else CPU time)."""
    device = profile["top_self_device"]
    table, col = (device, "self_device_time_us") if not device.empty else (profile["top_self_cpu"], "self_cpu_time_us")
    if table.empty:
        return None
    top = table.nlargest(n, col).iloc[::-1]
    fig, ax = plt.subplots(figsize=(5.2, 0.6 + 0.3 * len(top)))
    ax.barh(top["name"], top[col] / 1000.0, color=OKABE_ITO[0])
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlabel(col.replace("_time_us", "").replace("_", " ") + " time (ms, summed over the profiled steps)")
    ax.set_title(
        f"top operators: {profile['machine']}:{profile['hardware']} {profile['model']} bs{profile['batch_size']}",
        fontsize=10)
    fig.tight_layout()
    save(fig, figures_dir, safe_name(f"profile_ops__{profile['machine']}__{profile['run_id']}"))
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


# pale fills that no line colour of the panels (blue, orange) is confused with
PHASE_COLOURS = {"train": OKABE_ITO[5], "eval": OKABE_ITO[2], "latency": OKABE_ITO[4], "infer": OKABE_ITO[7]}


def _phases(frame: pd.DataFrame) -> list[tuple[str, float, float]]:
    """Consecutive runs of one phase: (phase, start s, end s)."""
    if "phase" not in frame:
        return []
    runs = (frame["phase"] != frame["phase"].shift()).cumsum()
    return [(str(g["phase"].iloc[0]), float(g["t_s"].iloc[0]), float(g["t_s"].iloc[-1]))
            for _, g in frame.groupby(runs) if pd.notna(g["phase"].iloc[0]) and str(g["phase"].iloc[0])]


# This process's CPU use is in % of one core (up to 100 x its cores), the machine's in % of all its CPUs: the
# process gets an axis of its own on the right, labelled, rather than sharing a scale it does not have.
PROCESS_CPU = "proc_cpu_util_pct"


def _telemetry_panels(frame: pd.DataFrame) -> list[tuple[str, list[tuple[str, str]]]]:
    gpus = sorted({int(c[3:].split("_")[0]) for c in frame.columns if c.startswith("gpu") and c.endswith("_util_pct")})
    panels = [
        ("utilization (%)", [("cpu_util_pct", "CPU, all processes (% of the machine)"),
                             (PROCESS_CPU, "CPU, this process (% of one core)")]
         + [(f"gpu{i}_util_pct", f"GPU{i}") for i in gpus]
         + [(f"gpu{i}_mem_util_pct", f"GPU{i} memory") for i in gpus]),
        ("memory (GiB)", [("rss_bytes", "process RSS")] + [(f"gpu{i}_mem_used_bytes", f"GPU{i} used") for i in gpus]),
    ]
    if gpus:
        panels += [("power (W)", [(f"gpu{i}_power_w", f"GPU{i}") for i in gpus]),
                   ("temperature (°C)", [(f"gpu{i}_temp_c", f"GPU{i}") for i in gpus] + [("cpu_temp_c", "CPU")])]
    else:
        panels += [("threads", [("threads", "process threads")])]
    return panels


def _legend_of(ax: plt.Axes, right: plt.Axes | None) -> None:
    """One legend for a panel and its right-hand axis, beside the figure."""
    if right is None:
        legend_outside(ax)
        return
    handles, labels = ax.get_legend_handles_labels()
    more, more_labels = right.get_legend_handles_labels()
    ax.legend(handles + more, labels + more_labels, loc="upper left", bbox_to_anchor=(1.14, 1.0), fontsize=7,
              frameon=False)


def telemetry_timeline(frame: pd.DataFrame, title: str, figures_dir: str | Path, name: str) -> plt.Figure | None:
    """CPU and GPU utilization, memory, power and temperature over time, each phase in its colour (real samples)."""
    if frame.empty or "t_s" not in frame:
        return None
    panels = _telemetry_panels(frame)
    phases = _phases(frame)
    fig, axes = plt.subplots(len(panels), 1, figsize=(5.6, 1.7 * len(panels)), sharex=True)
    legends: list[tuple[plt.Axes, plt.Axes | None]] = []
    for ax, (label, series) in zip(np.atleast_1d(axes), panels):
        right = None
        for i, (col, legend) in enumerate(series):
            values = pd.to_numeric(frame[col], errors="coerce") if col in frame else pd.Series(dtype=float)
            if not values.notna().any():
                continue
            target = ax
            if col == PROCESS_CPU:
                right = target = ax.twinx()
                right.set_ylabel("this process\n(% of one core)", fontsize=7)
                right.set_ylim(0, max(100.0, float(values.max()) * 1.1))
                right.tick_params(labelsize=7)
            target.plot(frame["t_s"], values / 2**30 if col.endswith("_bytes") else values, label=legend,
                        linewidth=1, color=OKABE_ITO[i % len(OKABE_ITO)], linestyle="--" if col == PROCESS_CPU else "-")
        for phase, start, end in phases:
            ax.axvspan(start, end, color=PHASE_COLOURS.get(phase, "#BBBBBB"), alpha=0.12, linewidth=0)
        if label == "threads":
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if right is not None:  # the machine and the GPUs in % of themselves, on the left
            ax.set_ylim(0, 105)
            label = "% of the machine\n(GPU: of itself)" if len(series) > 2 else "% of the machine"
        ax.set_ylabel(label, fontsize=8)
        legends.append((ax, right))
    seen = list(dict.fromkeys(p for p, _, _ in phases))
    if seen:
        fig.legend([Patch(color=PHASE_COLOURS.get(p, "#BBBBBB"), alpha=0.35) for p in seen],
                   [f"phase: {p}" for p in seen], loc="lower center", ncol=len(seen), fontsize=7, frameon=False,
                   bbox_to_anchor=(0.5, -0.02))
    np.atleast_1d(axes)[-1].set_xlabel("time since the first training step (s)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.03 if seen else 0, 1, 1))
    for ax, right in legends:  # after the layout: beside the axes without squeezing them; the file grows
        _legend_of(ax, right)
    save(fig, figures_dir, name)
    return fig
