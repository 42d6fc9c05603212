"""Figures of saved profiles: where a step's time goes (the breakdown by category) and the operators that
take the most time.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from ...instruments.profiler import BREAKDOWN_CATEGORIES
from ...store.atomic import safe_name
from .style import OKABE_ITO, legend_outside, save

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
