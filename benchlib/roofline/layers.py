"""Each layer of a training step on the roofline: its work, its time, the time its roof allows, and the
step the roofs predict.

Pure arithmetic over three inputs measured elsewhere: the time of each (layer, phase) per profiled step
(``instruments.layer_times``), its FLOPs and memory traffic (``nets.layer_work``) and the machine's
ceilings. A layer's *roof time* is the least time the roofline allows its work, max(FLOPs / peak,
bytes / bandwidth); its ``roof_fraction`` is roof time over measured time, which is achieved FLOP/s over
the roof at its intensity for a layer with FLOPs, and achieved bandwidth over the roof for one without
(a batch norm or a ReLU does arithmetic no counter counts, so its intensity reads 0). The sum of the roof
times is the step the roofline predicts; predicted over measured is the configuration's efficiency.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import pandas as pd

from .model import ABOVE_ROOF_TOLERANCE

LAYER_COLUMNS = ("layer", "kind", "op_kind", "phase", "calls", "flops", "bytes", "intensity_flops_per_byte",
                 "time_s", "achieved_flops_per_s", "roof_flops_per_s", "roof_time_s", "roof_fraction", "bound",
                 "share", "above_roof", "cache_resident")
RoofOf = Callable[[str, bool], tuple[float, float]]  # (op kind, cache-resident) -> (FLOP/s, bytes/s) of its roof


def median_per_step(per_step: list[pd.DataFrame]) -> pd.DataFrame:
    """(layer, phase, calls, time_us) per profiled step -> one row per (layer, phase): the median time over
    the steps (a layer a step did not run counts 0 there) and the calls of one step."""
    if not per_step:
        return pd.DataFrame(columns=["layer", "phase", "calls", "time_us"])
    keys = sorted({(r.layer, r.phase) for t in per_step for r in t.itertuples()})
    rows = []
    for layer, phase in keys:
        times, calls = [], []
        for t in per_step:
            hit = t[(t["layer"] == layer) & (t["phase"] == phase)]
            times.append(float(hit["time_us"].sum()))
            calls.append(int(hit["calls"].sum()))
        rows.append({"layer": layer, "phase": phase, "calls": int(pd.Series(calls).median()),
                     "time_us": float(pd.Series(times).median())})
    return pd.DataFrame(rows)


def roof_time_s(flops: float, bytes_moved: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The least time the roofline allows this work: the slower of doing its FLOPs and moving its bytes."""
    return max(flops / peak_flops_per_s, bytes_moved / bandwidth_bytes_per_s)


def layer_roofline(times: pd.DataFrame, flops: Mapping[tuple[str, str], int],
                   bytes_moved: Mapping[tuple[str, str], float], kinds: Mapping[str, str], *,
                   step_s: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                   cache_bytes: int | None = None, op_kinds: Mapping[str, str] | None = None,
                   roof_of: RoofOf | None = None) -> pd.DataFrame:
    """One row per (layer, phase) of ``times`` (median seconds a step, ``median_per_step``), in
    ``LAYER_COLUMNS``: its work, where it sits against the roof of its kind, and its share of ``step_s``.

    ``roof_of`` gives the roof of a layer's kind of operation (``op_kinds``: a layer not named there is
    ``elementwise``) and of where its tensors live (``cache_resident``: a working set of at most ``cache_bytes``
    a call, which the last-level cache serves faster than DRAM); without it every layer meets
    ``peak_flops_per_s`` and ``bandwidth_bytes_per_s``. ``bound`` is which roof caps the layer (``compute`` at
    or right of its roof's ridge, ``memory`` left of it); ``above_roof`` flags a layer faster than its roof
    allows (a counting or timing error, or a 3x3 stride-1 convolution that cuDNN ran as Winograd, fewer
    multiplies than the nominal count). Rows without counted work (the unattributed rest) keep their time and
    share and place nothing.
    """
    rows = []
    for r in times.itertuples():
        key = (str(r.layer), str(r.phase))
        time_s = float(r.time_us) / 1e6
        op_kind = (op_kinds or {}).get(key[0], "elementwise")
        entry: dict[str, object] = {"layer": key[0], "kind": kinds.get(key[0], ""), "op_kind": op_kind,
                                    "phase": key[1], "calls": int(r.calls), "time_s": time_s,
                                    "share": time_s / step_s if step_s > 0 else math.nan}
        if key in flops or key in bytes_moved:
            f, b = float(flops.get(key, 0)), float(bytes_moved.get(key, 0.0))
            resident = bool(cache_bytes is not None and b / max(int(r.calls), 1) <= cache_bytes)
            peak, bandwidth = (roof_of(op_kind, resident) if roof_of is not None
                               else (peak_flops_per_s, bandwidth_bytes_per_s))
            intensity = f / b if b > 0 else math.nan
            roof_s = roof_time_s(f, b, peak, bandwidth)
            fraction = roof_s / time_s if time_s > 0 else math.nan
            entry.update(flops=f, bytes=b, intensity_flops_per_byte=intensity,
                         achieved_flops_per_s=f / time_s if time_s > 0 else math.nan,
                         roof_flops_per_s=min(peak, intensity * bandwidth) if f > 0 and b > 0 else math.nan,
                         roof_time_s=roof_s, roof_fraction=fraction,
                         bound="compute" if f > 0 and intensity >= peak / bandwidth else "memory",
                         above_roof=bool(fraction > ABOVE_ROOF_TOLERANCE), cache_resident=resident)
        rows.append(entry)
    return pd.DataFrame(rows, columns=list(LAYER_COLUMNS))


def predicted_step_s(table: pd.DataFrame) -> float:
    """The step the roofline predicts: the sum of the placed rows' roof times (the unplaced rest counts 0)."""
    return float(pd.to_numeric(table["roof_time_s"], errors="coerce").fillna(0.0).sum())


def times_per_step(per_step: list[pd.DataFrame]) -> dict[tuple[str, str], list[float]]:
    """(layer, phase, calls, time_us) per profiled step -> each (layer, phase)'s seconds in every step, in step
    order (0 in a step it did not run): what a median hides and an interval between two runs needs."""
    keys = sorted({(str(r.layer), str(r.phase)) for t in per_step for r in t.itertuples()})
    out: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
    for t in per_step:
        summed = t.groupby(["layer", "phase"])["time_us"].sum() if not t.empty else pd.Series(dtype=float)
        for key in keys:
            out[key].append(float(summed.get(key, 0.0)) / 1e6)
    return out
