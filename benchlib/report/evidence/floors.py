"""The machine's run-to-run noise floor, as a calibration measured it, as a table and in words: how far
fresh runs of identical settings may differ by noise alone, per metric.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from ...instruments.run_to_run import bounds, floor_of
from ...store.noise_floor import NoiseFloor
from ..words import fmt

FLOOR_LABELS = {"train_step_s": ("training step", fmt.seconds_text),
                "infer_samples_per_s": ("inference throughput", lambda v: f"{fmt.significant(v)}/s"),
                "latency_ms_p50": ("latency p50, batch 1", fmt.ms_text), "peak_rss_bytes": ("peak RSS", fmt.bytes_text)}


def floor_text(pct: float) -> str:
    """A floor as every page words it, its one rounding: two significant digits (5.4%, 29%); a floor that bounds
    nothing (``run_to_run.NO_BOUND_PCT`` and up) as what it is, not as a bound: ``no bound (identical runs may
    differ 6.5x)``; an en dash where none was measured."""
    if not np.isfinite(pct):
        return fmt.MISSING
    if not bounds(pct):
        return f"no bound (identical runs may differ {apart_text(pct)})"
    return f"{fmt.significant(pct, 2)}%"


def apart_text(pct: float) -> str:
    """How far apart two runs of identical settings may land by noise alone, as a factor: a floor of 545% is 6.5x."""
    return f"{fmt.significant(1 + pct / 100, 2)}x"


def noise_floor_table(floors: Sequence[NoiseFloor]) -> pd.DataFrame:
    """One line per machine, device and metric: how far two single runs of identical settings may differ by
    noise alone (``instruments.run_to_run.floor_pct``, pooled over the thread counts), the runs behind it
    and their figures per thread count (when and how they ran is ``floor_sentence``'s)."""
    records = []
    for f in floors:
        for metric in dict.fromkeys(m for per in f.values.values() for m in per):
            label, text = FLOOR_LABELS.get(metric, (metric, fmt.significant))
            per_threads = {n: per[metric] for n, per in sorted(f.values.items()) if per.get(metric)}
            records.append({"machine": f.machine, "device": f.device, "metric": label,
                            "floor %": floor_text(floor_of([f], metric)),
                            "runs": sum(len(v) for v in per_threads.values()),
                            "the runs' figures": "; ".join(f"{_threads(n)}: {', '.join(text(v) for v in values)}"
                                                           for n, values in per_threads.items())})
    return pd.DataFrame(records)


def _threads(n: int) -> str:
    return f"{n} thread{'s' if n > 1 else ''}"


def floor_sentence(f: NoiseFloor) -> str:
    """What one floor lets a comparison of single runs claim (the training step's and inference's floors; the
    others are in the table) and how it was measured: the one wording of a floor. A floor that bounds nothing
    (a calibration on a busy host) is said to, never quoted as a bound."""
    parts = [(label, floor_of([f], m)) for m, label in (("train_step_s", "training step time"),
                                                         ("infer_samples_per_s", "inference throughput"))]
    counts = " and ".join(_threads(n) for n in sorted(f.values))
    how = f"{f.runs} fresh runs at each of {counts} on {f.measured_utc[:16].replace('T', ' ')} UTC"
    claims = [f"{floor_text(pct)} in {label}" for label, pct in parts if bounds(pct) or not np.isfinite(pct)]
    boundless = [(label, pct) for label, pct in parts if np.isfinite(pct) and not bounds(pct)]
    said = []
    if claims:
        said.append(f"differences between single runs under {' and '.join(claims)} are within this machine's "
                    "run-to-run noise and are not claimed")
    if boundless:
        said.append(f"its calibration bounds nothing in {' or '.join(label for label, _ in boundless)}: its runs "
                    "of identical settings spread so far that two may differ "
                    f"{' and '.join(apart_text(p) for _, p in boundless)} by noise alone, which says the host was "
                    "busy while it ran, not how far runs differ; single runs in different processes compared on "
                    f"{'it' if len(boundless) == 1 else 'them'} are inconclusive until `benchlib calibrate` runs on "
                    "a quiet machine")
    busy = (" It was measured while other work ran, so it is wider than the machine's quiet floor."
            if f.interfered and not boundless else "")
    return f"On {f.machine} ({f.device}), {'; '.join(said)} ({how}; other metrics in the table).{busy}"


def noise_floor_sentences(floors: Sequence[NoiseFloor], machines: Iterable[str] = ()) -> list[str]:
    """Per floor, ``floor_sentence``; a line naming the ``machines`` without one."""
    out = [floor_sentence(f) for f in floors]
    missing = sorted({str(m) for m in machines} - {f.machine for f in floors})
    if missing:
        out.append(f"No noise floor was measured on {', '.join(missing)}: single-run comparisons are inconclusive; "
                   "run `benchlib calibrate`.")
    return out
