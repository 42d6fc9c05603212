"""Per-layer tables: the layers that lose the most time against their roof, and the same by kind and phase."""
from __future__ import annotations

import pandas as pd

LOST_COLUMNS = ("layer", "kind", "op_kind", "phase", "time_s", "share", "flops", "bytes", "intensity_flops_per_byte",
                "roof_fraction", "bound", "cache_resident", "lost_s")


def lost_time(table: pd.DataFrame) -> pd.DataFrame:
    """The placed rows with ``lost_s`` (measured time less the time at the roof), the most lost first."""
    placed = table[pd.to_numeric(table["roof_time_s"], errors="coerce").notna()].copy()
    placed["lost_s"] = placed["time_s"] - placed["roof_time_s"].astype(float)
    return placed.sort_values("lost_s", ascending=False)[[c for c in LOST_COLUMNS if c in placed.columns]]


def by_kind(table: pd.DataFrame) -> pd.DataFrame:
    """Per (kind, phase, bound): calls of the step, time, share of the step, the time-weighted fraction of
    roof (their roof times over their time), and the time lost against the roof; the most lost first."""
    placed = table[pd.to_numeric(table["roof_time_s"], errors="coerce").notna()].copy()
    placed["roof_time_s"] = placed["roof_time_s"].astype(float)
    grouped = placed.groupby(["kind", "phase", "bound"], as_index=False).agg(
        layers=("layer", "nunique"), time_s=("time_s", "sum"), share=("share", "sum"),
        roof_time_s=("roof_time_s", "sum"))
    grouped["roof_fraction"] = grouped["roof_time_s"] / grouped["time_s"]
    grouped["lost_s"] = grouped["time_s"] - grouped["roof_time_s"]
    return grouped.sort_values("lost_s", ascending=False).reset_index(drop=True)
