"""The telemetry timeline: utilization, memory, power and temperature over a run, each phase (train,
eval, latency) shaded in its colour; the machine's CPU and this process's CPU on two labelled axes.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from .style import OKABE_ITO, legend_outside, save

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
