"""Two sides' rows with their per-layer files, verdicts and noise floor, handed to ``explain``.

A side's runs are its rows' per-layer files (read by the sample reader, ``readback.samples``); a row without
one is named with the command that measures it. The verdict a split must agree with is the rows' own
(``samples.compare_rows``, B against A): the training step's time for the step, the batch-1 latency for the
forward.
"""
from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ...spec.settings import RunSettings
from ...store.identity import settings_of
from ..evidence.diff import paired
from ..evidence.samples import MIN_RUNS, SampleReader, compare_rows, noise_floor_pct
from ..evidence.stats import PRACTICAL_THRESHOLD
from ..readback.samples import SampleFiles
from .explain import INFERENCE, PER_SAMPLE, TRAINING, Explanation, LayerRun, explain, per_sample, run_of

# the rows' metric whose verdict a split must agree with (per sample: throughput, higher is faster)
VERDICT_METRICS = {TRAINING: "train_step_s", INFERENCE: "latency_ms_p50", PER_SAMPLE: "train_samples_per_s"}


@dataclass
class Explained:
    """One configuration's explained differences (None where a side has no per-layer run of that kind)."""

    configuration: str
    training: Explanation | None = None
    inference: Explanation | None = None
    missing: list[str] = field(default_factory=list)  # one line per row without a per-layer file

    def as_dict(self) -> dict[str, Any]:
        return {"configuration": self.configuration, "missing": self.missing,
                **{key: e.as_dict() if e is not None else None
                   for key, e in (("training", self.training), ("inference", self.inference))}}


def layers_command(row: Mapping[str, Any]) -> str:
    """The ``benchlib layers`` command that measures a row's per-layer file under its own run id: its device,
    model, batch size and every setting that differs from the default."""
    settings = settings_of(row.get("settings_json"))
    default = RunSettings().flat()
    sets = [f"{k}={v}" for k, v in sorted(settings.items())
            if k != "dataset" and k in default and v != default[k] and v is not None]
    words = ["benchlib", "layers", "--results-dir", str(row.get("results_dir") or "RESULTS_DIR"), "--device",
             str(row["hardware"]), "--model", str(row["model"]), "--batch-size", str(int(row["batch_size"])),
             "--data", str(settings.get("dataset") or "digits"), *[w for s in sets for w in ("--set", s)]]
    return shlex.join(words)


def _runs(files: list[dict[str, Any]], inference: bool, batch_size: int | None = None) -> list[LayerRun]:
    runs = [r for f in files if (r := run_of(f, inference)) is not None]
    return [per_sample(r, batch_size) for r in runs] if batch_size else runs


def _batch_sizes(side_a: pd.DataFrame, side_b: pd.DataFrame) -> tuple[int, int] | None:
    """Each side's batch size where they differ (``--ignore batch_size``): the step is then split per sample."""
    a, b = set(side_a["batch_size"].astype(int)), set(side_b["batch_size"].astype(int))
    return (a.pop(), b.pop()) if len(a) == len(b) == 1 and a != b else None


def explain_sides(label: str, side_a: pd.DataFrame, side_b: pd.DataFrame, *, reader: SampleReader | None = None,
                  threshold: float = PRACTICAL_THRESHOLD, family: int = 1) -> Explained:
    """B's rows against A's, training step and batch-1 forward each explained where both sides have runs.

    ``family``: the comparisons of the table the explanation stands under (a ``diff``, a variant table). The
    verdict a split rests on is taken at that table's level, so identical sides get a split (and a part named a
    cause) in at most ALPHA of tables, as the table's own claims are."""
    reader = reader or SampleFiles()
    files_a, missing_a = reader.layer_files(side_a)
    files_b, missing_b = reader.layer_files(side_b)
    out = Explained(label)
    for side, rows in (("A", missing_a), ("B", missing_b)):
        out.missing += [f"{side}: {label} ({row['run_id']}) has no per-layer table; measure it with "
                        f"`{layers_command(row)}` (in a study: `layers: true`)" for row in rows]
    batches = _batch_sizes(side_a, side_b)
    for metric, inference in ((PER_SAMPLE if batches else TRAINING, False), (INFERENCE, True)):
        bs_a, bs_b = batches if batches and not inference else (None, None)
        runs_a, runs_b = _runs(files_a, inference, bs_a), _runs(files_b, inference, bs_b)
        if not runs_a or not runs_b:
            continue
        verdict = compare_rows(side_b, side_a, VERDICT_METRICS[metric], reader, threshold=threshold,
                               family=family).verdict
        floor = noise_floor_pct(side_a, side_b, VERDICT_METRICS[metric], reader)
        e = explain(runs_a, runs_b, metric=metric, verdict=verdict,
                    floor_pct=floor if min(len(runs_a), len(runs_b)) < MIN_RUNS else float("nan"))
        if inference:
            out.inference = e
        else:
            out.training = e
    return out


def explain_folders(a: Path, b: Path, ignore: list[str] | tuple[str, ...] = (),
                    threshold: float = PRACTICAL_THRESHOLD, family: int = 1) -> list[Explained]:
    """Every configuration both folders measured, explained (``diff --explain``, ``family``: its table's)."""
    reader = SampleFiles()
    return [explain_sides(label, side_a, side_b, reader=reader, threshold=threshold, family=family)
            for label, side_a, side_b in paired(a, b, ignore) if not side_a.empty and not side_b.empty]


def variant_sides(rows: pd.DataFrame, table: pd.DataFrame) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """Each variant comparison of ``comparisons.variant_speedups``'s ``table`` with its rows: a label, the
    baseline's rows (A) and the variant's (B), at one machine, hardware, model and batch size."""
    out = []
    for r in table[table["variant"] != table["baseline"]].to_dict("records"):
        here = rows[(rows["status"] == "ok") & (rows["machine"] == r["machine"]) & (rows["hardware"] == r["hardware"])
                    & (rows["model"] == r["model"]) & (rows["batch_size"] == r["batch_size"])]
        label = f"{r['variant']} against {r['baseline']} ({r['hardware']}, {r['model']}, bs{int(r['batch_size'])})"
        out.append((label, here[here["variant"] == r["baseline"]], here[here["variant"] == r["variant"]]))
    return out
