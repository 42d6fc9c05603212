"""Per-layer roofline figures: each layer of a training step under this machine's measured roof.

Left, the layers with counted FLOPs (convolutions, linear layers) at their intensity and achieved FLOP/s,
under the roof of the run's dtype. Right, the layers whose arithmetic no counter counts (batch norms,
ReLUs, pooling): their achieved bandwidth against the DRAM roof, by the bytes one call moves, with the
last-level cache's size marked (left of it a layer can beat DRAM). Points are sized by their share of the
step and coloured by phase; a point above its roof is ringed in red.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...store.atomic import safe_name
from ..words import fmt
from .roofline import roof_label
from .style import OKABE_ITO, legend_outside, save

PHASE_COLOURS = {"forward": OKABE_ITO[0], "backward": OKABE_ITO[1], "optimizer": OKABE_ITO[2]}
_MAX_POINT_AREA = 400.0


def _sizes(share: pd.Series) -> np.ndarray:
    return 12.0 + _MAX_POINT_AREA * np.sqrt(pd.to_numeric(share, errors="coerce").fillna(0).clip(lower=0).to_numpy())


def _scatter(ax: plt.Axes, rows: pd.DataFrame, x: pd.Series, y: pd.Series) -> None:
    for phase, colour in PHASE_COLOURS.items():
        mine = rows["phase"] == phase
        if mine.any():
            ax.scatter(x[mine], y[mine], s=_sizes(rows.loc[mine, "share"]), color=colour, alpha=0.7,
                       edgecolors="white", linewidths=0.5, label=phase)
    above = rows["above_roof"].fillna(False).astype(bool)
    if above.any():
        ax.scatter(x[above], y[above], s=_sizes(rows.loc[above, "share"]) * 1.6, facecolors="none",
                   edgecolors="red", linewidths=1.2, label="above its roof")


def _axes(ax: plt.Axes, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)


def layer_roofline(report: dict[str, Any], figures_dir: str | Path) -> plt.Figure:
    """The two panels for one saved per-layer report (``readback.layers``), saved as PNG under ``figures_dir``."""
    table = report["table"]
    peak, bandwidth = float(report["peak_flops_per_s"]), float(report["bandwidth_bytes_per_s"])
    flops = pd.to_numeric(table["flops"], errors="coerce")
    time_s = pd.to_numeric(table["time_s"], errors="coerce")
    moved = pd.to_numeric(table["bytes"], errors="coerce")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.2))
    counted = table[(flops > 0) & (time_s > 0)]
    intensity = pd.to_numeric(counted["intensity_flops_per_byte"], errors="coerce")
    if not counted.empty:
        xs = np.geomspace(max(float(intensity.min()) / 3, 0.1), max(float(intensity.max()) * 3, 1e3), 200)
        left.plot(xs, np.minimum(peak, xs * bandwidth), color="black", linewidth=1.2,
                  label=roof_label(str(report.get("roof_dtype", "fp32")), peak, bandwidth))
        _scatter(left, counted, intensity, flops[counted.index] / time_s[counted.index])
        left.legend(fontsize=7, loc="lower right")
    _axes(left, "arithmetic intensity (FLOP/byte)", "achieved FLOP/s", "layers with counted FLOPs")
    plain = table[(flops.fillna(0) == 0) & (moved > 0) & (time_s > 0)]
    if not plain.empty:
        per_call = moved[plain.index] / pd.to_numeric(plain["calls"], errors="coerce").clip(lower=1)
        _scatter(right, plain, per_call, moved[plain.index] / time_s[plain.index])
        right.axhline(bandwidth, color="black", linewidth=1.2, label=f"DRAM roof {fmt.bandwidth_text(bandwidth)}")
        if report.get("cache_bytes"):
            right.axvline(float(report["cache_bytes"]), color="grey", linestyle=":",
                          label=f"last-level cache {fmt.bytes_text(report['cache_bytes'])}")
    _axes(right, "bytes moved per call", "achieved bytes/s", "layers without counted FLOPs")
    about = f"{report.get('model', '')} on {report.get('device', '')}, batch {report.get('batch_size', '')}"
    fig.suptitle(f"{about}: each layer of a training step against its roof (size: share of the step)",
                 fontsize=11)
    fig.tight_layout()
    legend_outside(right)
    save(fig, figures_dir, safe_name(f"layers_{report.get('machine', '')}_{report.get('run_id', '')}"))
    return fig
