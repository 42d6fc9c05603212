"""Operator-wise and step-time breakdowns of training steps with ``torch.profiler``.

The same views the PyTorch Profiler plugin of TensorBoard shows (operator table, step-time breakdown,
trace), computed in Python so they land in CSV files next to the benchmark results. The training step
is the benchmark's own (same loaders, model, optimizer), with each part labelled by ``record_function``
so the trace and the tables name where a step's time went.

Times are microseconds (``_us``) as the profiler reports them. The step-time breakdown partitions each
profiled step's wall-clock range by priority, as TensorBoard's overview does: device kernels, then
copies, then data loading, then host execution; what no category covers is ``other``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import pandas as pd
import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

from .config import RunConfig
from .devices import resolve_hardware, synchronize
from .errors import ConfigError
from .loaders import build_loaders
from .models import build_model
from .results import atomic_write_text, safe_name
from .train import make_optimizer

REGIONS = ("data_wait", "h2d_copy", "forward", "backward", "optimizer_step")
BREAKDOWN_CATEGORIES = ("data_loading", "memcpy", "compute", "cpu_exec", "other")
OPERATOR_COLUMNS = (
    "name", "calls", "self_cpu_time_us", "cpu_time_total_us", "self_device_time_us", "device_time_total_us",
    "cpu_memory_usage_bytes", "self_cpu_memory_usage_bytes", "device_memory_usage_bytes",
    "self_device_memory_usage_bytes",
)
STEP_COLUMNS = ("step", "step_time_us") + tuple(f"{r}_us" for r in REGIONS)
BREAKDOWN_COLUMNS = ("category", "time_us", "fraction")
_STEP_PREFIX = "ProfilerStep#"
_COMPUTE_REGIONS = ("forward", "backward", "optimizer_step")
_DEVICE_TYPES = {DeviceType.CUDA, DeviceType.XPU, DeviceType.PrivateUse1}
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


def _interval(event: Any) -> Interval:
    return float(event.time_range.start), float(event.time_range.end)


def _is_host(event: Any) -> bool:
    return event.device_type == DeviceType.CPU and not getattr(event, "is_async", False)


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
    if event.device_type not in _DEVICE_TYPES:
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
        number = _step_number(e) if _is_host(e) else None
        if number is not None:
            start, end = _interval(e)
            spans.append(StepSpans(number, start, end))
    spans.sort(key=lambda s: s.start_us)
    if not spans:
        return spans
    for e in events:
        kind = device_work_kind(e)
        is_region = _is_host(e) and e.name in REGIONS
        if not is_region and kind is None:
            continue
        start, end = _interval(e)
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
    """Partition one step's wall time into BREAKDOWN_CATEGORIES by priority, as TensorBoard does.

    With a device timeline, compute is kernel time and cpu_exec the host time of forward, backward
    and optimizer_step not hidden under kernels or copies. Without one (CPU runs) that host time is
    the compute itself and cpu_exec stays 0. Every category is clipped to the step, so they never
    add up to more than the step.
    """
    host_compute = [i for r in _COMPUTE_REGIONS for i in span.regions[r]]
    claims = {
        "compute": span.kernels if device_timeline else host_compute,
        "memcpy": span.copies + span.regions["h2d_copy"],
        "data_loading": span.regions["data_wait"],
        "cpu_exec": host_compute if device_timeline else [],
    }
    taken: list[Interval] = []
    times = {}
    for category in ("compute", "memcpy", "data_loading", "cpu_exec"):
        own = subtract_intervals(clip_intervals(claims[category], span.start_us, span.end_us), taken)
        times[category] = covered_us(own)
        taken = merge_intervals(taken + own)
    times["other"] = span.step_time_us - sum(times.values())
    return {c: times[c] for c in BREAKDOWN_CATEGORIES}


def breakdown_table(spans: Sequence[StepSpans], *, device_timeline: bool) -> tuple[pd.DataFrame, list[str]]:
    """Step-time breakdown summed over ``spans``: category, time_us, fraction (fractions sum to 1)."""
    totals = {c: 0.0 for c in BREAKDOWN_CATEGORIES}
    for span in spans:
        for category, us in step_breakdown_us(span, device_timeline=device_timeline).items():
            totals[category] += us
    notes = []
    if totals["other"] < -_TOLERANCE_US:
        notes.append(f"'other' came out {totals['other']:.1f} us (negative) and was clamped to 0")
    totals["other"] = max(0.0, totals["other"])
    whole = sum(totals.values())
    if whole <= 0:
        fractions = {c: float(c == "other") for c in BREAKDOWN_CATEGORIES}
        notes.append("no profiled step time: the breakdown is all 'other'")
    else:
        fractions = {c: totals[c] / whole for c in BREAKDOWN_CATEGORIES}
    rows = [{"category": c, "time_us": totals[c], "fraction": fractions[c]} for c in BREAKDOWN_CATEGORIES]
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
    } for a in averages if a.device_type == DeviceType.CPU and _is_operator(a.key)]
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

    def save(self, out_dir: Path) -> dict[str, Path]:
        """Write each table as ``<name>.csv`` under ``out_dir`` atomically; returns name -> path."""
        out_dir = Path(out_dir)
        paths = {}
        for name, table in self.tables().items():
            path = out_dir / f"{name}.csv"
            atomic_write_text(path, table.to_csv(index=False))
            paths[name] = path
        return paths


# ---------------------------------------------------------------- profiling run (I/O)

class _CycleCollector:
    """``on_trace_ready``: keep a cycle's numbers before the next cycle replaces them, then write its traces.

    Kineto's save is destructive ("Trace is already saved" on a second export), so the trace is
    exported once, by TensorBoard's handler, and ``trace.json`` is a copy of that file.
    """

    def __init__(self, tensorboard_dir: Path, trace_path: Path, worker_name: str):
        self.tensorboard_dir = tensorboard_dir
        self.trace_path = trace_path
        self._write_tensorboard = tensorboard_trace_handler(str(tensorboard_dir), worker_name=worker_name)
        self.operator_tables: list[pd.DataFrame] = []
        self.spans: list[StepSpans] = []
        self.cycles = 0

    def __call__(self, prof: profile) -> None:
        self.operator_tables.append(operators_table(prof.key_averages()))
        self.spans.extend(step_spans(prof.events()))
        before = set(_tensorboard_traces(self.tensorboard_dir))
        self._write_tensorboard(prof)
        written = [p for p in _tensorboard_traces(self.tensorboard_dir) if p not in before]
        if written:
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.trace_path, written[-1].read_text(encoding="utf-8"))
        self.cycles += 1


def _tensorboard_traces(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.pt.trace.json"), key=lambda p: p.stat().st_mtime_ns) if folder.is_dir() else []


def _cycle(loader: Iterable) -> Iterator[Any]:
    """Batches of ``loader`` forever, starting a new epoch when one ends (inside ``data_wait``)."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ValueError("the training loader yields no batches")


def _check_schedule(wait: int, warmup: int, active: int, repeat: int, top_n: int) -> None:
    for name, value, least in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 1),
                               ("repeat", repeat, 1), ("top_n", top_n, 1)):
        if not isinstance(value, int) or value < least:
            raise ConfigError(f"profiling '{name}' is {value!r}; allowed: an integer >= {least}")


def _activities(device: torch.device) -> list[ProfilerActivity]:
    if device.type == "cuda":
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    return [ProfilerActivity.CPU]


def _profiled_step(model: nn.Module, batches: Iterator[Any], criterion: nn.Module,
                   optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """One training step as the benchmark does it, each part under its REGIONS label."""
    with record_function("data_wait"):
        x, y = next(batches)
    with record_function("h2d_copy"):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    with record_function("forward"):
        loss = criterion(model(x), y)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer_step"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    # Per-step sync keeps each step's kernels inside its own ProfilerStep range (no-op on CPU).
    synchronize(device)


def _run_notes(device: torch.device, loader_batches: int, total_steps: int, cycles: int,
               tensorboard_traces: int) -> list[str]:
    notes = []
    if device.type == "cuda":
        notes.append("compute is device kernel time inside each step; cpu_exec is host time of forward, backward "
                     "and optimizer_step not covered by kernels or copies; memcpy is device copies plus h2d_copy")
        notes.append("each profiled step ends with a device synchronize so its kernels fall inside its own step")
    else:
        notes.append(f"no device timeline on {device.type}: self_device_time_us is 0 and top_by_self_device is empty")
        notes.append("on a CPU-only run compute is CPU execution: forward, backward and optimizer_step host time "
                     "count as compute and cpu_exec is 0")
    if loader_batches < total_steps:
        notes.append(f"the loader has {loader_batches} batches per epoch for {total_steps} steps: it was cycled, "
                     "so data_wait includes starting new epochs")
    if cycles > 1:
        notes.append(f"{cycles} profiling cycles: tables sum all of them; trace.json is the last cycle, "
                     f"tensorboard/ holds {tensorboard_traces} traces, one per cycle")
    return notes


def profile_training(cfg: RunConfig, out_dir: Path, *, wait: int = 1, warmup: int = 1, active: int = 3,
                     repeat: int = 1, top_n: int = 20, record_shapes: bool = True,
                     profile_memory: bool = True) -> ProfileResult:
    """Profile ``(wait + warmup + active) * repeat`` training steps of ``cfg`` and tabulate the active ones.

    Writes ``out_dir/trace.json`` (Chrome/Perfetto) and ``out_dir/tensorboard/*.pt.trace.json`` (open
    with ``tensorboard --logdir out_dir/tensorboard``); the tables come back in a ProfileResult whose
    ``save`` writes them.
    """
    from .runner import seed_everything  # local: runner may come to import this module

    _check_schedule(wait, warmup, active, repeat, top_n)
    out_dir = Path(out_dir)
    tensorboard_dir = out_dir / "tensorboard"
    for stale in _tensorboard_traces(tensorboard_dir):  # a re-run replaces the traces of the last one
        stale.unlink()
    s = cfg.settings
    device = torch.device(resolve_hardware(cfg.hardware))
    seed_everything(s.seed)
    loaders = build_loaders(s, cfg.batch_size, device)
    model = build_model(cfg.model, loaders.num_classes, pretrained=s.pretrained,
                        freeze_backbone=s.freeze_backbone, weights_path=s.weights_path).to(device)
    model.train()
    optimizer = make_optimizer(model, s)
    criterion = nn.CrossEntropyLoss()
    collector = _CycleCollector(tensorboard_dir, out_dir / "trace.json", safe_name(cfg.run_id))
    total_steps = (wait + warmup + active) * repeat
    batches = _cycle(loaders.train)
    synchronize(device)
    with profile(activities=_activities(device),
                 schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
                 on_trace_ready=collector, record_shapes=record_shapes, profile_memory=profile_memory,
                 with_stack=False) as prof:
        for _ in range(total_steps):
            _profiled_step(model, batches, criterion, optimizer, device)
            prof.step()
    device_timeline = device.type == "cuda"
    operators = combine_operator_tables(collector.operator_tables)
    breakdown, breakdown_notes = breakdown_table(collector.spans, device_timeline=device_timeline)
    notes = _run_notes(device, len(loaders.train), total_steps, collector.cycles,
                       len(_tensorboard_traces(tensorboard_dir))) + breakdown_notes
    top_device = top_by(operators, "self_device_time_us", top_n)
    if device_timeline and top_device.empty:
        notes.append("the profiler recorded no device time for any operator (CUPTI unavailable?)")
    if len(collector.spans) != active * repeat:
        notes.append(f"expected {active * repeat} profiled steps, the profiler returned {len(collector.spans)}")
    return ProfileResult(
        operators=operators, top_by_self_cpu=top_by(operators, "self_cpu_time_us", top_n),
        top_by_self_device=top_device, steps=steps_table(collector.spans), breakdown=breakdown,
        trace_path=out_dir / "trace.json", tensorboard_dir=tensorboard_dir, notes=notes,
    )


def format_breakdown(breakdown: pd.DataFrame) -> str:
    """The breakdown as short lines (``compute  81.2 %  12345 us``) for logs and notebooks."""
    lines = []
    for row in breakdown.itertuples(index=False):
        pct = 100.0 * row.fraction if math.isfinite(row.fraction) else math.nan
        lines.append(f"{row.category:<13}{pct:6.1f} %  {row.time_us:12.0f} us")
    return "\n".join(lines)


def profile_dir(results_dir: Path, machine: str, cfg: RunConfig) -> Path:
    """Where a configuration's profile lives: ``<results>/profiles/<machine>__<run_id>/``."""
    return Path(results_dir) / "profiles" / safe_name(f"{machine}__{cfg.run_id}")


def record_profile(cfg: RunConfig, results_dir: Path, **schedule_args: int) -> tuple[ProfileResult, Path]:
    """Profile ``cfg`` and save its tables, trace and TensorBoard logs under the results folder."""
    from .manifest import machine_name

    out = profile_dir(results_dir, machine_name(), cfg)
    result = profile_training(cfg, out, **schedule_args)
    result.save(out)
    meta = {"study": cfg.study, "run_id": cfg.run_id, "machine": machine_name(), "hardware": cfg.hardware,
            "model": cfg.model, "batch_size": cfg.batch_size, "notes": result.notes, **schedule_args}
    atomic_write_text(out / "profile.json", json.dumps(meta, indent=1) + "\n")
    return result, out


def load_profiles(results_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every saved profile: its metadata plus the breakdown and top-operator tables (read from CSV)."""
    found = []
    for d in results_dirs:
        for meta_path in sorted(Path(d).glob("profiles/*/profile.json")):
            try:
                meta = json.loads(meta_path.read_text())
                folder = meta_path.parent
                meta["breakdown"] = pd.read_csv(folder / "breakdown.csv")
                meta["top_self_cpu"] = pd.read_csv(folder / "top_self_cpu.csv")
                meta["top_self_device"] = pd.read_csv(folder / "top_self_device.csv")
                meta["steps"] = pd.read_csv(folder / "steps.csv")
                meta["folder"] = str(folder)
            except (OSError, ValueError) as exc:
                import warnings

                warnings.warn(f"skipping unreadable profile {meta_path.parent}: {exc}", stacklevel=2)
                continue
            found.append(meta)
    return found
