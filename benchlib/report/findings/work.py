"""Findings about the work itself: where each workload sits on its roofline, and where a step's time goes.

Pure, like ``findings``: rows and saved profiles in, sentences out. A workload is compute-bound when its
arithmetic intensity is at or past the ridge point of its roof (peak FLOP/s over bandwidth), memory-bound
below it; the fraction of roof is the achieved FLOP/s over the roof at that intensity.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ...instruments.profiler import BREAKDOWN_CATEGORIES
from ...store.schema import finite_float
from ..readback.layers import configurations, median_run
from ..tables import layers as layer_tables
from ..words import fmt

CATEGORY_WORDS = {"data_loading": "data loading", "memcpy": "memory copies", "compute": "compute",
                  "forward": "the forward pass", "backward": "the backward pass", "optimizer": "the optimizer step",
                  "cpu_exec": "CPU-side execution (launches, Python)", "other": "other"}
MIN_SHARE = 0.05  # breakdown categories under 5% of the step are not named


def bound(intensity: float | None, peak_flops_per_s: float | None, bandwidth_bytes_per_s: float | None) -> str | None:
    """'compute' or 'memory' (which ceiling limits a point at ``intensity``); None without a roof."""
    if intensity is None or not peak_flops_per_s or not bandwidth_bytes_per_s:
        return None
    return "compute" if intensity >= peak_flops_per_s / bandwidth_bytes_per_s else "memory"


FAR_UNDER_ROOF = 0.10  # under this share of the roof at its intensity, neither roof is what limits a workload


def bound_text(kind: str | None, fraction: float | None) -> str:
    """'compute-bound' (memory-, cache-), or 'far under both roofs' where the workload reaches under
    ``FAR_UNDER_ROOF`` of the roof at its intensity: its time goes to what neither roof models (waits,
    per-call costs), so naming the nearer roof would say more than the numbers hold."""
    if fraction is not None and math.isfinite(fraction) and fraction < FAR_UNDER_ROOF:
        return "far under both roofs"
    return f"{kind}-bound"


def _placement(row: Mapping[str, Any], spread: str = "") -> str | None:
    peak = finite_float(row.get("roof_peak_flops_per_s"))
    bandwidth = finite_float(row.get("roof_bandwidth_bytes_per_s"))
    intensity = finite_float(row.get("train_arithmetic_intensity"))
    kind = bound(intensity, peak, bandwidth)
    fraction = finite_float(row.get("roof_fraction"))
    if kind is None or fraction is None or peak is None or bandwidth is None or intensity is None:
        return None
    dtype = str(row.get("roof_dtype") or "")
    text = (f"{row['model']} on {row['device']} (bs{int(row['batch_size'])}, {row['variant']}) trains "
            f"{bound_text(kind, fraction)}: {fmt.significant(intensity)} FLOP/byte against a ridge at "
            f"{fmt.significant(peak / bandwidth)}, reaching {fmt.percent_text(fraction)} of its {dtype} roof "
            f"({fmt.flops_text(row.get('achieved_train_flops_per_s'))} of "
            f"{fmt.flops_text(row.get('train_roof_flops_per_s'))}){spread}")
    infer_fraction = finite_float(row.get("infer_roof_fraction"))
    infer_intensity = finite_float(row.get("arithmetic_intensity"))
    infer_kind = bound(infer_intensity, peak, bandwidth)
    if infer_fraction is not None and infer_kind is not None:
        text += (f"; inference is {bound_text(infer_kind, infer_fraction)} at {fmt.percent_text(infer_fraction)} "
                 "of its roof")
    return text + "."


def roofline_sentences(good: pd.DataFrame) -> list[str]:
    """Per device, model and variant, at its batch with the most training throughput: bound and fraction of roof.

    ``good`` holds successful rows with a ``device`` column (the report's device label).
    """
    if good.empty or "roof_fraction" not in good:
        return []
    rows = good[pd.to_numeric(good["roof_fraction"], errors="coerce").notna()]
    lines = []
    for _, grp in rows.groupby(["device", "model", "variant"], sort=True):
        best = grp.loc[pd.to_numeric(grp["train_samples_per_s"], errors="coerce").idxmax()]
        spread = ""
        if grp["batch_size"].nunique() > 1:
            fractions = pd.to_numeric(grp["roof_fraction"], errors="coerce")
            spread = (f", and from {fmt.percent_text(fractions.min())} to {fmt.percent_text(fractions.max())} over "
                      f"bs{int(grp['batch_size'].min())}-{int(grp['batch_size'].max())}")
        text = _placement(best.to_dict(), spread)
        if text is not None:
            lines.append(text)
    return lines


def _top_operator(profile: Mapping[str, Any], step_us: float) -> str | None:
    device = profile.get("top_self_device")
    use_device = isinstance(device, pd.DataFrame) and not device.empty
    table = device if use_device else profile.get("top_self_cpu")
    column = "self_device_time_us" if use_device else "self_cpu_time_us"
    if not isinstance(table, pd.DataFrame) or table.empty or column not in table:
        return None
    top = table.loc[pd.to_numeric(table[column], errors="coerce").idxmax()]
    share = finite_float(top[column])
    where = "device" if use_device else "CPU"
    if share is None:
        return None
    if step_us > 0 and share <= step_us:
        return f"the top operator is {top['name']} ({fmt.percent_text(share / step_us)} of the step, self {where} time)"
    return f"the top operator is {top['name']} ({fmt.seconds_text(share / 1e6)} of self {where} time)"


def time_sentences(profiles: Sequence[Mapping[str, Any]], with_machine: bool | None = None) -> list[str]:
    """Per profiled pair: the step-time breakdown's main categories and the top operator.

    ``with_machine``: name devices 'machine:hardware', as the report does when rows come from several
    machines (by default, when the profiles do).
    """
    lines = []
    if with_machine is None:
        with_machine = len({str(p.get("machine")) for p in profiles}) > 1
    for p in profiles:
        device = f"{p['machine']}:{p['hardware']}" if with_machine else str(p["hardware"])
        breakdown = p.get("breakdown")
        if not isinstance(breakdown, pd.DataFrame) or breakdown.empty:
            continue
        fractions = dict(zip(breakdown["category"], pd.to_numeric(breakdown["fraction"], errors="coerce")))
        named = sorted(((c, f) for c, f in fractions.items() if c in BREAKDOWN_CATEGORIES and f >= MIN_SHARE),
                       key=lambda item: -item[1])
        if not named:
            continue
        step_us = float(pd.to_numeric(breakdown["time_us"], errors="coerce").sum())
        parts = ", ".join(f"{CATEGORY_WORDS.get(c, c)} {fmt.percent_text(f)}" for c, f in named)
        text = f"{p['model']} on {device} (bs{p['batch_size']}): {parts} of the profiled step time"
        top = _top_operator(p, step_us)
        lines.append(text + (f"; {top}." if top else "."))
    return lines


PHASE_WORDS = {"forward": "forward pass", "backward": "backward pass", "optimizer": "optimizer step"}


def layer_sentences(reports: Sequence[Mapping[str, Any]], groups: int = 2) -> list[str]:
    """Per configuration with a saved per-layer report: the step the roofline predicts against the measured one,
    and the ``groups`` (kind, phase) groups of layers that lose the most time against their roof. Several runs
    of one configuration (a study's repeats) give one sentence: their median run's, with the others' range."""
    lines = []
    variants = len({str(r.get("variant")) for r in reports}) > 1
    for runs in configurations(reports):
        r = median_run(runs)
        table = r.get("table")
        step_s, predicted = finite_float(r.get("step_s")), finite_float(r.get("predicted_step_s"))
        if not isinstance(table, pd.DataFrame) or table.empty or not step_s or predicted is None:
            continue
        phase_s = table.groupby("phase")["time_s"].sum()
        parts = []
        for g in layer_tables.by_kind(table).head(groups).itertuples():
            of_phase = g.time_s / phase_s[g.phase] if phase_s.get(g.phase) else None
            parts.append(f"{g.kind} {PHASE_WORDS.get(g.phase, g.phase)} ({g.layers} layer(s), "
                         f"{bound_text(g.bound, finite_float(g.roof_fraction))}) takes "
                         f"{fmt.percent_text(of_phase)} of the {PHASE_WORDS.get(g.phase, g.phase)} at "
                         f"{fmt.percent_text(g.roof_fraction)} of its roof")
        coverage = finite_float(r.get("coverage"))
        label = f"bs{r.get('batch_size')}" + (f", {r.get('variant')}" if variants else "")
        text = (f"{r.get('model')} on {r.get('device')} ({label}), layer by layer: the roofline "
                f"predicts a {fmt.seconds_text(predicted)} step against {fmt.seconds_text(step_s)} measured "
                f"(efficiency {fmt.percent_text(predicted / step_s)}; the layers hold "
                f"{fmt.percent_text(coverage)} of the step; medians of {r.get('steps')} profiled steps)")
        text += _runs_range(runs)
        lines.append(text + (". Most time lost against the roof: " + "; ".join(parts) + "." if parts else "."))
    return lines


def _runs_range(runs: Sequence[Mapping[str, Any]]) -> str:
    """'; the median of 8 runs, whose measured steps ran 78.4 ms-126 ms and efficiencies 20.7%-33.1%', or
    nothing for one run (or where fewer than two runs have both figures)."""
    pairs = [(s, p / s) for r in runs if (s := finite_float(r.get("step_s"))) and
             (p := finite_float(r.get("predicted_step_s"))) is not None]
    if len(runs) < 2 or len(pairs) < 2:
        return ""
    steps, efficiencies = [s for s, _ in pairs], [e for _, e in pairs]
    return (f"; the median of {len(runs)} runs, whose measured steps ran {fmt.seconds_text(min(steps))}-"
            f"{fmt.seconds_text(max(steps))} and efficiencies {fmt.percent_text(min(efficiencies))}-"
            f"{fmt.percent_text(max(efficiencies))}")
