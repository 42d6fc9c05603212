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

from ...instruments.samples import NOISY_IQR_OVER_MEDIAN
from ...store.atomic import atomic_write_bytes
from ...store.layout import ResultsLayout
from ..evidence.selection import ok_rows
from ..figures import charts
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


def save_figure(rows: pd.DataFrame, results: ResultsLayout) -> tuple[Path, bytes] | None:
    """The throughput figure as a PNG under the results folder's figures (named after the model and device),
    with its bytes, which the glance shows without reading the file back."""
    good = ok_rows(rows) if not rows.empty else rows
    fig = charts.throughput_bars(good, [_label(r) for _, r in good.iterrows()]) if not good.empty else None
    if fig is None:
        return None
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    path = results.benchmark_figure(str(rows["model"].iloc[0]), str(rows["hardware"].iloc[0]))
    atomic_write_bytes(path, buffer.getvalue())
    return path, buffer.getvalue()


def glance_html(rows: pd.DataFrame, png: bytes | None = None) -> str:
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
    if png:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f"<img alt='training throughput per configuration' src='data:image/png;base64,{data}'/>")
    return "\n".join(parts)


class BenchmarkResults(pd.DataFrame):
    """The rows ``benchmark`` recorded, every column; Jupyter shows them at a glance (``glance_html``)."""

    @property
    def _constructor(self) -> Any:  # a filter or a new column gives a plain DataFrame, displayed in full
        return pd.DataFrame

    def _repr_html_(self) -> str:
        png = self.attrs.get("figure_png")
        return glance_html(pd.DataFrame(self), png if isinstance(png, bytes) else None)
