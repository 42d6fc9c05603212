"""A ``benchlib.benchmark`` result at a glance: in Jupyter, a short table with its flags and one small figure.

``benchmark`` returns every column of the results schema (a hundred of them), which is what code wants and
what a reader cannot take in. ``BenchmarkResults`` is that DataFrame; only its notebook display differs: the
figures a reader asks for first (training throughput and step spread, latency percentiles, FLOPs, the share
of the roof), what makes them less sure, how they were made, and a bar chart of training throughput saved
as a PNG beside the results. Anything derived from it (a filter, a column) is a plain DataFrame again.
"""
from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ...instruments.samples import NOISY_IQR_OVER_MEDIAN
from ...store.atomic import atomic_write_bytes, safe_name
from ..evidence.selection import ok_rows
from ..figures.style import OKABE_ITO
from ..tables.headline import headline_table
from ..words import fmt
from .show import table_html

STEP_SPREAD = "train_step_spread"  # IQR over the median of the timed step times, derived for the table
GLANCE: dict[str, tuple[str, Callable[[Any], str]]] = {
    "train (samples/s)": ("train_samples_per_s", fmt.significant),
    "train step": ("train_step_s_median", fmt.seconds_text),
    "step spread (IQR/median)": (STEP_SPREAD, fmt.percent_text),
    "latency p50 (ms)": ("latency_ms_p50", fmt.significant),
    "latency p99 (ms)": ("latency_ms_p99", fmt.significant),
    "FLOPs/sample (fwd)": ("flops_per_sample", lambda v: fmt.flops_text(v, per_s=False)),
    "share of roof (train)": ("roof_fraction", fmt.percent_text),
}
HOW_MADE = ("Each line is one run of one configuration, measured in this process: the median of its timed training "
            "steps, batch-1 latency percentiles with their own intervals, FLOPs counted by torch's FlopCounterMode, "
            f"the roof measured on this machine. Flags: noisy = a spread over {NOISY_IQR_OVER_MEDIAN:.0%} of the "
            "median; interfered = other "
            "work on the machine during the run; machine drifted = the machine's own speed moved under it. One run a "
            "side cannot tell two configurations apart beyond run-to-run noise: use benchlib.compare (verdicts with "
            "intervals) or a study with repeats.")


def with_spread(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with the step spread (IQR / median of the step times) as a column."""
    if "train_step_s_median" not in rows or "train_step_s_iqr" not in rows:
        return rows.assign(**{STEP_SPREAD: np.nan})
    median = pd.to_numeric(rows["train_step_s_median"], errors="coerce")
    return rows.assign(**{STEP_SPREAD: pd.to_numeric(rows["train_step_s_iqr"], errors="coerce") / median})


def _label(row: pd.Series) -> str:
    return f"{row['variant']}, batch {int(row['batch_size'])}"


def throughput_figure(rows: pd.DataFrame) -> Figure | None:
    """Training samples/s per configuration (samples over the summed step times), whiskers as wide relative to it
    as the middle half of its step times is relative to their median, the roof share beside."""
    good = ok_rows(rows) if not rows.empty else rows
    if good.empty or "train_samples_per_s" not in good:
        return None
    good = good[pd.to_numeric(good["train_samples_per_s"], errors="coerce").notna()]
    if good.empty:
        return None
    labels = [_label(r) for _, r in good.iterrows()]
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


def save_figure(rows: pd.DataFrame, figures_dir: Path) -> Path | None:
    """The throughput figure as a PNG under ``figures_dir`` (named after the model and device), or None."""
    fig = throughput_figure(rows)
    if fig is None:
        return None
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    model, device = (safe_name(str(rows[c].iloc[0])) for c in ("model", "hardware"))
    path = figures_dir / f"benchmark-{model}-{device}.png"
    atomic_write_bytes(path, buffer.getvalue())
    return path


def glance_html(rows: pd.DataFrame, figure: Path | None = None) -> str:
    """The short table, why figures are missing, how they were made, failures in one line each, the figure."""
    head = headline_table(with_spread(rows), GLANCE)
    table, parts = head.table, []
    if not table.empty and table["model"].nunique() == 1 and table["device"].nunique() == 1:
        parts.append(f"<p><b>{html.escape(str(table['model'].iloc[0]))}</b> on "
                     f"<b>{html.escape(str(table['device'].iloc[0]))}</b></p>")
        table = table.drop(columns=["model", "device"])
    parts.append(table_html(table, text=True) if not table.empty else "<p><em>no configuration ran</em></p>")
    parts += [f"<p style='font-size: 0.85em'>{html.escape(n)}</p>" for n in head.notes]
    failed = rows[rows["status"] != "ok"] if "status" in rows else rows.iloc[0:0]
    for _, r in failed.iterrows():
        why = str(r.get("error") or "")
        parts.append(f"<p style='font-size: 0.85em'>{html.escape(_label(r))}: {html.escape(str(r['status']))}"
                     f"{': ' + html.escape(why) if why and why != 'nan' else ''}</p>")
    parts.append(f"<p style='font-size: 0.85em; color: #555'>{html.escape(HOW_MADE)}</p>")
    if figure is not None and figure.exists():
        data = base64.b64encode(figure.read_bytes()).decode("ascii")
        parts.append(f"<img alt='training throughput per configuration' src='data:image/png;base64,{data}'/>")
    return "\n".join(parts)


class BenchmarkResults(pd.DataFrame):
    """The rows ``benchmark`` recorded, every column; Jupyter shows them at a glance (``glance_html``)."""

    @property
    def _constructor(self) -> Any:  # a filter or a new column gives a plain DataFrame, displayed in full
        return pd.DataFrame

    def _repr_html_(self) -> str:
        figure = self.attrs.get("figure_path")
        return glance_html(pd.DataFrame(self), Path(figure) if figure else None)
