"""Profile training steps of one configuration with ``torch.profiler`` and save where the time went.

The same views the PyTorch Profiler plugin of TensorBoard shows (operator table, step-time breakdown,
trace), computed in Python (:mod:`benchlib.instruments.profiler`) so they land in CSV files next to the
benchmark results. The profiled step is the engine's :func:`~benchlib.engine.step.train_step` with the
variant's knobs applied (autocast, scaler, channels_last, compile, backend flags), each part labelled by
``record_function`` so the trace and the tables name where a step's time went.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

from ..engine.setup import build, check_runs, configuration, wrap
from ..engine.step import Trainer, train_step
from ..env.devices import resolve_hardware, synchronize
from ..env.manifest import machine_name
from ..errors import ConfigError
from ..instruments.profiler import (
    ProfileResult,
    StepSpans,
    breakdown_table,
    combine_operator_tables,
    operators_table,
    step_spans,
    steps_table,
    top_by,
)
from ..spec.settings import RunConfig
from ..store.atomic import atomic_write_json, atomic_write_text, safe_name
from ..store.layout import ResultsLayout

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


# Kineto's own log lines (``KINETO_LOG_LEVEL``, read when profiling starts): 4 keeps its errors (and two
# start/stop lines) on CUDA; 6 silences it where no GPU is profiled, whose only error is that it found none.
_KINETO_LOG_LEVEL = {"cuda": "4"}
_KINETO_QUIET = "6"


def _quiet_kineto(device: torch.device) -> None:
    """Keep Kineto's log noise out of the page (a level the user set is left alone)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", _KINETO_LOG_LEVEL.get(device.type, _KINETO_QUIET))


def _activities(device: torch.device) -> list[ProfilerActivity]:
    if device.type == "cuda":
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    return [ProfilerActivity.CPU]


def _run_notes(device: torch.device, loader_batches: int, total_steps: int, cycles: int,
               tensorboard_traces: int) -> list[str]:
    notes = []
    if device.type == "cuda":
        notes.append("compute is device kernel time inside each step; cpu_exec is host time of forward, backward "
                     "and optimizer_step not covered by kernels or copies; memcpy is device copies plus h2d_copy")
        notes.append("each profiled step ends with a device synchronize so its kernels fall inside its own step")
    else:
        notes.append(f"no device timeline on {device.type}: operators have no device time")
        notes.append(f"on {device.type} the host time is the compute: split into forward, backward and optimizer "
                     "by the step's labelled regions (cpu_exec, host time beside device kernels, does not apply)")
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
    with ``tensorboard --logdir out_dir/tensorboard``); the tables come back in a ProfileResult.

    Raises:
        SkippedConfiguration: the variant cannot run on this device.
    """
    _check_schedule(wait, warmup, active, repeat, top_n)
    out_dir = Path(out_dir)
    tensorboard_dir = out_dir / "tensorboard"
    for stale in _tensorboard_traces(tensorboard_dir):  # a re-run replaces the traces of the last one
        stale.unlink()
    device = torch.device(resolve_hardware(cfg.hardware))
    check_runs(cfg.settings, str(device))
    with configuration(device, cfg.settings):
        built = build(cfg, device, cfg.batch_size)
        net, _ = wrap(built.model, cfg.settings, device)
        trainer = Trainer.of(net, built.model, cfg.settings, device)
        net.train()
        collector = _CycleCollector(tensorboard_dir, out_dir / "trace.json", safe_name(cfg.run_id))
        total_steps = (wait + warmup + active) * repeat
        batches = _cycle(built.loaders.train)
        _quiet_kineto(device)
        synchronize(device)
        with profile(activities=_activities(device),
                     schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
                     on_trace_ready=collector, record_shapes=record_shapes, profile_memory=profile_memory,
                     with_stack=False) as prof:
            for _ in range(total_steps):
                with record_function("data_wait"):
                    x, y = next(batches)
                train_step(trainer, x, y, region=record_function)
                synchronize(device)  # keeps each step's kernels inside its own ProfilerStep range (no-op on CPU)
                prof.step()
    device_timeline = device.type == "cuda"
    operators = combine_operator_tables(collector.operator_tables)
    breakdown, breakdown_notes = breakdown_table(collector.spans, device_timeline=device_timeline)
    notes = _run_notes(device, len(built.loaders.train), total_steps, collector.cycles,
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


def save_tables(result: ProfileResult, out_dir: Path) -> dict[str, Path]:
    """Write each table as ``<name>.csv`` under ``out_dir`` atomically; returns name -> path."""
    paths = {}
    for name, table in result.tables().items():
        path = Path(out_dir) / f"{name}.csv"
        atomic_write_text(path, table.to_csv(index=False))
        paths[name] = path
    return paths


def record_profile(cfg: RunConfig, results_dir: str | Path, *, wait: int = 1, warmup: int = 1, active: int = 3,
                   repeat: int = 1) -> tuple[ProfileResult, Path]:
    """Profile ``cfg`` and save its tables, trace and TensorBoard logs under the results folder."""
    machine = machine_name()
    out = ResultsLayout.of(results_dir).profile_dir(machine, cfg.run_id)
    schedule_args = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
    result = profile_training(cfg, out, wait=wait, warmup=warmup, active=active, repeat=repeat)
    save_tables(result, out)
    meta = {"study": cfg.study, "run_id": cfg.run_id, "machine": machine, "hardware": cfg.hardware,
            "model": cfg.model, "batch_size": cfg.batch_size, "notes": result.notes, **schedule_args}
    atomic_write_json(out / "profile.json", meta)
    return result, out
