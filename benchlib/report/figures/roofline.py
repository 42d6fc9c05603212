"""Roofline figures: each device's measured roofs with its workloads, models across devices, the batch effect.

Only the ceilings of dtypes that have points are drawn (a bf16 roof over fp32 points says nothing), each
in its own line style with its peak, bandwidth and ridge point in the legend; datasheet roofs are thin
and grey. A figure "across devices" is drawn only where a model ran on two devices or more.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ...roofline.datasheet import datasheet_for
from ...roofline.measured import Ceilings
from ...store.atomic import safe_name
from ..evidence.selection import BASELINE_VARIANTS, device_label, ok_rows
from ..readback.roofs import ceilings_device
from ..words import fmt
from .style import OKABE_ITO, batch_axis, legend_outside, palette, save

DTYPE_STYLES = {"fp32": "-", "tf32": (0, (5, 1)), "bf16": "--", "fp16": "-.", "int8": ":"}
_INTENSITY_RANGE = (0.1, 2000.0)
_POINTS = (("training", "train_arithmetic_intensity", "achieved_train_flops_per_s", "o"),
           ("inference", "arithmetic_intensity", "achieved_infer_flops_per_s", "^"))


def roof_label(dtype: str, peak: float, bandwidth: float, source: str = "measured") -> str:
    """'measured fp32 roof: 120 GFLOP/s, 13.1 GB/s, ridge 9.16 FLOP/byte'."""
    return (f"{source} {dtype} roof: {fmt.flops_text(peak)}, {fmt.bandwidth_text(bandwidth)}, "
            f"ridge {fmt.significant(peak / bandwidth)} FLOP/byte")


def dtypes_of(rows: pd.DataFrame) -> list[str]:
    """The roof dtypes the rows ran under (fp32 where a row does not say)."""
    if rows.empty:
        return []
    found = rows["roof_dtype"].dropna().astype(str) if "roof_dtype" in rows else pd.Series(dtype=str)
    return sorted(set(found) or {"fp32"}, key=lambda d: list(DTYPE_STYLES).index(d) if d in DTYPE_STYLES else 99)


def _span(rows: pd.DataFrame) -> tuple[float, float]:
    xs = pd.concat([pd.to_numeric(rows[c], errors="coerce") for _, c, _, _ in _POINTS if c in rows]).dropna()
    xs = xs[xs > 0]
    lo, hi = _INTENSITY_RANGE
    return (min(lo, float(xs.min()) / 3), max(hi, float(xs.max()) * 3)) if not xs.empty else (lo, hi)


def _draw_roof(ax: plt.Axes, peak: float, bandwidth: float, span: tuple[float, float], label: str,
               **style: Any) -> None:
    xs = np.geomspace(span[0], span[1], 200)
    ax.plot(xs, np.minimum(peak, xs * bandwidth), label=label, **style)


def _roof_axes(title: str) -> tuple[plt.Figure, plt.Axes]:
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    return fig, ax


def _draw_points(ax: plt.Axes, rows: pd.DataFrame, colours: dict[str, Any], roofed: set[str],
                 annotate_batch: bool) -> None:
    """Training (circles) and inference (triangles) points per ``series``, its batch sizes joined by a line.

    A point whose dtype has no measured roof (int8 on a CPU) is hollow and says so: it has nothing to sit under.
    """
    for kind, x_col, y_col, marker in _POINTS:
        if x_col not in rows or y_col not in rows:
            continue
        for (name, dtype), grp in rows.groupby(["series", "dtype"]):
            grp = grp[grp[x_col].notna() & grp[y_col].notna()].sort_values("batch_size")
            if grp.empty:
                continue
            hollow = dtype not in roofed
            ax.plot(grp[x_col], grp[y_col], marker=marker, linestyle="-" if len(grp) > 1 else "none",
                    color=colours[name], markerfacecolor="none" if hollow else colours[name],
                    label=f"{name} ({kind}" + (f"; {dtype}: no measured roof)" if hollow else ")"), markersize=7,
                    linewidth=1)
            for _, r in grp.iterrows():
                if annotate_batch:
                    ax.annotate(f"bs{int(r['batch_size'])}", (r[x_col], r[y_col]), fontsize=7,
                                xytext=(3, 3), textcoords="offset points")
                if bool(r.get("above_roof")):
                    ax.annotate("above roof: measurement error", (r[x_col], r[y_col]), color=OKABE_ITO[3],
                                fontsize=8)


def _series(rows: pd.DataFrame, name: pd.Series) -> pd.DataFrame:
    """``rows`` with the ``series`` each point belongs to (the variant added where there are several) and its dtype."""
    if rows["variant"].nunique() > 1:
        name = name.astype(str) + " " + rows["variant"].astype(str)
    dtype = rows["roof_dtype"].fillna("fp32").astype(str) if "roof_dtype" in rows else "fp32"
    return rows.assign(series=name.astype(str), dtype=dtype)


def _rows_of(good: pd.DataFrame, ceil: Ceilings) -> pd.DataFrame:
    if good.empty:
        return good
    return good[(good["machine"] == ceil.machine) & (good["hardware"].map(ceilings_device) == ceil.device)]


def device_rooflines(df: pd.DataFrame, ceilings: list[Ceilings], figures_dir: str | Path) -> list[plt.Figure]:
    """One roofline per measured device that has points: its roofs of those points' dtypes, every workload a point."""
    good = ok_rows(df)
    if good.empty:
        return []
    good = _series(good, good["model"])
    names = sorted(good["series"].unique())
    colours = dict(zip(names, palette(len(names))))
    figures = []
    for ceil in ceilings:
        rows = _rows_of(good, ceil)
        if rows.empty:
            continue
        span = _span(rows)
        fig, ax = _roof_axes(f"{ceil.machine} {ceil.device}: {ceil.device_name}")
        sheet = datasheet_for(ceil.device_name)
        for dtype in dtypes_of(rows):
            peak, bandwidth = ceil.peak_flops_per_s.get(dtype), ceil.bandwidth_bytes_per_s
            if peak:
                _draw_roof(ax, peak, bandwidth, span, roof_label(dtype, peak, bandwidth),
                           color="#222222", linestyle=DTYPE_STYLES.get(dtype, "-"), linewidth=2)
            sheet_peak = sheet["peak_flops_per_s"].get(dtype) if sheet else None
            if sheet and sheet_peak:
                source = f"datasheet ({sheet.get('name', '')})"
                _draw_roof(ax, sheet_peak, sheet["bandwidth_bytes_per_s"], span,
                           roof_label(dtype, sheet_peak, sheet["bandwidth_bytes_per_s"], source),
                           color="#999999", linestyle=DTYPE_STYLES.get(dtype, "-"), linewidth=1)
        _draw_points(ax, rows, colours, {d for d, p in ceil.peak_flops_per_s.items() if p},
                     annotate_batch=rows["batch_size"].nunique() > 1)
        fig.tight_layout()
        legend_outside(ax, below=True)
        save(fig, figures_dir, f"roofline__{ceil.machine}__{ceil.device.replace(':', '')}")
        figures.append(fig)
    return figures


def model_rooflines(df: pd.DataFrame, ceilings: list[Ceilings], figures_dir: str | Path) -> list[plt.Figure]:
    """Per model that ran on two devices or more: each device's roofs and the model's points, one colour each (the
    default variants where there are several)."""
    good = ok_rows(df)
    figures: list[plt.Figure] = []
    if good.empty or not ceilings:
        return figures
    if good["variant"].nunique() > 1 and good["variant"].isin(BASELINE_VARIANTS).any():
        good = good[good["variant"].isin(BASELINE_VARIANTS)]  # like with like: each device's default
    keys = [f"{c.machine}:{c.device}" for c in ceilings]
    colours = dict(zip(keys, palette(len(keys))))
    for model, rows in good.groupby("model"):
        mine = {key: _rows_of(rows, ceil) for key, ceil in zip(keys, ceilings)}
        mine = {key: r for key, r in mine.items() if not r.empty}
        if len(mine) < 2:
            continue
        span = _span(rows)
        fig, ax = _roof_axes(f"{model} across devices")
        for key, ceil in zip(keys, ceilings):
            if key not in mine:
                continue
            for dtype in dtypes_of(mine[key]):
                peak = ceil.peak_flops_per_s.get(dtype)
                if peak:
                    _draw_roof(ax, peak, ceil.bandwidth_bytes_per_s, span,
                               f"{key} " + roof_label(dtype, peak, ceil.bandwidth_bytes_per_s, "").strip(),
                               color=colours[key], linestyle=DTYPE_STYLES.get(dtype, "-"), linewidth=1.5)
            points = _series(mine[key], pd.Series(key, index=mine[key].index))
            _draw_points(ax, points, {n: colours[key] for n in points["series"].unique()},
                         {d for d, p in ceil.peak_flops_per_s.items() if p},
                         annotate_batch=mine[key]["batch_size"].nunique() > 1)
        fig.tight_layout()
        legend_outside(ax, below=True)
        save(fig, figures_dir, f"roofline_model__{safe_name(model)}")
        figures.append(fig)
    return figures


def batch_effect(df: pd.DataFrame, figures_dir: str | Path) -> plt.Figure | None:
    """Training intensity and roof fraction against batch size: how batch moves a workload on the roofline."""
    good = ok_rows(df)
    if good.empty or good["batch_size"].nunique() < 2 or "train_arithmetic_intensity" not in good:
        return None
    good["device"] = device_label(good)
    good["roof_pct"] = pd.to_numeric(good.get("roof_fraction"), errors="coerce") * 100
    models = sorted(good["model"].unique())
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    style = "device" if good["device"].nunique() > 1 else None
    sns.lineplot(data=good, x="batch_size", y="train_arithmetic_intensity", hue="model", hue_order=models, style=style,
                 marker="o", ax=axes[0], legend=False, palette=palette(len(models)))
    axes[0].set_ylabel("training intensity (FLOP/byte)")
    if good["roof_pct"].notna().any():
        sns.lineplot(data=good, x="batch_size", y="roof_pct", hue="model", hue_order=models, style=style, marker="o",
                     ax=axes[1], palette=palette(len(models)))
    axes[1].set_ylabel("achieved / roof, training (%)")
    for ax in axes:
        batch_axis(ax, good["batch_size"])
    legend_outside(axes[1])
    fig.tight_layout()
    save(fig, figures_dir, "roofline_batch_effect")
    return fig
