"""Where the time of a profiled training step went: operator tables and step-time breakdowns (pure).

The same views the PyTorch Profiler plugin of TensorBoard shows (operator table, step-time breakdown,
trace), computed in Python so they land in CSV files next to the benchmark results. The training step
is the benchmark's own (same loaders, model, optimizer), with each part labelled by ``record_function``
so the trace and the tables name where a step's time went.

Times are microseconds (``_us``) as the profiler reports them. The step-time breakdown partitions each
profiled step's wall-clock range by priority, as TensorBoard's overview does: device kernels, then
copies, then data loading, then host execution; what no category covers is ``other``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

REGIONS = ("data_wait", "h2d_copy", "forward", "backward", "optimizer_step")
# With a device timeline (CUDA) time is split as TensorBoard does: device kernels (compute), copies, data, the host
# time beside the kernels (cpu_exec). On a CPU the host time is the compute, split by the step's own regions.
DEVICE_CATEGORIES = ("data_loading", "memcpy", "compute", "cpu_exec", "other")
HOST_CATEGORIES = ("data_loading", "memcpy", "forward", "backward", "optimizer", "other")
BREAKDOWN_CATEGORIES = ("data_loading", "memcpy", "compute", "forward", "backward", "optimizer", "cpu_exec", "other")
OPERATOR_COLUMNS = (
    "name", "calls", "self_cpu_time_us", "cpu_time_total_us", "self_device_time_us", "device_time_total_us",
    "cpu_memory_usage_bytes", "self_cpu_memory_usage_bytes", "device_memory_usage_bytes",
    "self_device_memory_usage_bytes",
)
STEP_COLUMNS = ("step", "step_time_us") + tuple(f"{r}_us" for r in REGIONS)
BREAKDOWN_COLUMNS = ("category", "time_us", "fraction")
_STEP_PREFIX = "ProfilerStep#"
_COMPUTE_REGIONS = ("forward", "backward", "optimizer_step")
# Profiler events' device types by name (torch.autograd.DeviceType members): compared by name, this module
# analyses events without importing torch, so a report that reads saved profiles does not load it.
_DEVICE_TYPES = frozenset({"CUDA", "XPU", "PrivateUse1"})


def _device_type(event: Any) -> str:
    kind = event.device_type
    return str(getattr(kind, "name", kind))
_KERNEL_ACTIVITIES = {"kernel"}
_COPY_ACTIVITIES = {"gpu_memcpy", "gpu_memset"}
_TOLERANCE_US = 1e-6

Interval = tuple[float, float]


# ---------------------------------------------------------------- intervals (pure)

def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping union of ``intervals`` (empty ones dropped)."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def subtract_intervals(intervals: Iterable[Interval], remove: Iterable[Interval]) -> list[Interval]:
    """The parts of ``intervals`` not covered by ``remove`` (both may overlap themselves)."""
    cuts = merge_intervals(remove)
    out: list[Interval] = []
    for start, end in merge_intervals(intervals):
        cursor = start
        for cut_start, cut_end in cuts:
            if cut_end <= cursor or cut_start >= end:
                continue
            if cut_start > cursor:
                out.append((cursor, cut_start))
            cursor = max(cursor, cut_end)
            if cursor >= end:
                break
        if cursor < end:
            out.append((cursor, end))
    return out


def clip_intervals(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """``intervals`` cut to ``[lo, hi]``: work outside a step is not that step's."""
    return merge_intervals((max(s, lo), min(e, hi)) for s, e in intervals)


def covered_us(intervals: Iterable[Interval]) -> float:
    """Length of the union of ``intervals``, counting overlaps once."""
    return sum(e - s for s, e in merge_intervals(intervals))


# ---------------------------------------------------------------- steps and breakdown (pure)

@dataclass
class StepSpans:
    """Where one profiled step's time went: host ranges of the labelled regions, device work within it."""

    step: int
    start_us: float
    end_us: float
    regions: dict[str, list[Interval]] = field(default_factory=lambda: {r: [] for r in REGIONS})
    kernels: list[Interval] = field(default_factory=list)
    copies: list[Interval] = field(default_factory=list)

    @property
    def step_time_us(self) -> float:
        return self.end_us - self.start_us


def event_interval(event: Any) -> Interval:
    """An event's (start, end) in microseconds."""
    return float(event.time_range.start), float(event.time_range.end)


def is_host_event(event: Any) -> bool:
    """An event the host ran in order (not a device kernel, not an async span)."""
    return _device_type(event) == "CPU" and not getattr(event, "is_async", False)


def _step_number(event: Any) -> int | None:
    """The N of a ``ProfilerStep#N`` host range (``trace_name`` keeps the number ``name`` drops)."""
    name = getattr(event, "trace_name", None) or event.name
    if not name.startswith(_STEP_PREFIX):
        return None
    try:
        return int(name[len(_STEP_PREFIX):])
    except ValueError:
        return None


def device_work_kind(event: Any) -> str | None:
    """'kernel', 'copy' or None for one profiler event: only device-side work counts on the device."""
    if _device_type(event) not in _DEVICE_TYPES:
        return None
    activity = getattr(event, "activity_type", None)
    if activity:
        return "kernel" if activity in _KERNEL_ACTIVITIES else "copy" if activity in _COPY_ACTIVITIES else None
    name = event.name  # older torch: no activity type, go by kineto's names
    if name in REGIONS or name.startswith(("ProfilerStep", "gpu_user_annotation")):
        return None
    return "copy" if name.startswith(("Memcpy", "Memset")) else "kernel"


def step_spans(events: Sequence[Any]) -> list[StepSpans]:
    """Per-step spans from one profiling cycle's events (``prof.events()``), in step order."""
    spans = []
    for e in events:
        number = _step_number(e) if is_host_event(e) else None
        if number is not None:
            start, end = event_interval(e)
            spans.append(StepSpans(number, start, end))
    spans.sort(key=lambda s: s.start_us)
    if not spans:
        return spans
    for e in events:
        kind = device_work_kind(e)
        is_region = is_host_event(e) and e.name in REGIONS
        if not is_region and kind is None:
            continue
        start, end = event_interval(e)
        for span in spans:
            if is_region and span.start_us <= start < span.end_us:
                span.regions[e.name].append((start, end))
            elif kind is not None and start < span.end_us and end > span.start_us:
                (span.kernels if kind == "kernel" else span.copies).append((start, end))
    return spans


def steps_table(spans: Sequence[StepSpans]) -> pd.DataFrame:
    """One row per profiled step: its wall time and the host time of each labelled region."""
    rows = [{"step": s.step, "step_time_us": s.step_time_us,
             **{f"{r}_us": covered_us(s.regions[r]) for r in REGIONS}} for s in spans]
    return pd.DataFrame(rows, columns=list(STEP_COLUMNS))


def step_breakdown_us(span: StepSpans, *, device_timeline: bool) -> dict[str, float]:
    """Partition one step's wall time into categories by priority, as TensorBoard does (every category
    clipped to the step and to what a higher one took, so they never add up to more than the step).

    With a device timeline (``DEVICE_CATEGORIES``), compute is kernel time and cpu_exec the host time of
    forward, backward and optimizer_step not hidden under kernels or copies. Without one
    (``HOST_CATEGORIES``: CPU runs) the host time is the compute itself, split into forward, backward and
    optimizer by the step's labelled regions. Only the categories of its kind are returned.
    """
    host_compute = [i for r in _COMPUTE_REGIONS for i in span.regions[r]]
    claims: dict[str, list[Interval]] = {
        "memcpy": span.copies + span.regions["h2d_copy"],
        "data_loading": span.regions["data_wait"],
    }
    if device_timeline:
        claims = {"compute": span.kernels, **claims, "cpu_exec": host_compute}
    else:
        claims = {"forward": span.regions["forward"], "backward": span.regions["backward"],
                  "optimizer": span.regions["optimizer_step"], **claims}
    taken: list[Interval] = []
    times = dict.fromkeys(DEVICE_CATEGORIES if device_timeline else HOST_CATEGORIES, 0.0)
    for category, intervals in claims.items():
        own = subtract_intervals(clip_intervals(intervals, span.start_us, span.end_us), taken)
        times[category] = covered_us(own)
        taken = merge_intervals(taken + own)
    times["other"] = span.step_time_us - sum(v for c, v in times.items() if c != "other")
    return times


def breakdown_table(spans: Sequence[StepSpans], *, device_timeline: bool) -> tuple[pd.DataFrame, list[str]]:
    """Step-time breakdown summed over ``spans``: category, time_us, fraction (fractions sum to 1), over the
    categories of its kind (``DEVICE_CATEGORIES`` with a device timeline, else ``HOST_CATEGORIES``)."""
    kind = DEVICE_CATEGORIES if device_timeline else HOST_CATEGORIES
    totals = {c: 0.0 for c in kind}
    for span in spans:
        for category, us in step_breakdown_us(span, device_timeline=device_timeline).items():
            totals[category] += us
    notes = []
    if totals["other"] < -_TOLERANCE_US:
        notes.append(f"'other' came out {totals['other']:.1f} us (negative) and was clamped to 0")
    totals["other"] = max(0.0, totals["other"])
    whole = sum(totals.values())
    if whole <= 0:
        fractions = {c: float(c == "other") for c in kind}
        notes.append("no profiled step time: the breakdown is all 'other'")
    else:
        fractions = {c: totals[c] / whole for c in kind}
    rows = [{"category": c, "time_us": totals[c], "fraction": fractions[c]} for c in kind]
    return pd.DataFrame(rows, columns=list(BREAKDOWN_COLUMNS)), notes


# ---------------------------------------------------------------- operators (pure)

def _is_operator(name: str) -> bool:
    """Our region labels and the profiler's step ranges are not operators: they are in ``steps``."""
    return name not in REGIONS and not name.startswith("ProfilerStep")


def operators_table(averages: Iterable[Any]) -> pd.DataFrame:
    """One row per host operator name from ``key_averages()`` (device kernels are charged to their op)."""
    rows = [{
        "name": a.key, "calls": int(a.count),
        "self_cpu_time_us": float(a.self_cpu_time_total), "cpu_time_total_us": float(a.cpu_time_total),
        "self_device_time_us": float(getattr(a, "self_device_time_total", 0.0)),
        "device_time_total_us": float(getattr(a, "device_time_total", 0.0)),
        "cpu_memory_usage_bytes": int(a.cpu_memory_usage), "self_cpu_memory_usage_bytes": int(a.self_cpu_memory_usage),
        "device_memory_usage_bytes": int(getattr(a, "device_memory_usage", 0)),
        "self_device_memory_usage_bytes": int(getattr(a, "self_device_memory_usage", 0)),
    } for a in averages if _device_type(a) == "CPU" and _is_operator(a.key)]
    return pd.DataFrame(rows, columns=list(OPERATOR_COLUMNS))


def combine_operator_tables(tables: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Sum per-cycle operator tables by name (``repeat`` > 1), most self CPU time first."""
    frames = [t for t in tables if not t.empty]
    if not frames:
        return pd.DataFrame(columns=list(OPERATOR_COLUMNS))
    summed = pd.concat(frames).groupby("name", as_index=False, sort=False).sum()[list(OPERATOR_COLUMNS)]
    return summed.sort_values("self_cpu_time_us", ascending=False, kind="stable").reset_index(drop=True)


def top_by(operators: pd.DataFrame, column: str, n: int) -> pd.DataFrame:
    """The ``n`` operators with the most ``column``, descending; rows with none of it are left out."""
    nonzero = operators[operators[column] > 0]
    return nonzero.sort_values(column, ascending=False, kind="stable").head(n).reset_index(drop=True)




# ---------------------------------------------------------------- result

@dataclass
class ProfileResult:
    """Tables of one profiled training run and where its traces are."""

    operators: pd.DataFrame
    top_by_self_cpu: pd.DataFrame
    top_by_self_device: pd.DataFrame
    steps: pd.DataFrame
    breakdown: pd.DataFrame
    trace_path: Path
    tensorboard_dir: Path
    notes: list[str] = field(default_factory=list)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"operators": self.operators, "top_self_cpu": self.top_by_self_cpu,
                "top_self_device": self.top_by_self_device, "steps": self.steps, "breakdown": self.breakdown}


