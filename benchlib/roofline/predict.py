"""A configuration's step on a machine it did not run on: its per-layer table carried to another machine's roofs.

The method, in the sentence every prediction prints (``METHOD``): each part of the measured step (a layer's
forward or backward, the optimizer's step, what no layer holds) keeps the efficiency it reached here against
its own kind's roof (conv3x3, conv1x1, depthwise, matmul, or the bandwidth of elementwise work in cache or
DRAM), and meets the target's roof of that kind. A part's predicted time is its measured time times the target's
roof time for its work over this machine's; a part with no counted work (the wait for the batch) carries over
unchanged, which is where a prediction is weakest (per-call costs: launches, Python, the framework, are taken
to be the same). The whole is the plain measured step times the parts' predicted sum over their measured sum,
so the instrument's own cost (what timing layer by layer adds) cancels out.

Its 90% interval is log-normal, from three spreads added in quadrature: the source's run-to-run spread of the
step (its runs, or the machine's noise floor; unknown with one run and no floor, and then said), the roofs'
own (each kind's IQR over median, on both machines, weighted by the time its parts are predicted to take), and
the method's (``METHOD_LOG_SD``: how far predictions of this kind missed measurements, from
``benchmarks/predict_check.py``). Pure: ceilings and per-layer files are read by the caller.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..spec.vocab import COMPUTE_KINDS, TIMING_LAYER
from .datasheet import NOT_MEASURED
from .layers import roof_time_s
from .measured import Ceilings

METHOD = ("each part keeps the efficiency it reached here against its own kind's roof and meets the target's "
          "roof of that kind, or moves as its own shape's time does where the target timed that shape alone; parts "
          "with no counted work carry over unchanged")
# The method's own error as the log's standard deviation, beyond what the other spreads hold, per figure:
# measured by benchmarks/predict_check.py (five models, three CPU targets, layer shapes timed on them), twice on
# two days. The first recording's errors (log RMS 0.063 training, 0.159 batch-1) set 0.02 and 0.08; the second,
# out of sample, missed more (0.143 and 0.143; 11 and 12 of 15 inside): a shape is timed in one process on each
# machine, so the run-to-run spread the runs' term holds for the step is not in it. The smallest values that hold
# 90% of both recordings' 60 measurements (28 of 30 a figure) are 0.08 and 0.10. docs/prediction.md has them.
METHOD_LOG_SD: dict[str, float] = {"training step": 0.08, "batch-1 forward": 0.10}
METHOD_MEASURED = True  # METHOD_LOG_SD comes from predict_check.py's table
# From one device type to another (a CPU study on a GPU): per-call costs, kernel choices and overlap differ
# most, and no GPU has been lent to check it: a provisional log SD of 0.25 (x0.66-1.5 at 90%), said in the notes.
ACROSS_DEVICES_LOG_SD = 0.25
# From one precision to another (an fp32 study's step under bf16 autocast), measured by predict_check.py's bf16
# target on this CPU: carried by the roofs the errors' log RMS was 0.20 for the training step and 0.50 for
# batch-1 latency (a bf16 forward at batch 1 pays its casts: squeezenet1_1 3.5x slower than fp32). Layer shapes
# timed alone in bf16 are not used there: outside autocast they missed by 56%.
ACROSS_PRECISIONS_LOG_SD: dict[str, float] = {"training step": 0.20, "batch-1 forward": 0.50}
# A target known only from its datasheet: its peaks are not what it reaches. The one GPU benchlib has measured
# (an H200, docs/gpu.md) reached 66-76% of its sheet's compute and 89% of its bandwidth; a sheet's roof leans the
# prediction fast by about that, and how far on another part is unknown: a log SD of 0.25 (x0.66-1.5 at 90%).
DATASHEET_LOG_SD = 0.25
Z90 = 1.6448536269514722  # the two-sided 90% normal quantile
IQR_TO_SD = 1.349  # a normal's interquartile range in standard deviations
PART_COLUMNS = ("layer", "phase", "op_kind", "by", "measured_s", "scale", "predicted_s", "share")
_BY = {"shape": "its shape timed there", "none": "carried unchanged"}  # else: "roof", its kind's


class PredictError(ValueError):
    """A prediction that cannot be made from these inputs: the message names what is missing and what makes it."""


@dataclass(frozen=True)
class Predicted:
    """One figure on the target: ``value`` with its 90% interval, and what it was carried from."""

    value: float
    low: float
    high: float
    measured: float  # the same figure where it was measured (the source machine)

    @property
    def ratio(self) -> float:
        """The target's figure over the measured one (a time: > 1 is slower there)."""
        return self.value / self.measured if self.measured > 0 else math.nan


@dataclass
class Prediction:
    """A per-layer file's step (``training``) or batch-1 forward (``inference``) predicted on a target."""

    what: str  # "training step" or "batch-1 forward"
    whole: Predicted
    parts: pd.DataFrame  # PART_COLUMNS, largest predicted first
    log_sd: dict[str, float]  # the interval's spreads: runs, roofs, method, datasheet where so (NaN: unknown)
    weakest: str  # where the prediction rests most on assumption, in words
    notes: list[str] = field(default_factory=list)
    dtype: str = "fp32"  # the precision it is predicted in on the target


def needed_roofs(rows: Sequence[Mapping[str, Any]], dtype: str) -> list[str]:
    """The roofs a per-layer table's parts meet: the dtype's peak and each compute kind a part with FLOPs has."""
    kinds = sorted({str(r.get("op_kind")) for r in rows if _number(r.get("flops")) > 0
                    and str(r.get("op_kind")) in COMPUTE_KINDS})
    return [f"{dtype} peak", *(f"{k} {dtype}" for k in kinds)]


def missing_roofs(target: Ceilings, rows: Sequence[Mapping[str, Any]], dtype: str) -> list[str]:
    """The roofs ``needed_roofs`` names that ``target`` did not measure (empty: it can take the prediction)."""
    out = []
    if not target.peak_flops_per_s.get(dtype):
        out.append(f"{dtype} peak")
    for kind in sorted({str(r.get("op_kind")) for r in rows if _number(r.get("flops")) > 0}):
        if kind in COMPUTE_KINDS and not target.kind_flops_per_s.get(kind, {}).get(dtype):
            out.append(f"{kind} {dtype}")
    return out


def _number(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return 0.0
    return out if math.isfinite(out) else 0.0


def _roof_noise(c: Ceilings, kind: str, dtype: str, resident: bool) -> float:
    """The relative spread (IQR over median) of the figure behind a part's roof on ``c``: its kind's product, or
    the elementwise copy sizes of its tensors' home (the largest for DRAM, the others for the cache)."""
    iqr = c.iqr_over_median
    if kind in COMPUTE_KINDS:
        keys = [k for k in iqr if k.startswith(f"{kind}_{dtype}")]
    else:
        adds = sorted((k for k in iqr if k.startswith(f"add_{dtype}_")), key=lambda k: int(k.split("_")[2]))
        keys = adds[:-1] if resident else adds[-1:]
    return max((float(iqr[k]) for k in keys if math.isfinite(float(iqr[k]))), default=0.0)


@dataclass(frozen=True)
class Shapes:
    """The layers' own shapes timed alone (``roofline.shapes``): each layer's signature in this table, the
    target's times of those signatures and, where the source timed them too, the source's.

    With both, a layer moves by its shape's time there over here: what timing a shape alone misses (a large
    layer's weights stream from DRAM inside the model but stay cached in a loop of one shape, 2-3x at batch 1
    on a 32 MB cache) cancels. With the target's alone, the layer takes the target's time as it is."""

    layers: Mapping[str, str]  # layer name -> signature (``nets.layer_shapes``)
    target: Mapping[str, Mapping[str, float]]  # shape key -> {forward_s, backward_s}
    source: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def scale(self, layer: str, phase: str, dtype: str, measured_s: float,
              target_dtype: str | None = None) -> float | None:
        """A layer's time there (in ``target_dtype``, else the same ``dtype``) over its measured time here, from its
        shape; None where the target did not time it."""
        text = self.layers.get(layer)
        if not text or phase not in ("forward", "backward") or not measured_s > 0:
            return None
        field_name = f"{phase}_s"
        there = self.target.get(f"{target_dtype or dtype} {text}", {}).get(field_name)
        if not there:
            return None
        here = self.source.get(f"{dtype} {text}", {}).get(field_name)
        return there / here if here else there / measured_s


def predict(rows: Sequence[Mapping[str, Any]], plain_s: float, *, dtype: str, source: Ceilings, target: Ceilings,
            target_dtype: str | None = None,
            what: str = "training step", run_log_sd: float = math.nan,
            method_log_sd: float | None = None, shapes: Shapes | None = None) -> Prediction:
    """``rows`` (a per-layer file's table: ``roofline.layers.LAYER_COLUMNS``) and its plain measured ``plain_s``,
    measured against ``source``'s roofs, predicted on ``target``'s. ``run_log_sd``: the source's run-to-run
    spread of the whole (its runs or noise floor; NaN: unknown). ``shapes``: layers the target timed alone, carried
    by their own times instead of their kind's roof. ``target_dtype``: the configuration run in another dtype
    there (bf16 autocast from an fp32 study: each part meets the target's roof of that dtype). PredictError where
    ``target`` lacks a roof a part needs (``missing_roofs``)."""
    if not rows or not (plain_s > 0):
        raise PredictError("the per-layer table has no parts or no plain step to predict from")
    there_dtype = target_dtype or dtype
    if there_dtype != dtype:
        shapes = None  # a shape timed alone in bf16 is not the layer under autocast (ACROSS_PRECISIONS_LOG_SD)
    if missing := missing_roofs(target, rows, there_dtype):
        raise PredictError(f"the target's ceilings have no {', '.join(missing)} roof")
    parts: list[dict[str, Any]] = []
    noise: dict[str, float] = {}
    for r in rows:
        layer = str(r.get("layer"))
        if layer == TIMING_LAYER:
            continue  # the instrument's cost, no part of the work (it cancels in the whole's ratio)
        measured = _number(r.get("time_s"))
        flops, moved = _number(r.get("flops")), _number(r.get("bytes"))
        kind, resident = str(r.get("op_kind") or "elementwise"), bool(r.get("cache_resident"))
        scale = 1.0
        timed = (shapes.scale(layer, str(r.get("phase")), dtype, measured, there_dtype) if shapes is not None
                 else None)
        if timed is not None:
            scale, home = timed, "shape"
        elif flops > 0 or moved > 0:
            here = roof_time_s(flops, moved, *source.kind_roof(kind, dtype, resident))
            there = roof_time_s(flops, moved, *target.kind_roof(kind, there_dtype, resident))
            scale = there / here if here > 0 else 1.0
            home = kind if flops > 0 and kind in COMPUTE_KINDS else ("cache" if resident else "dram")
            spread = math.hypot(_roof_noise(source, kind, dtype, resident),
                                _roof_noise(target, kind, there_dtype, resident))
            noise[home] = max(noise.get(home, 0.0), spread / IQR_TO_SD)
        else:
            home = "none"
        parts.append({"layer": layer, "phase": str(r.get("phase")), "op_kind": kind, "measured_s": measured,
                      "scale": scale, "predicted_s": measured * scale, "by": _BY.get(home, "roof"), "_home": home})
    table = pd.DataFrame(parts)
    measured_sum, predicted_sum = float(table["measured_s"].sum()), float(table["predicted_s"].sum())
    if not (measured_sum > 0):
        raise PredictError("the per-layer table's parts sum to no time")
    value = plain_s * predicted_sum / measured_sum
    weights = table.groupby("_home")["predicted_s"].sum() / predicted_sum
    roofs_sd = math.sqrt(sum((weights.get(home, 0.0) * sd) ** 2 for home, sd in noise.items()))
    method = METHOD_LOG_SD.get(what, max(METHOD_LOG_SD.values())) if method_log_sd is None else method_log_sd
    spreads = {"runs": run_log_sd, "roofs": roofs_sd, "method": method}
    if target.method.startswith(NOT_MEASURED):
        spreads["datasheet"] = DATASHEET_LOG_SD
    if target.device != source.device:
        spreads["across devices"] = ACROSS_DEVICES_LOG_SD
    if there_dtype != dtype:
        spreads["across precisions"] = ACROSS_PRECISIONS_LOG_SD.get(what, max(ACROSS_PRECISIONS_LOG_SD.values()))
    total = math.sqrt(sum(v ** 2 for v in spreads.values() if math.isfinite(v)))
    whole = Predicted(value, value * math.exp(-Z90 * total), value * math.exp(Z90 * total), plain_s)
    unchanged = float(weights.get("none", 0.0))
    table = table.assign(share=table["predicted_s"] / predicted_sum).sort_values("predicted_s", ascending=False)
    return Prediction(what, whole, table[list(PART_COLUMNS)].reset_index(drop=True), spreads,
                      _weakest(unchanged, table, target, source), _notes(spreads, source, target, dtype, there_dtype),
                      there_dtype)


def _notes(spreads: Mapping[str, float], source: Ceilings, target: Ceilings, dtype: str, there_dtype: str) -> list[str]:
    """What the interval of a prediction holds beyond the measured spreads (``spreads``' parts), one line each."""
    notes = [] if math.isfinite(spreads["runs"]) else [
        "one run and no noise floor: the source's run-to-run spread is unknown and left out of the interval"]
    if "datasheet" in spreads:
        notes.append(f"the target's roofs are its {target.method} (a measured roof is lower: the prediction leans "
                     f"fast, and its interval holds {DATASHEET_LOG_SD:.0%} more in the log for it)")
    if there_dtype != dtype:
        notes.append(f"a {dtype} step run in {there_dtype} there: each layer meets the {there_dtype} roof, the casts "
                     f"autocast adds are not in the {dtype} table; weakest of all (a change of precision missed by "
                     "13% training and 43% batch-1 on the CPU that checked it), and its interval says so")
    if "across devices" in spreads:
        notes.append(f"{source.device} to {target.device}: the interval holds {ACROSS_DEVICES_LOG_SD:.0%} more in the "
                     "log for a change of device type, provisional: not yet checked against a measurement")
    if not METHOD_MEASURED:
        notes.append(f"the method's own error in the interval ({spreads['method']:.0%} in the log) is provisional: "
                     "not yet measured by benchmarks/predict_check.py on a quiet host")
    return notes


def _weakest(unchanged: float, table: pd.DataFrame, target: Ceilings, source: Ceilings) -> str:
    """Where the prediction rests most on assumption: per-call costs carried over unchanged, or the kind whose
    roofs differ most between the machines (its parts' efficiency is least likely to carry)."""
    said = (f"{unchanged:.0%} of the predicted time is parts with no counted work, carried over unchanged "
            "(per-call costs taken to be the same on the target)")
    by_shape = float(table.loc[table["by"] == _BY["shape"], "predicted_s"].sum() / table["predicted_s"].sum())
    if by_shape > 0:
        said += f"; {by_shape:.0%} is layers carried by their own shapes timed on the target"
    table = table[table["by"] == "roof"]
    if target.device != source.device:
        said += f"; {source.device} to {target.device}: per-call costs differ most between device types"
    moved = table[table["scale"] != 1.0]
    if not moved.empty:
        far = moved.assign(_log=np.abs(np.log(moved["scale"]))).sort_values("_log", ascending=False).iloc[0]
        said += (f"; the {far['op_kind']} roof moves most ({far['scale']:.2f}x the time), so its layers' "
                 "efficiency is the largest assumption carried")
    return said
