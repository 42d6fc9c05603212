"""Figures of the summary and pair notebooks; every figure is also saved as a PNG file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..roofline.ceilings import Ceilings
from ..roofline.datasheet import datasheet_for
from ..store.atomic import safe_name
from .tables import ceilings_device, device_label, ok_rows

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
    if good["variant"].nunique() > 1:
        good["device"] = good["device"] + " " + good["variant"].astype(str)
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


_INTENSITY_RANGE = (0.1, 2000.0)


def _draw_roof(ax: plt.Axes, peak: float, bandwidth: float, label: str, **style) -> None:
    lo, hi = _INTENSITY_RANGE
    xs = np.geomspace(lo, hi, 200)
    ax.plot(xs, np.minimum(peak, xs * bandwidth), label=label, **style)


def _roof_axes(title: str) -> tuple[plt.Figure, plt.Axes]:
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.25)
    return fig, ax


def _draw_points(ax: plt.Axes, rows: pd.DataFrame, colours: dict[str, Any], annotate_batch: bool) -> None:
    """Training (circles) and inference (triangles) points; a model's batch sizes joined by a line."""
    for kind, x_col, y_col, marker in (
        ("train", "train_arithmetic_intensity", "achieved_train_flops_per_s", "o"),
        ("infer", "arithmetic_intensity", "achieved_infer_flops_per_s", "^"),
    ):
        for name, grp in rows.groupby("model"):
            grp = grp[grp[x_col].notna() & grp[y_col].notna()].sort_values("batch_size")
            if grp.empty:
                continue
            ax.plot(grp[x_col], grp[y_col], marker=marker, linestyle="-" if len(grp) > 1 else "none",
                    color=colours[name], label=f"{name} ({kind})", markersize=7)
            for _, r in grp.iterrows():
                if annotate_batch:
                    ax.annotate(f"bs{int(r['batch_size'])}", (r[x_col], r[y_col]), fontsize=7,
                                xytext=(3, 3), textcoords="offset points")
                if bool(r.get("above_roof")):
                    ax.annotate("above roof: measurement error", (r[x_col], r[y_col]), color="red", fontsize=8)


def device_rooflines(df: pd.DataFrame, ceilings: list[Ceilings], figures_dir: str | Path) -> list[plt.Figure]:
    """One roofline per measured device: its roofs per dtype, datasheet roofs dashed, every workload a point."""
    good = ok_rows(df)
    models = sorted(good["model"].unique()) if not good.empty else []
    colours = dict(zip(models, sns.color_palette("tab10", max(1, len(models)))))
    figures = []
    for ceil in ceilings:
        rows = good[(good["machine"] == ceil.machine)
                    & (good["hardware"].map(ceilings_device) == ceil.device)] if not good.empty else good
        fig, ax = _roof_axes(f"{ceil.machine} {ceil.device}: {ceil.device_name}")
        for i, (dtype, peak) in enumerate(sorted(ceil.peak_flops_per_s.items())):
            if peak:
                _draw_roof(ax, peak, ceil.bandwidth_bytes_per_s, f"measured {dtype} roof",
                           color=sns.color_palette("Greys", 6)[5 - i % 4], linewidth=2)
        sheet = datasheet_for(ceil.device_name)
        if sheet:
            for dtype, peak in sheet["peak_flops_per_s"].items():
                _draw_roof(ax, peak, sheet["bandwidth_bytes_per_s"], f"datasheet {dtype} ({sheet.get('name', '')})",
                           linestyle="--", linewidth=1, alpha=0.6)
        _draw_points(ax, rows, colours, annotate_batch=rows["batch_size"].nunique() > 1 if not rows.empty else False)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        save(fig, figures_dir, f"roofline__{ceil.machine}__{ceil.device.replace(':', '')}")
        figures.append(fig)
    return figures


def model_rooflines(df: pd.DataFrame, ceilings: list[Ceilings], figures_dir: str | Path) -> list[plt.Figure]:
    """One roofline per model across devices: each device's fp32 roof and the model's points on it."""
    good = ok_rows(df)
    figures: list[plt.Figure] = []
    if good.empty or not ceilings:
        return figures
    palette = dict(zip([f"{c.machine}:{c.device}" for c in ceilings], sns.color_palette("tab10", len(ceilings))))
    for model, rows in good.groupby("model"):
        fig, ax = _roof_axes(f"{model} across devices")
        for ceil in ceilings:
            key = f"{ceil.machine}:{ceil.device}"
            peak = ceil.peak_flops_per_s.get("fp32")
            if peak:
                _draw_roof(ax, peak, ceil.bandwidth_bytes_per_s, f"{key} fp32 roof", color=palette[key], linewidth=1.5)
            mine = rows[(rows["machine"] == ceil.machine) & (rows["hardware"].map(ceilings_device) == ceil.device)]
            _draw_points(
                ax, mine.assign(model=key), {key: palette[key]}, annotate_batch=mine["batch_size"].nunique() > 1
            )
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        save(fig, figures_dir, f"roofline_model__{model}")
        figures.append(fig)
    return figures


def batch_effect(df: pd.DataFrame, figures_dir: str | Path) -> plt.Figure | None:
    """Training intensity and roof fraction against batch size: how batch moves a workload on the roofline."""
    good = ok_rows(df)
    if good.empty or good["batch_size"].nunique() < 2 or "train_arithmetic_intensity" not in good:
        return None
    good["device"] = device_label(good)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    sns.lineplot(data=good, x="batch_size", y="train_arithmetic_intensity", hue="model", style="device",
                 marker="o", ax=axes[0])
    axes[0].set_ylabel("training intensity (FLOP/byte)")
    if good["roof_fraction"].notna().any():
        sns.lineplot(data=good, x="batch_size", y="roof_fraction", hue="model", style="device", marker="o", ax=axes[1])
    axes[1].set_ylabel("achieved / roof (training)")
    for ax in axes:
        ax.set_xscale("log", base=2)
    fig.tight_layout()
    save(fig, figures_dir, "roofline_batch_effect")
    return fig


def profile_breakdowns(profiles: list[dict[str, Any]], figures_dir: str | Path) -> plt.Figure | None:
    """Step-time breakdown per profiled pair: stacked fractions of data loading, memcpy, compute, CPU exec, other."""
    if not profiles:
        return None
    frames = []
    for p in profiles:
        b = p["breakdown"].copy()
        b["pair"] = f"{p['machine']}:{p['hardware']} {p['model']} bs{p['batch_size']}"
        frames.append(b)
    wide = pd.concat(frames).pivot_table(index="pair", columns="category", values="fraction", aggfunc="sum").fillna(0)
    fig, ax = plt.subplots(figsize=(7.5, 0.6 + 0.5 * len(wide)))
    wide.mul(100).plot.barh(stacked=True, ax=ax, colormap="tab10")
    ax.set_xlabel("share of profiled step time (%)")
    ax.set_ylabel("")
    ax.set_title("step-time breakdown (torch.profiler)")
    ax.legend(fontsize=7, loc="lower right")
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
    fig, ax = plt.subplots(figsize=(7.5, 0.5 + 0.32 * len(top)))
    ax.barh(top["name"], top[col] / 1000.0)
    ax.set_xlabel(col.replace("_us", "") + " (ms, over the profiled steps)")
    ax.set_title(
        f"top operators: {profile['machine']}:{profile['hardware']} {profile['model']} bs{profile['batch_size']}"
    )
    fig.tight_layout()
    save(fig, figures_dir, safe_name(f"profile_ops__{profile['machine']}__{profile['run_id']}"))
    return fig


def batch_sweep(df: pd.DataFrame, figures_dir: str | Path) -> plt.Figure | None:
    """Throughput, memory and step time against batch size; failed batches (oom, unstable) marked."""
    if df.empty or df["batch_size"].nunique() < 2:
        return None
    data = df.copy()
    data["device"] = device_label(data)
    data["curve"] = data["model"] + " @ " + data["device"]
    good = data[data["status"] == "ok"].copy()
    memory_col = "peak_cuda_allocated_bytes" if good["peak_cuda_allocated_bytes"].notna().any() else "peak_rss_bytes"
    good["memory_mib"] = pd.to_numeric(good[memory_col], errors="coerce") / 2**20
    good["step_ms"] = pd.to_numeric(good["train_step_s_median"], errors="coerce") * 1000
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, col, label in zip(axes, ("train_samples_per_s", "memory_mib", "step_ms"),
                              ("training throughput (samples/s)", f"{memory_col.replace('_bytes', '')} (MiB)",
                               "median step time (ms)")):
        if not good.empty:
            sns.lineplot(data=good, x="batch_size", y=col, hue="curve", marker="o", ax=ax, errorbar=None,
                         legend=ax is axes[0])
        failed = data[data["status"].isin(["oom", "unstable", "failed"])]
        for _, r in failed.iterrows():
            ax.axvline(r["batch_size"], color="red", linestyle=":", alpha=0.6)
            ax.annotate(r["status"], (r["batch_size"], 0.02), xycoords=("data", "axes fraction"), color="red",
                        fontsize=7, rotation=90)
        ax.set_xscale("log", base=2)
        ax.set_ylabel(label)
    fig.suptitle("batch-size sweep (red: batch sizes that failed)")
    fig.tight_layout()
    save(fig, figures_dir, "sweep_batch_size")
    return fig


def scaling(table: pd.DataFrame, knob: str, figures_dir: str | Path) -> plt.Figure | None:
    """Throughput and parallel efficiency against threads or DataLoader workers."""
    if table.empty:
        return None
    t = table.copy()
    t["curve"] = t["model"] + " bs" + t["batch_size"].astype(str) + " @ " + t["hardware"].astype(str)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    sns.lineplot(data=t, x=knob, y="train_samples_per_s", hue="curve", marker="o", ax=axes[0])
    sns.lineplot(data=t, x=knob, y="parallel_efficiency", hue="curve", marker="o", ax=axes[1], legend=False)
    axes[0].set_ylabel("training throughput (samples/s)")
    axes[1].set_ylabel("parallel efficiency")
    axes[1].axhline(1.0, color="grey", linewidth=0.8)
    fig.tight_layout()
    save(fig, figures_dir, f"scaling_{knob}")
    return fig


def telemetry_timeline(frame: pd.DataFrame, title: str, figures_dir: str | Path, name: str) -> plt.Figure | None:
    """CPU and GPU utilization, memory, power and temperature over time, phases shaded (real samples)."""
    if frame.empty or "t_s" not in frame:
        return None
    gpus = sorted({int(c[3:].split("_")[0]) for c in frame.columns if c.startswith("gpu") and c.endswith("_util_pct")})
    panels = [
        (
            "utilization (%)",
            [("cpu_util_pct", "CPU (system)"), ("proc_cpu_util_pct", "process")]
            + [(f"gpu{i}_util_pct", f"GPU{i}") for i in gpus]
            + [(f"gpu{i}_mem_util_pct", f"GPU{i} memory") for i in gpus],
        ),
        ("memory (GiB)", [("rss_bytes", "process RSS")] + [(f"gpu{i}_mem_used_bytes", f"GPU{i} used") for i in gpus]),
    ]
    if gpus:
        panels += [("power (W)", [(f"gpu{i}_power_w", f"GPU{i}") for i in gpus]),
                   ("temperature (°C)", [(f"gpu{i}_temp_c", f"GPU{i}") for i in gpus] + [("cpu_temp_c", "CPU")])]
    else:
        panels += [("threads", [("threads", "process threads")])]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.9 * len(panels)), sharex=True)
    for ax, (label, series) in zip(np.atleast_1d(axes), panels):
        for col, legend in series:
            if col in frame and pd.to_numeric(frame[col], errors="coerce").notna().any():
                values = pd.to_numeric(frame[col], errors="coerce")
                ax.plot(frame["t_s"], values / 2**30 if col.endswith("_bytes") else values, label=legend, linewidth=1)
        if "phase" in frame:
            for i, (_phase, grp) in enumerate(frame.groupby((frame["phase"] != frame["phase"].shift()).cumsum())):
                ax.axvspan(grp["t_s"].iloc[0], grp["t_s"].iloc[-1], alpha=0.06 * (1 + i % 2), color="grey")
        ax.set_ylabel(label, fontsize=8)
        ax.legend(fontsize=7, loc="upper right")
    np.atleast_1d(axes)[-1].set_xlabel("time since the first training step (s); shading: train, eval, latency")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save(fig, figures_dir, name)
    return fig
