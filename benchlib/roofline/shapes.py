"""A model's own convolution and matmul shapes timed alone, forward and backward, on the machine at hand.

A roof is one shape's best; a network's layers are many shapes, and a library's kernels differ between them
(a small spatial convolution held to AVX2 runs 3x slower backward while the roof's large one loses 5%). So
``benchlib roofline --shapes-of RESULTS`` rebuilds each distinct layer of RESULTS' per-layer files from its
signature (``nets.layer_shapes``) and times it here, in the dtype and memory format it ran in, within a
budget and with no model and no training; ``benchlib predict`` then gives those layers their own shapes' times
(``roofline.predict.Shapes``) instead of carrying them by their kind's roof.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from ..env.tf32 import tf32
from ..log import ProgressFn, progress_of
from ..store.atomic import atomic_write_text, json_text
from ..store.layout import ResultsLayout

SHAPES_FORMAT = 1
BUDGET_S = 120.0  # the most the timing may take: a target's ceilings and shapes in about 2 minutes
_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def shape_key(dtype: str, text: str) -> str:
    """The key a timed shape is kept under: the dtype it ran in and its signature."""
    return f"{dtype} {text}"


def wanted(reports: Iterable[Mapping[str, Any]], also: Iterable[str] = ()) -> list[str]:
    """The distinct (dtype, signature) keys of per-layer reports: each training step's shapes and each batch-1
    forward's, in the dtype its roof was read in and in each dtype of ``also`` (a prediction in another
    precision); in first-seen order."""
    keys: dict[str, None] = {}
    extra = list(also)
    for r in reports:
        dtypes = dict.fromkeys([str(r.get("roof_dtype") or "fp32"), *extra])
        for shapes in (r.get("shapes") or {}, (r.get("inference") or {}).get("shapes") or {}):
            for text in shapes.values():
                for dtype in dtypes:
                    keys[shape_key(dtype, str(text))] = None
    return list(keys)


def _median_s(work: Callable[[], Any], sync: Callable[[], None], reps: int, least_s: float, per_sync: int) -> float:
    """The median of at least ``reps`` timings (more while they sum to under ``least_s``), after one warm-up; each
    timing ``per_sync`` calls back to back over one synchronisation (on a GPU the queue stays full, so a short
    kernel is timed as in a step, not with a launch's latency)."""
    work()
    sync()
    times: list[float] = []
    while len(times) < reps or (sum(times) < least_s and len(times) < 50):
        t0 = time.perf_counter()
        for _ in range(per_sync):
            work()
        sync()
        times.append((time.perf_counter() - t0) / per_sync)
    return statistics.median(times)


def time_shape(key: str, device: torch.device, reps: int = 5, least_s: float = 0.05) -> dict[str, float]:
    """One shape's forward and backward seconds (the backward: both the input's and the weights' gradients, as a
    training step runs them) on ``device``."""
    from ..nets.layer_shapes import module_of  # here: reading a shapes file (predict, the report) stays light

    dtype, text = key.split(" ", 1)
    module, shape, channels_last = module_of(text)
    module = module.to(device=device, dtype=_DTYPES.get(dtype, torch.float32))
    x = torch.randn(shape, device=device, dtype=_DTYPES.get(dtype, torch.float32))
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def backward() -> None:
        x.grad = None  # as a step's zeroed gradients: written, not added to
        module.zero_grad(set_to_none=True)
        out.backward(grad, retain_graph=True)

    # a tf32 roof: the shape timed with TF32 on, as its layers ran; strict fp32 otherwise
    with tf32(dtype == "tf32") if device.type == "cuda" else nullcontext():
        per_sync = 10 if device.type == "cuda" else 1
        with torch.no_grad():
            forward_s = _median_s(lambda: module(x), sync, reps, least_s, per_sync)
        out = module(x)
        grad = torch.ones_like(out)
        backward_s = _median_s(backward, sync, reps, least_s, per_sync)
    return {"forward_s": forward_s, "backward_s": backward_s}


def time_shapes(keys: list[str], device: torch.device, budget_s: float = BUDGET_S,
                progress: ProgressFn | None = None) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Each key's times, in order, until ``budget_s`` is spent; the keys left untimed (said, not guessed)."""
    say = progress_of(progress)
    start = time.perf_counter()
    timed: dict[str, dict[str, float]] = {}
    for i, key in enumerate(keys):
        if time.perf_counter() - start > budget_s:
            say(f"shapes: budget of {budget_s:.0f} s spent; {len(keys) - i} shape(s) left untimed")
            return timed, keys[i:]
        timed[key] = time_shape(key, device)
        if (i + 1) % 10 == 0 or i + 1 == len(keys):
            say(f"shapes: {i + 1}/{len(keys)} timed ({time.perf_counter() - start:.0f} s)")
    return timed, []


def shapes_path(ceilings_path: Path) -> Path:
    """Where a ceilings file's shapes live: ``DIR/shapes/`` beside ``DIR/ceilings/``, under the same name."""
    machine, _, device = ceilings_path.stem.partition("__")
    return ResultsLayout.of(ceilings_path.parent.parent).shapes_path(machine, device)


def save_shapes(results_dir: Path, machine: str, device: str, threads: int,
                timed: Mapping[str, Mapping[str, float]]) -> Path:
    """The timed shapes of this machine, merged into its file under ``results_dir/shapes/`` (a shape timed again
    keeps its newer figures) and written atomically."""
    path = ResultsLayout.of(results_dir).shapes_path(machine, device)
    known = read_shapes(path) if path.is_file() else {}
    data = {"format": SHAPES_FORMAT, "machine": machine, "device": device, "threads": threads,
            "torch": torch.__version__, "measured_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "times": {**known, **{k: dict(v) for k, v in timed.items()}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json_text(data, indent=1) + "\n")
    return path


def read_shapes(path: Path) -> dict[str, dict[str, float]]:
    """A shapes file's times ({key: {forward_s, backward_s}}); ValueError naming what is wrong with one that is not."""
    data = json.loads(path.read_text(encoding="utf-8"))
    times = data.get("times") if isinstance(data, dict) else None
    if not isinstance(times, dict) or data.get("format") != SHAPES_FORMAT:
        raise ValueError(f"{path}: not a benchlib shapes file (format {SHAPES_FORMAT})")
    out = {}
    for key, t in times.items():
        f, b = (float(t.get(k, math.nan)) for k in ("forward_s", "backward_s"))
        if math.isfinite(f) and math.isfinite(b) and f > 0 and b > 0:
            out[str(key)] = {"forward_s": f, "backward_s": b}
    return out
