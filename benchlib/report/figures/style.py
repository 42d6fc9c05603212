"""How every figure looks and where it goes: the Okabe-Ito palette (distinguishable with the common
colour-vision deficiencies), legends outside the data, integer batch axes, metric labels with units, and
the PNG every figure is also saved as.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from ...store.atomic import atomic_write_bytes

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
    buffer = io.BytesIO()  # drawn whole first, then written atomically: a full disk tears no figure
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    atomic_write_bytes(path, buffer.getvalue())
    return path
