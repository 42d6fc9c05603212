"""Numbers as a reader sees them: human units, one rounding rule, and an en dash for what is missing.

Every table, page and command line that shows a figure to a person formats it here, so a report never
prints ``1.264e+09``, ``None`` or ``62.18190943212281`` and the same figure reads the same everywhere.
Raw values stay in ``results.csv``; these functions only make text.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from .sentences import MISSING as MISSING  # en dash: no value (the reason, where there is one, is beside it)
from .sentences import ratio_interval


def _number(value: Any) -> float | None:
    """A finite float, or None for None, NaN, infinities, text and booleans."""
    if value is None or isinstance(value, bool | str):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def significant(value: Any, digits: int = 3) -> str:
    """``digits`` significant digits with thousands separators, never scientific notation: 6,515 / 10,200 / 0.0123."""
    x = _number(value)
    if x is None:
        return MISSING
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    rounded = round(x, digits - 1 - magnitude)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > magnitude:  # 9.996 rounds up to 10.0
        magnitude += 1
    return f"{rounded:,.{max(0, digits - 1 - magnitude)}f}"


def _scaled(value: Any, units: tuple[tuple[float, str], ...], digits: int = 3) -> str:
    x = _number(value)
    if x is None:
        return MISSING
    factor, unit = units[0]
    for factor, unit in units:  # noqa: B007  (the last unit that fits is kept)
        if abs(x) < factor * 1000:
            break
    return f"{significant(x / factor, digits)} {unit}"


def bytes_text(value: Any) -> str:
    """Bytes in binary units: 1.18 GiB, 512 MiB, 12 KiB, 300 B."""
    x = _number(value)
    if x is None:
        return MISSING
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    i = 0
    while abs(x) >= 1024 and i < len(units) - 1:
        x /= 1024
        i += 1
    return f"{int(x)} B" if i == 0 else f"{significant(x)} {units[i]}"


def count_text(value: Any) -> str:
    """A count in k/M/G: 11.7 M (parameters), 1.81 G (MACs)."""
    return _scaled(value, ((1, ""), (1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T"))).rstrip()


def flops_text(value: Any, per_s: bool = True) -> str:
    """FLOP or FLOP/s in SI steps: 172 GFLOP/s, 74.0 MFLOP."""
    unit = "FLOP/s" if per_s else "FLOP"
    return _scaled(value, tuple((f, p + unit) for f, p in
                                ((1, ""), (1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T"), (1e15, "P"))))


def bandwidth_text(value: Any) -> str:
    """Bytes per second in SI steps, as vendors quote bandwidth: 30.7 GB/s."""
    return _scaled(value, ((1, "B/s"), (1e3, "kB/s"), (1e6, "MB/s"), (1e9, "GB/s"), (1e12, "TB/s")))


def seconds_text(value: Any) -> str:
    """A duration in the unit that reads best: 850 µs, 12.3 ms, 2.64 s, 4 min 09 s, 2 h 05 min."""
    x = _number(value)
    if x is None:
        return MISSING
    if abs(x) >= 3600:
        hours, rest = divmod(round(x), 3600)
        return f"{hours} h {rest // 60:02d} min"
    if abs(x) >= 60:
        minutes, seconds = divmod(round(x), 60)
        return f"{minutes} min {seconds:02d} s"
    if abs(x) >= 1:
        return f"{significant(x)} s"
    if abs(x) >= 1e-3:
        return f"{significant(x * 1e3)} ms"
    return f"{significant(x * 1e6)} \u00b5s"


def samples_per_s_text(value: Any) -> str:
    """A throughput: ``1,300 samples/s``, or the en dash."""
    return f"{significant(value)} samples/s" if _number(value) is not None else MISSING


def ms_text(value_ms: Any) -> str:
    """Milliseconds as they are stored (``*_ms`` columns), read in the unit that fits."""
    x = _number(value_ms)
    return MISSING if x is None else seconds_text(x / 1e3)


def percent_text(fraction: Any, digits: int = 3) -> str:
    """A fraction as a percentage: 0.9694 -> 96.9%; a share under 0.01% reads <0.01%."""
    x = _number(fraction)
    if x is None:
        return MISSING
    if 0 < abs(x) < 1e-4:  # under 0.01%: the digits would only say how small
        return "<0.01%" if x > 0 else "-<0.01%"
    return f"{significant(x * 100, digits)}%"


def percent_interval_text(low: Any, high: Any) -> str:
    """An interval of fractions as percentages after a figure, ' [81%, 100%]'; empty where it has no low end."""
    return f" [{percent_text(low, 2)}, {percent_text(high, 2)}]" if _number(low) is not None else ""


def ratio_text(ratio: Any, low: Any = None, high: Any = None) -> str:
    """A ratio with its interval where there is one: 1.26x [1.19, 1.33] (``sentences.ratio_interval``: the
    interval rounded outward, so the point never reads outside it)."""
    r = _number(ratio)
    if r is None:
        return MISSING
    lo, hi = _number(low), _number(high)
    return ratio_interval(r, lo, hi) if lo is not None and hi is not None else f"{r:.2f}x"


def accuracy_text(accuracy: Any, low: Any = None, high: Any = None) -> str:
    """An accuracy with its 95% interval where the row has one: 96.9% [95.1, 98.0] (both ends in %)."""
    text = percent_text(accuracy)
    lo, hi = _number(low), _number(high)
    if text == MISSING or lo is None or hi is None:
        return text
    return f"{text} [{significant(lo * 100)}, {significant(hi * 100)}]"


_TOO_FEW = re.compile(r"too few samples \(n=(\d+), p[\d.]+ needs (\d+)\)")


WIDE = "wide interval"  # a percentile given with an interval wider than a quiet host's (a busy host's figure)


def percentile_reason(status: Any) -> str | None:
    """Why a percentile is missing, short: ``n=50 < 299``; None when it is not (given, or given as wide)."""
    if not isinstance(status, str) or not status.strip() or status in ("ok", "nan", "None") or \
            status.startswith(WIDE):
        return None
    few = _TOO_FEW.search(status)
    if few:
        return f"n={few.group(1)} < {few.group(2)}"
    return status.split(" (")[0]


def percentile_text(value: Any, status: Any = None, show: Callable[[Any], str] = ms_text, low: Any = None,
                    high: Any = None) -> str:
    """A published percentile with its 95% interval where given (``5.87 ms [5.82, 5.92]``, marked ``(wide
    interval)`` where a busy host widened it), or an en dash with why it was not published: ``– (n=50 < 299)``.

    A value whose status says it was refused is never shown, whatever the cell holds.
    """
    why = percentile_reason(status)
    if why is not None:
        return f"{MISSING} ({why})"
    text = show(value)
    lo, hi = _number(low), _number(high)
    wide = f" ({WIDE})" if isinstance(status, str) and status.startswith(WIDE) and text != MISSING else ""
    if text == MISSING or lo is None or hi is None:
        return text + wide
    return f"{text} [{significant(lo)}, {significant(hi)}]{wide}"


def value_text(value: Any) -> str:
    """Any cell: numbers by ``significant``, booleans as yes/no, missing as an en dash, text as it is."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value if value.strip() and value.lower() not in ("nan", "none", "null") else MISSING
    x = _number(value)
    if x is None:
        return MISSING
    return f"{int(x):,}" if x.is_integer() and abs(x) < 1e15 else significant(x)
