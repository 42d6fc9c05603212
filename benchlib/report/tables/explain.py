"""Why B is faster than A: the difference of two configurations' step split layer by layer, with intervals.

Each side is one or more runs (a per-layer file each, ``benchlib layers`` or ``layers: true``); each run holds
its plain steps (the whole, timed without the profiler) and every profiled step's time of each (layer, phase),
the optimizer's step, the wait for the batch and what no layer holds (``(unattributed)``: the profiled step
less all of those, measured by the profiler's own step range). A part's figure on a side is the median of its
runs' medians, as ``stats.compare_runs`` takes a side's figure; its interval comes from the same hierarchical
bootstrap (runs resampled, then the steps inside each chosen run). Layers are matched by name: a layer one
side does not have (fused or quantized away) is a part of its own, 0 on the other side. What timing layer by
layer cost the step (``(timing)``, CPU files) is the instrument's time, not the work's: no part, said in a note.

The parts are checked against the whole, never forced to it: ``coverage`` is the sum of the parts'
differences over the plain steps' difference, with an interval from the runs resampled (each part's figure
is the median of its runs, and runs that drift by a quarter make those medians add up loosely), and a coverage
outside ``COVERAGE_RANGE`` is said: as noise where its interval reaches the range, as parts that do not add
up where it does not. Nothing is
explained where the whole difference is not told apart from noise (a verdict of same or inconclusive, a
difference within the noise floor, or, with no verdict to rest on, an interval that holds 0). Where the rows
told the sides apart but the fewer per-layer steps cannot (a VM whose runs differ by a quarter hides a 10%
whole, not a 40% change in a few layers), the split is made and says so. Pure: the files are read in
``readback.layers``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from ...spec.vocab import TIMING_LAYER
from ..evidence.stats import CLAIMS, CONFIDENCE, RESAMPLES, SEED, hierarchical_medians

Key = tuple[str, str]  # (layer, phase)
TRAINING, INFERENCE = "train_step_s", "forward_bs1_s"  # what is split: a training step, a batch-1 forward
PER_SAMPLE = "train_sample_s"  # a training step over its batch: two batch sizes are compared per sample
COVERAGE_RANGE = (0.9, 1.1)  # the parts' sum over the measured difference where the split adds up
WHAT = {TRAINING: "training step", INFERENCE: "batch-1 forward",
        PER_SAMPLE: "training step per sample"}  # what each metric splits, in words
_CHUNK_VALUES = 4_000_000  # floats a coverage replicate batch may hold (32 MB)
_SPECIAL = {"(optimizer)": "the optimizer's step", "(unattributed)": "what no layer holds",
            "(data wait)": "waiting for the batch"}
PART_COLUMNS = ("layer", "phase", "a_s", "b_s", "delta_s", "ci_low", "ci_high", "share", "only_in", "bound_a",
                "bound_b", "roof_fraction_a", "roof_fraction_b")


@dataclass(frozen=True)
class LayerRun:
    """One run's per-layer file as the split reads it: the whole per plain step, each part per profiled step."""

    whole_s: np.ndarray  # seconds per plain step (a training step with the wait for its batch)
    parts: dict[Key, np.ndarray]  # seconds per profiled step (one median where the file kept no steps)
    roofs: dict[Key, tuple[str, float]] = field(default_factory=dict)  # bound word, fraction of the roof
    per_step: bool = True  # False: a format-1 file, medians only (no interval)
    timing_s: float = 0.0  # the median profiled step's cost of timing it layer by layer: no part of the split


def _bound(row: Mapping[str, Any]) -> tuple[str, float] | None:
    """``compute``, ``memory`` or ``cache`` (memory-bound with a working set inside the last-level cache)."""
    bound = row.get("bound")
    if not isinstance(bound, str) or not bound:
        return None
    word = "cache" if bound == "memory" and bool(row.get("cache_resident")) else bound
    fraction = row.get("roof_fraction")
    return word, float(fraction) if isinstance(fraction, (int, float)) else math.nan


def run_of(data: Mapping[str, Any], inference: bool = False) -> LayerRun | None:
    """A per-layer file's training step (or, with ``inference``, its batch-1 forward) as a ``LayerRun``; None
    where the file has none (a format-1 file has no batch-1 forward)."""
    part = data.get("inference") if inference else data
    if not part:
        return None
    rows = list(part.get("layers") or [])
    roofs = {(str(r["layer"]), str(r["phase"])): b for r in rows if (b := _bound(r)) is not None}
    series = part.get("per_step") or []
    if series:
        parts = {(str(s["layer"]), str(s["phase"])): np.asarray(s["time_s"], dtype=float) for s in series}
        timing = parts.pop((TIMING_LAYER, "other"), np.zeros(1))
        plain = np.asarray(part.get("plain_steps_s") or [], dtype=float)
        wait = np.asarray(part.get("plain_data_wait_s") or [], dtype=float)
        whole = plain + wait if wait.size == plain.size else plain
        return LayerRun(whole, parts, roofs, per_step=True, timing_s=float(np.median(timing)))
    if not rows or not part.get("step_s"):
        return None
    medians = {(str(r["layer"]), str(r["phase"])): np.asarray([float(r["time_s"] or 0.0)]) for r in rows
               if r["layer"] != TIMING_LAYER}
    return LayerRun(np.asarray([float(part["step_s"])]), medians, roofs, per_step=False)


def per_sample(run: LayerRun, batch_size: int) -> LayerRun:
    """A run's step and parts over its batch size: two batch sizes differ per sample, not per step."""
    if batch_size < 1:
        raise ValueError(f"per_sample: batch size {batch_size}; allowed: 1 or more")
    return LayerRun(run.whole_s / batch_size, {k: v / batch_size for k, v in run.parts.items()}, run.roofs,
                    run.per_step, run.timing_s / batch_size)


@dataclass(frozen=True)
class Explanation:
    """B against A on one metric (``TRAINING`` or ``INFERENCE``), split into parts; empty ``parts`` and a
    ``why`` where nothing is explained."""

    metric: str
    a_s: float
    b_s: float
    delta_s: float  # B less A: negative where B takes less time
    ci_low: float
    ci_high: float
    coverage: float  # the parts' differences summed, over delta_s
    parts: pd.DataFrame
    runs_a: int
    runs_b: int
    why: str = ""  # why nothing is explained (empty where the parts are)
    notes: tuple[str, ...] = ()
    coverage_low: float = math.nan  # the coverage's interval over the runs resampled (NaN: one run a side)
    coverage_high: float = math.nan

    @property
    def explained(self) -> bool:
        return not self.why

    @property
    def covered(self) -> bool:
        """The parts add up to the measured difference within ``COVERAGE_RANGE``."""
        return COVERAGE_RANGE[0] <= self.coverage <= COVERAGE_RANGE[1]

    @property
    def coverage_reaches(self) -> bool:
        """The coverage's interval overlaps ``COVERAGE_RANGE``: a miss may be the noise of the whole."""
        return (math.isfinite(self.coverage_low) and self.coverage_low <= COVERAGE_RANGE[1]
                and self.coverage_high >= COVERAGE_RANGE[0])

    def as_dict(self) -> dict[str, Any]:
        """What ``benchlib diff --explain --json`` prints for it (causes are added by the caller, in words)."""
        return {"metric": self.metric, "a_s": self.a_s, "b_s": self.b_s, "delta_s": self.delta_s,
                "ci_low": self.ci_low, "ci_high": self.ci_high, "coverage": self.coverage,
                "coverage_ci_low": self.coverage_low, "coverage_ci_high": self.coverage_high,
                "coverage_ok": self.covered if self.explained else None, "explained": self.explained,
                "why": self.why, "runs_a": self.runs_a, "runs_b": self.runs_b, "notes": list(self.notes),
                "parts": self.parts.to_dict("records")}


def _figure(runs: Sequence[np.ndarray]) -> float:
    """A side's figure: the median of its runs' medians (``stats.compare_runs``)."""
    return float(np.median([np.median(r) for r in runs])) if runs else 0.0


def _delta(a: Sequence[np.ndarray], b: Sequence[np.ndarray], interval: bool,
           rng: np.random.Generator) -> tuple[float, float, float, float]:
    """A's and B's figures and B less A with its hierarchical bootstrap interval (NaN without one)."""
    fig_a, fig_b = _figure(a), _figure(b)
    if not interval:
        return fig_a, fig_b, math.nan, math.nan
    dist = hierarchical_medians(b, resamples=RESAMPLES, rng=rng) - hierarchical_medians(a, resamples=RESAMPLES,
                                                                                         rng=rng)
    tail = (1 - CONFIDENCE) / 2 * 100
    return fig_a, fig_b, float(np.percentile(dist, tail)), float(np.percentile(dist, 100 - tail))


def _series(runs: Sequence[LayerRun], key: Key) -> list[np.ndarray]:
    """A part's steps in each run; a run without the part ran it 0 s (a layer that side does not have)."""
    return [r.parts.get(key, np.zeros(max(1, len(next(iter(r.parts.values()), [0.0]))))) for r in runs]


def coverage_interval(runs_a: Sequence[LayerRun], runs_b: Sequence[LayerRun], keys: Sequence[Key], delta: float,
                      rng: np.random.Generator, resamples: int = RESAMPLES) -> tuple[float, float]:
    """The coverage's interval at the measured difference ``delta``: each side's runs resampled together for
    every part and the whole (a slow run slows all of them in a replicate), the parts' summed difference less
    the whole's, over ``delta``, plus 1. What it measures is how well the parts add up; the whole's own
    uncertainty is its interval's (dividing by a resampled whole that may cross 0 would say nothing). Runs
    only: the steps inside a run move the whole and its parts alike. NaN with one run on a side."""
    if min(len(runs_a), len(runs_b)) < 2 or not delta:
        return math.nan, math.nan

    def side(runs: Sequence[LayerRun]) -> np.ndarray:
        whole = np.asarray([np.median(r.whole_s) for r in runs])
        parts = np.asarray([[np.median(s) for s in (r.parts.get(k, np.zeros(1)) for k in keys)] for r in runs])
        pick = rng.integers(0, len(runs), size=(resamples, len(runs)))
        out = np.empty(resamples)
        chunk = max(1, _CHUNK_VALUES // parts.size)  # replicates at a time: densenet121's parts x 30 runs stay small
        for i in range(0, resamples, chunk):
            p = pick[i:i + chunk]
            out[i:i + chunk] = np.median(parts[p], axis=1).sum(axis=1) - np.median(whole[p], axis=1)
        return out

    ratio = 1 + (side(runs_b) - side(runs_a)) / delta
    tail = (1 - CONFIDENCE) / 2 * 100
    return float(np.percentile(ratio, tail)), float(np.percentile(ratio, 100 - tail))


def _roof(runs: Sequence[LayerRun], key: Key) -> tuple[str | None, float]:
    found = [r.roofs[key] for r in runs if key in r.roofs]
    if not found:
        return None, math.nan
    fractions = [f for _, f in found if math.isfinite(f)]
    return found[0][0], float(np.median(fractions)) if fractions else math.nan


def _unexplained(verdict: str | None, delta: float, a_s: float, low: float, high: float,
                 floor_pct: float) -> str:
    """Why the whole difference is not one to explain (empty where it is)."""
    if verdict is not None and verdict not in CLAIMS and verdict != "unknown":
        return (f"the rows' verdict is {verdict}: a difference not told apart from noise is not split into "
                "causes")
    if math.isfinite(floor_pct) and a_s > 0 and abs(delta) / a_s * 100 <= floor_pct:
        return (f"the per-layer steps differ by {abs(delta) / a_s:.1%}, within this machine's noise floor "
                f"(±{floor_pct:.0f}%): nothing to explain")
    if math.isfinite(low) and low <= 0 <= high and verdict not in CLAIMS:
        return "the interval of the per-layer steps' difference holds 0: nothing to explain"
    if verdict in ("faster", "better") and delta > 0 or verdict in ("slower", "worse") and delta < 0:
        return ("the per-layer steps moved the other way from the rows' verdict: their split would explain a "
                "difference the rows do not show")
    return ""


def explain(runs_a: Sequence[LayerRun], runs_b: Sequence[LayerRun], *, metric: str = TRAINING,
            verdict: str | None = None, floor_pct: float = math.nan, seed: int = SEED) -> Explanation:
    """B against A split into parts (``PART_COLUMNS``), sorted by their share of the difference, largest first.

    ``verdict``: the whole comparison's verdict (``diff`` or the summary's, B against A: ``faster`` means B
    takes less time; ``unknown``, no figure to judge, leaves the per-layer runs' own interval); ``floor_pct``:
    this machine's noise floor for single runs, in % (NaN: not measured).
    """
    if not runs_a or not runs_b:
        raise ValueError("explain: a side without a per-layer run; allowed: one or more runs a side")
    rng = np.random.default_rng(seed)
    interval = all(r.per_step and r.whole_s.size > 1 for r in (*runs_a, *runs_b))
    a_s, b_s, low, high = _delta([r.whole_s for r in runs_a], [r.whole_s for r in runs_b], interval, rng)
    delta = b_s - a_s
    notes = [] if interval else ["no interval: a per-layer file kept medians only (written before format 2, its "
                                 "data wait inside the unattributed rest), so the differences are points"]
    why = _unexplained(verdict, delta, a_s, low, high, floor_pct)
    if why:
        return Explanation(metric, a_s, b_s, delta, low, high, math.nan, pd.DataFrame(columns=list(PART_COLUMNS)),
                           len(runs_a), len(runs_b), why, tuple(notes))
    if math.isfinite(low) and low <= 0 <= high:  # the rows told the sides apart; the per-layer steps could not
        each = "a sample" if metric == PER_SAMPLE else ""
        notes.append(f"the per-layer runs' own difference, [{low * 1e3:.3g}, {high * 1e3:.3g}] ms{each and ' '}"
                     f"{each}, holds 0: the split rests on the rows' verdict, a part is named a cause only where its "
                     "own interval is clear of 0, and the coverage divides by this uncertain whole")
    keys = sorted({k for r in (*runs_a, *runs_b) for k in r.parts})
    rows = []
    for key in keys:
        in_a, in_b = any(key in r.parts for r in runs_a), any(key in r.parts for r in runs_b)
        pa, pb, lo, hi = _delta(_series(runs_a, key), _series(runs_b, key), interval, rng)
        (bound_a, frac_a), (bound_b, frac_b) = _roof(runs_a, key), _roof(runs_b, key)
        rows.append({"layer": key[0], "phase": key[1], "a_s": pa, "b_s": pb, "delta_s": pb - pa, "ci_low": lo,
                     "ci_high": hi, "share": (pb - pa) / delta if delta else math.nan,
                     "only_in": "" if in_a and in_b else ("A" if in_a else "B"), "bound_a": bound_a,
                     "bound_b": bound_b, "roof_fraction_a": frac_a, "roof_fraction_b": frac_b})
    parts = pd.DataFrame(rows, columns=list(PART_COLUMNS)).sort_values("share", ascending=False,
                                                                        ignore_index=True)
    coverage = float(parts["delta_s"].sum()) / delta if delta else math.nan
    cov_low, cov_high = coverage_interval(runs_a, runs_b, keys, delta, rng) if interval else (math.nan, math.nan)
    timing_a, timing_b = (float(np.median([r.timing_s for r in runs])) for runs in (runs_a, runs_b))
    if timing_a or timing_b:
        each = "sample" if metric == PER_SAMPLE else "step"
        notes.append(f"timing layer by layer cost {timing_a * 1e3:.3g} ms in A and {timing_b * 1e3:.3g} ms in B a "
                     f"{each} (the hooks' own time, median): the instrument's, left out of the parts")
    e = Explanation(metric, a_s, b_s, delta, low, high, coverage, parts, len(runs_a), len(runs_b), "", (),
                    cov_low, cov_high)
    return replace(e, notes=(*notes, *_coverage_notes(e)))


def _coverage_notes(e: Explanation) -> list[str]:
    """What a coverage outside the range means: the whole's noise (its interval reaches the range) or parts
    that do not add up to the plain steps (it does not, or there is no interval to tell)."""
    if e.covered:
        return []
    low, high = COVERAGE_RANGE
    head = f"the parts sum to {e.coverage:.3f}x the measured difference, outside {low}-{high}"
    if e.coverage_reaches:
        return [f"{head}, but its interval [{e.coverage_low:.2f}, {e.coverage_high:.2f}] over the runs reaches the "
                f"range: the whole's difference is too small against how the runs differ to check the split "
                f"here ({e.runs_a} and {e.runs_b} runs; more runs narrow it)"]
    known = (f" (interval [{e.coverage_low:.2f}, {e.coverage_high:.2f}] over the runs)"
             if math.isfinite(e.coverage_low) else "")
    return [f"{head}{known}: the steps timed layer by layer do not add up to the plain ones here (a cost of "
            "timing that differs between the sides, or a noisy host)"]


def part_name(layer: str, phase: str) -> str:
    """'layer4.0.conv2 backward', or a row no layer owns in words ('the optimizer's step')."""
    return _SPECIAL.get(layer, f"{layer} {phase}")


def causes(e: Explanation, top: int = 3) -> pd.DataFrame:
    """The parts that move the step the way the whole moved, their interval clear of 0 where they have one,
    largest first (``top`` of them): the causes a sentence names. None where nothing is explained."""
    if not e.explained or e.parts.empty:
        return e.parts.iloc[0:0]
    parts = e.parts
    same_way = np.sign(parts["delta_s"]) == np.sign(e.delta_s)
    low, high = parts["ci_low"].astype(float), parts["ci_high"].astype(float)
    clear = low.isna() | (low > 0) | (high < 0)  # a part whose interval holds 0 is not told apart from noise
    return parts[same_way & clear].sort_values("share", ascending=False).head(top)
