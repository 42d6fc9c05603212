"""Claims about the settings a study varies: the variant that trains or answers fastest against its device's
default (from ``tables.comparisons.variant_speedups``), and threads, DataLoader workers and data-parallel
processes against their smallest value (``scaling_table``). Each is worded from its table's verdict, whose
interval is corrected for the table's comparisons together (the table's ``family``).
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from ..evidence.samples import SampleReader
from ..evidence.selection import device_label
from ..evidence.stats import Comparison, inverted
from ..tables.comparisons import scaling_table, variant_speedups
from ..words import fmt
from .claims import claim_sentence, throughput_text


def number(value: Any) -> float:
    out = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    return float(out) if pd.notna(out) else float("nan")


def _variant_claim(where: str, best: pd.Series, label: str, verb: tuple[str, str], baseline: str,
                   alone: bool = False) -> str:
    """The best variant on one metric against the default, worded by its verdict, with its accuracy change;
    ``alone``: it is the only variant, so it is named, not ranked ("every variant", "the closest")."""
    verdict, level = str(best[f"{label}_verdict"]), str(best.get(f"{label}_level") or "")
    lvl = f" ({level})" if level else ""
    ratio = re.sub(r" \S+( \([^)]*\))?$", "", str(best[label]))
    acc = f"; accuracy {a:+.1f} points" if np.isfinite(a := number(best["accuracy_delta_pts"])) else ""
    if verdict in ("faster", "better"):
        return (f"{where}: {best['variant']} {verb[0]} {'faster' if alone else 'fastest'}, {ratio} faster{lvl} than "
                f"{baseline}{acc}.")
    if verdict == "same" and alone:
        return f"{where}: {best['variant']} {verb[0]} as fast as {baseline}, the same within noise ({ratio}{lvl}){acc}."
    if verdict == "same":
        return (f"{where}: no variant {verb[0]} faster than {baseline}; the best, {best['variant']}, is the same "
                f"within noise ({ratio}{lvl}){acc}.")
    if verdict in ("slower", "worse"):
        return (f"{where}: {best['variant']} {verb[0]} slower{lvl} than {baseline}, {ratio}{acc}." if alone else
                f"{where}: every variant {verb[0]} slower{lvl} than {baseline}; the closest, {best['variant']}, "
                f"{ratio}{acc}.")
    if verdict == "inconclusive":
        return (f"{where}: {best['variant']} {verb[0]} at {ratio}{lvl} against {baseline}, inconclusive: "
                f"{best.get(f'{label}_note') or 'one run a side'}{acc}.")
    return f"{where}: {best['variant']} {verb[0]} fastest, {ratio} {baseline}'s (no interval){acc}."


def variants(df: pd.DataFrame, reader: SampleReader | None = None) -> list[str]:
    """Per device and model: the variant that trains fastest and the one that answers fastest, against the default."""
    table = variant_speedups(df, reader)
    if table.empty:
        return []
    table = table.assign(device=device_label(table))
    lines = []
    for (device, model, batch), grp in table.groupby(["device", "model", "batch_size"], sort=True):
        others = grp[grp["variant"] != grp["baseline"]]
        if others.empty:
            continue
        baseline = grp["baseline"].iloc[0]
        for column, label, verb in (("train_throughput_ratio", "train_throughput", ("trains", "train")),
                                    ("latency_speedup_bs1", "latency_bs1", ("answers one image", "answer one image"))):
            ranked = others[pd.to_numeric(others[column], errors="coerce").notna()]
            if ranked.empty:
                continue
            best = ranked.loc[pd.to_numeric(ranked[column]).idxmax()]
            lines.append(_variant_claim(f"{model} on {device} (bs{int(batch)})", best, label, verb, str(baseline),
                                        alone=len(others) == 1))
        slower = others[others["train_throughput_verdict"] == "slower"]
        if len(others) > 1 and not slower.empty:  # each with its own ratio and interval (one variant: said above)
            each = "; ".join(f"{r['variant']} {r['train_throughput']}" for _, r in slower.iterrows())
            lines.append(f"{model} on {device} (bs{int(batch)}) trains slower than {baseline} with: {each}.")
    return lines


def _count(n: Any, word: tuple[str, str]) -> str:
    return f"{int(n)} {word[0] if int(n) == 1 else word[1]}"


def _scaling_comparison(row: pd.Series) -> Comparison:
    """A scaling table's row (its knob's value against the smallest) as the comparison it holds."""
    return Comparison(float(row["speedup"]), float(row["ci_low"]), float(row["ci_high"]), float("nan"),
                      str(row["verdict"]), 0, 0, level=str(row.get("level") or ""), note=str(row.get("note") or ""))


def scaling(df: pd.DataFrame, reader: SampleReader | None = None) -> list[str]:
    """Threads, DataLoader workers and data-parallel processes: the best value against the smallest."""
    lines = []
    words = {"threads": ("thread", "threads"), "num_workers": ("DataLoader worker", "DataLoader workers"),
             "world_size": ("process", "processes")}
    for knob, word in words.items():
        table = scaling_table(df, knob, reader)
        if table.empty:
            continue
        table = table.assign(device=device_label(table))
        for (device, model, batch), grp in table.groupby(["device", "model", "batch_size"], sort=True):
            if grp[knob].nunique() < 2:  # one value measured here: nothing to compare it with
                continue
            base = grp.loc[grp[knob].idxmin()]
            best = grp.loc[pd.to_numeric(grp["train_samples_per_s"]).idxmax()]
            where = f" for {model} on {device} (bs{int(batch)})"
            first, second = best, base  # the best against the smallest, or the smallest against the most
            c = _scaling_comparison(best)
            if best[knob] == base[knob]:
                first, second = base, grp.loc[grp[knob].idxmax()]
                c = inverted(_scaling_comparison(second))
            verb = ("trains", "train") if int(first[knob]) == 1 else ("train", "train")
            text = claim_sentence(_count(first[knob], word), _count(second[knob], word), verb, where, c,
                          throughput_text(first["train_samples_per_s"]), throughput_text(second["train_samples_per_s"]))
            top = best if best[knob] != base[knob] else second
            lines.append(text[:-1] + f"; parallel efficiency of {_count(top[knob], word)}: "
                         f"{fmt.percent_text(top['parallel_efficiency'])}.")
    return lines
