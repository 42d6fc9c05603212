"""Per-layer tables: the layers that lose the most time against their roof, the same by kind and phase, and
predictions made from them set against what the target measured."""
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


# a prediction's figure and the result rows' column it is measured as on the target
MEASURED_AS = {"train_step_s": "train_step_s", "train_samples_per_s": "train_step_s",
               "latency_ms_p50": "latency_ms_p50"}


def against_measured(predicted: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """Each prediction whose target was also measured (rows of the target's machine and device type, the same
    model, batch size and variant): the prediction beside the median of those runs, their ratio and whether the
    measurement fell inside the 90% interval. Throughput is the batch over the median step, as predicted."""
    if predicted.empty or rows.empty:
        return pd.DataFrame()
    ok = rows[rows["status"] == "ok"] if "status" in rows.columns else rows
    device = ok["hardware"].astype(str).str.split(":").str[0]
    out = []
    for p in predicted.to_dict("records"):
        machine, _, kind = str(p["target"]).rpartition(":")
        if machine == str(p.get("machine")):  # a target of the source's own name (its threads limited): its rows
            continue  # and the source's cannot be told apart
        same = ok[(ok["machine"].astype(str) == machine) & (device == kind) & (ok["model"] == p["model"])
                  & (ok["batch_size"] == p["batch_size"]) & (ok["variant"].astype(str) == str(p["variant"]))]
        values = pd.to_numeric(same.get(MEASURED_AS.get(str(p["figure"]), ""), pd.Series(dtype=float)),
                               errors="coerce").dropna()
        if values.empty:
            continue
        there = float(values.median())
        if p["figure"] == "train_samples_per_s":
            there = float(p["batch_size"]) / there
        out.append({"target": p["target"], "model": p["model"], "batch_size": p["batch_size"],
                    "variant": p["variant"], "figure": p["figure"], "predicted": p["predicted"], "low": p["low"],
                    "high": p["high"], "measured_there": there, "runs_there": len(values),
                    "predicted_over_measured": p["predicted"] / there, "inside": p["low"] <= there <= p["high"],
                    "unit": p["unit"]})
    return pd.DataFrame(out)
