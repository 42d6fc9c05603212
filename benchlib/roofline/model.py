"""The roofline model itself: pure arithmetic over a peak FLOP/s and a bandwidth.

A point above its roof is a measurement bug (wrong FLOP count, bytes undercounted, a missing
synchronize, a roof measured on a busy machine), not a finding: :func:`above_roof` flags it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

ABOVE_ROOF_TOLERANCE = 1.05


# The roof itself: pure arithmetic
# ----------------------------------------------------------------------------------------------------------


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite positive number, got {value!r}")


def ridge_point_flops_per_byte(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Intensity where the roof turns from memory-bound to compute-bound (peak / bandwidth)."""
    _check_positive(peak_flops_per_s=peak_flops_per_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s)
    return peak_flops_per_s / bandwidth_bytes_per_s


def roof_flops_per_s(intensity_flops_per_byte: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The attainable FLOP/s at an arithmetic intensity: min(peak, intensity * bandwidth)."""
    _check_positive(intensity_flops_per_byte=intensity_flops_per_byte, peak_flops_per_s=peak_flops_per_s,
                    bandwidth_bytes_per_s=bandwidth_bytes_per_s)
    return min(peak_flops_per_s, intensity_flops_per_byte * bandwidth_bytes_per_s)


def roof_fraction(achieved_flops_per_s: float, intensity_flops_per_byte: float, peak_flops_per_s: float,
                  bandwidth_bytes_per_s: float) -> float:
    """Achieved FLOP/s as a fraction of the roof at its intensity (1.0 = on the roof)."""
    if not (math.isfinite(achieved_flops_per_s) and achieved_flops_per_s >= 0):
        raise ValueError(f"achieved_flops_per_s must be finite and >= 0, got {achieved_flops_per_s!r}")
    return achieved_flops_per_s / roof_flops_per_s(intensity_flops_per_byte, peak_flops_per_s, bandwidth_bytes_per_s)


def above_roof(achieved_flops_per_s: float, intensity_flops_per_byte: float, peak_flops_per_s: float,
               bandwidth_bytes_per_s: float, tolerance: float = ABOVE_ROOF_TOLERANCE) -> bool:
    """True when a point sits above its roof by more than ``tolerance``: a measurement bug to flag."""
    return roof_fraction(achieved_flops_per_s, intensity_flops_per_byte, peak_flops_per_s,
                         bandwidth_bytes_per_s) > tolerance



def roof_dtype(precision: str, device_type: str, tf32: bool, quantization: str | None = None) -> str:
    """The ceiling a configuration runs under: its compute dtype (fp32 matmuls run as tf32 when enabled; a
    quantized model's int8, which no measured ceiling has)."""
    if quantization not in (None, "", "none"):
        return "int8"
    if precision in ("amp_fp16", "fp16"):
        return "fp16"
    if precision in ("amp_bf16", "bf16"):
        return "bf16"
    return "tf32" if device_type == "cuda" and tf32 else "fp32"


@dataclass(frozen=True)
class Placement:
    """Where one point sits: the roof at its intensity, the fraction of it reached, and whether it is above."""

    roof_flops_per_s: float | None
    fraction: float | None
    above: bool | None


def place_on_roof(achieved_flops_per_s: float | None, intensity_flops_per_byte: float | None,
                  peak_flops_per_s: Mapping[str, float], bandwidth_bytes_per_s: float | None,
                  dtype: str) -> Placement:
    """The point under the roof of ``dtype``; empty (None) where the point or the ceiling is missing.

    Never a made-up roof: a dtype without a measured ceiling places nothing.
    """
    peak = peak_flops_per_s.get(dtype)
    values = (achieved_flops_per_s, intensity_flops_per_byte, peak, bandwidth_bytes_per_s)
    if any(v is None or not math.isfinite(v) or v <= 0 for v in values):
        return Placement(None, None, None)
    assert achieved_flops_per_s is not None and intensity_flops_per_byte is not None
    assert peak is not None and bandwidth_bytes_per_s is not None
    roof = roof_flops_per_s(intensity_flops_per_byte, peak, bandwidth_bytes_per_s)
    return Placement(roof, achieved_flops_per_s / roof,
                     above_roof(achieved_flops_per_s, intensity_flops_per_byte, peak, bandwidth_bytes_per_s))


@dataclass(frozen=True)
class WorkloadPlacement:
    """A configuration's training and inference points under one roof: the dtype it runs in, that roof's
    peak and bandwidth, and each point's placement (what a row's roof columns hold, and what a report shows)."""

    dtype: str
    peak_flops_per_s: float | None
    bandwidth_bytes_per_s: float | None
    train: Placement
    infer: Placement

    @property
    def above(self) -> bool | None:
        """Whether either point sits above the roof (None when neither could be placed)."""
        flags = [f for f in (self.train.above, self.infer.above) if f is not None]
        return any(flags) if flags else None


def place_workload(peak_flops_per_s: Mapping[str, float], bandwidth_bytes_per_s: float | None, dtype: str, *,
                   train_flops_per_s: float | None, train_intensity: float | None,
                   infer_flops_per_s: float | None, infer_intensity: float | None) -> WorkloadPlacement:
    """Both points of a configuration under the roof of ``dtype``: the one placement behind a row's roof columns
    as it is recorded and as a report shows it under the roof it draws (``report.readback.roofs``)."""
    return WorkloadPlacement(
        dtype, peak_flops_per_s.get(dtype), bandwidth_bytes_per_s,
        place_on_roof(train_flops_per_s, train_intensity, peak_flops_per_s, bandwidth_bytes_per_s, dtype),
        place_on_roof(infer_flops_per_s, infer_intensity, peak_flops_per_s, bandwidth_bytes_per_s, dtype))
