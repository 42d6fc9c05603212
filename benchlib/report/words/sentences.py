"""Sentences that state an interval, a verdict's reason or the smallest change a comparison can tell: one
function per kind, each written from its numbers and saying only what they hold.

A number printed with its interval is rounded outward (the low end down, the high end up, at the point's own
digits), so a point inside its interval is never printed outside it; a sentence says an interval "holds no
change" only where it holds 1, and "excludes" it only where it does not.
"""
from __future__ import annotations

import math
from typing import Any

MISSING = "\u2013"  # en dash: no value (the reason, where there is one, is given beside it)


def _finite(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _down(x: float, decimals: int) -> str:
    return f"{math.floor(round(x * 10 ** decimals, 9)) / 10 ** decimals:.{decimals}f}"


def _up(x: float, decimals: int) -> str:
    return f"{math.ceil(round(x * 10 ** decimals, 9)) / 10 ** decimals:.{decimals}f}"


def bounds_text(low: float, high: float, decimals: int = 2) -> str:
    """``[1.32, 1.40]``: an interval rounded outward at ``decimals``."""
    return f"[{_down(low, decimals)}, {_up(high, decimals)}]"


def ratio_interval(ratio: float, low: float = math.nan, high: float = math.nan, decimals: int = 2) -> str:
    """``1.36x [1.32, 1.40]``: a ratio and its interval (outward), or the ratio alone without one."""
    if not _finite(ratio):
        return MISSING
    point = f"{ratio:.{decimals}f}x"
    return f"{point} {bounds_text(low, high, decimals)}" if _finite(low, high) else point


def percent_interval(share: float, low: float = math.nan, high: float = math.nan, decimals: int = 1) -> str:
    """``26.6% [26.5%, 93.0%]``: a share (a fraction) and its interval in %, both at one precision, outward."""
    if not _finite(share):
        return MISSING
    point = f"{share * 100:.{decimals}f}%"
    if not _finite(low, high):
        return point
    return f"{point} [{_down(low * 100, decimals)}%, {_up(high * 100, decimals)}%]"


def undecided(low: float, high: float, threshold: float) -> str:
    """Why an interval settles nothing, from what it holds: no change and changes beyond ``threshold``; or a
    change (it excludes 1) that may be smaller than ``threshold``."""
    shown = bounds_text(low, high)
    if not _finite(low, high):
        return "no interval: too few values to tell"
    if low <= 1.0 <= high:
        return f"the interval {shown} holds both no change and changes beyond {threshold:.0%}"
    return (f"the interval {shown} excludes no change, but the change may be under {threshold:.0%} (too small to "
            "count) or beyond it")


def untested(low: float, high: float, p_value: float, test: str) -> str:
    """Why an interval that excludes 1 settles nothing where a test beside it (few values) finds no difference."""
    return (f"the interval {bounds_text(low, high)} excludes no change, but the {test} test beside it does not "
            f"find one (p {p_value:.2g}): too few values to tell")


def detectable(mdc: float, runs_a: int, runs_b: int, target: float | None = None,
               runs_for_target: int | None = None) -> str:
    """``with 3 runs a side, changes under 7% cannot be told here; 8 runs a side would tell 5%``."""
    if not _finite(mdc):
        return ""
    sides = f"{runs_a} runs a side" if runs_a == runs_b else f"{runs_a} and {runs_b} runs"
    if runs_a == runs_b == 1:
        sides = "1 run a side"
    said = f"with {sides}, changes under {mdc:.0%} cannot be told here"
    if target is not None and runs_for_target is not None and mdc > target:
        said += f"; {runs_for_target} runs a side would tell {target:.0%}"
    elif target is not None and runs_for_target is None and mdc > target:
        said += f"; more than 50 runs a side would be needed to tell {target:.0%}"
    return said
