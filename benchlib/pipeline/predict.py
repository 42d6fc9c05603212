"""How a study's configurations would run on a machine it did not run on: ``benchlib predict`` and
``benchlib.predict``, reading the study's per-layer files and both machines' ceilings (``roofline.predict``).

The target is a ceilings file measured there by ``benchlib roofline`` (copied here: nothing else runs on the
target) or a machine of the machine cache. Every configuration with per-layer files (``layers: true``, or
``benchlib layers``) gets its training step, throughput and batch-1 latency on the target, each with its 90%
interval, its parts under ``.attrs["parts"]``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..instruments.run_to_run import floor_groups, log_spread
from ..log import ProgressFn
from ..report.readback.layers import configurations, load_layer_reports, median_run
from ..roofline.datasheet import datasheet_ceilings, datasheet_names
from ..roofline.measured import Ceilings, load_ceilings, read_ceilings
from ..roofline.predict import METHOD, PredictError, Prediction, Shapes
from ..roofline.predict import predict as predict_parts
from ..roofline.shapes import read_shapes, shapes_path
from ..store.atomic import json_text, write_if_changed
from ..store.layout import ResultsLayout
from ..store.machine_cache import machine_cache
from ..store.noise_floor import NoiseFloor, load_noise_floors

COLUMNS = ("machine", "target", "model", "hardware", "batch_size", "variant", "dtype", "figure", "measured",
           "predicted", "low", "high", "unit", "runs", "method", "weakest", "notes")
MEASURE_TARGET = "ceilings: run `benchlib roofline --results-dir DIR` on the target and copy DIR/ceilings/*.json here"


def target_ceilings(on: str | Path) -> Ceilings:
    """The target's ceilings: a ceilings file, a machine (``MACHINE`` or ``MACHINE:DEVICE``) of the machine cache,
    or a part of the datasheet catalogue ("NVIDIA L4", "H100": its peaks, labelled "datasheet, not measured").
    ConfigError naming the command that measures it where there is none, or the file is not one."""
    path = Path(on)
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise ConfigError(f"--on {on}: no such ceilings file; make one with {MEASURE_TARGET}")
        try:
            return read_ceilings(path)
        except (OSError, ValueError, TypeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--on {on}: not a benchlib ceilings file ({exc}); make one with {MEASURE_TARGET}") \
                from None
    machine, _, device = str(on).partition(":")
    cache = machine_cache()
    known = load_ceilings([cache.root]) if cache.root.is_dir() else []
    for c in known:
        if c.machine == machine and (not device or c.device == device):
            return c
    if (sheet := datasheet_ceilings(str(on))) is not None:
        return sheet
    names = sorted({f"{c.machine}:{c.device}" for c in known}) or ["none yet"]
    raise ConfigError(f"--on {on}: not a ceilings file, nor a machine of the machine cache ({', '.join(names)}), nor "
                      f"a datasheet ({', '.join(datasheet_names())}: not measured); allowed: a path to a ceilings "
                      f"file ({MEASURE_TARGET})")


def _source(folder: Path, report: dict[str, Any], found: Sequence[Ceilings]) -> Ceilings:
    """The ceilings the per-layer file was measured against: its folder's (``found``) for its machine and device."""
    device = str(report.get("hardware") or report.get("device") or "cpu").split(":")[0]
    for c in found:
        if c.machine == str(report.get("machine")) and c.device == device:
            return c
    raise ConfigError(f"{folder}: no ceilings of machine {report.get('machine')} ({device}) beside its per-layer "
                      f"files; measure them with `benchlib roofline --results-dir {folder}` on that machine")


def _run_log_sd(runs: Sequence[Mapping[str, Any]], floors: Sequence[NoiseFloor], key: str) -> float:
    """The source's run-to-run spread of a whole (the log's SD): between its runs, else its noise floor."""
    steps = [s for r in runs if (s := _whole_s(r, key)) > 0]
    if len(steps) >= 2:
        return float(np.log(steps).std(ddof=1))
    metric = "train_step_s" if key == "training" else "latency_ms_p50"
    sd, df = log_spread(floor_groups(floors, metric))
    return sd if df >= 1 else math.nan


def _whole_s(report: Mapping[str, Any], key: str) -> float:
    part = report if key == "training" else (report.get("inference") or {})
    value = part.get("step_s")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else math.nan


def _rows(report: dict[str, Any], key: str) -> list[dict[str, Any]]:
    if key == "training":
        table = report.get("table")
        return table.to_dict("records") if isinstance(table, pd.DataFrame) else list(report.get("layers") or [])
    return list((report.get("inference") or {}).get("layers") or [])


def _shapes_of(path: Path | None) -> dict[str, dict[str, float]]:
    """The shapes timed beside a ceilings file (``DIR/shapes/`` of ``DIR/ceilings/``), or none."""
    where = shapes_path(path) if path is not None else None
    if where is None or not where.is_file():
        return {}
    try:
        return read_shapes(where)
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{where}: {exc}; time them again with `benchlib roofline --shapes-of RESULTS "
                          "--results-dir DIR` on that machine") from None


def predict(results: str | Path, on: str | Path | Ceilings, device: str | None = None, *,
            skip: bool = False, shapes: bool = True, dtype: str | None = None) -> pd.DataFrame:
    """Every configuration of ``results`` with per-layer files, predicted on ``on``: one row per configuration
    and figure (training step, training throughput, batch-1 latency), ``COLUMNS``; the parts under
    ``.attrs["parts"]`` ({label: DataFrame}). ``device``: the target's device type where the caller names it
    (refused where its ceilings say another). ConfigError naming what is missing and the command that makes it;
    with ``skip`` a configuration the target cannot take (a roof it lacks) is left out and said under
    ``.attrs["skipped"]`` ({label: why}), so a study's other predictions still land. ``shapes``: carry the layers
    the target timed alone (``benchlib roofline --shapes-of``, kept beside its ceilings file) by those times.
    ``dtype``: each configuration as it would run there in another precision (``bf16``: an fp32 study's step
    under bf16 autocast), its layers meeting the target's roofs (and shapes) of that dtype."""
    folder = Path(results)
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such results folder; allowed: a folder benchlib wrote, e.g. results/default")
    target = on if isinstance(on, Ceilings) else target_ceilings(on)
    if device is not None and target.device != device.split(":")[0]:
        raise ConfigError(f"--on {on}: its ceilings are of device {target.device}, not {device}; measure the target "
                          f"with `benchlib roofline --device {device} --results-dir DIR` there")
    reports = load_layer_reports([folder])
    if not reports:
        raise ConfigError(f"{folder}: no per-layer tables to predict from; measure them with `layers: true` in the "
                          "study, or `benchlib layers --results-dir ...` for one configuration")
    rows: list[dict[str, Any]] = []
    parts: dict[str, pd.DataFrame] = {}
    skipped: dict[str, str] = {}
    found, floors = load_ceilings([folder]), load_noise_floors([folder])  # read once for every configuration
    there = _shapes_of(Path(target.path) if target.path else None) if shapes else {}
    here: dict[str | None, dict[str, dict[str, float]]] = {}  # each source's own shapes, read once
    for runs in configurations(reports):
        report = dict(median_run(runs))
        source = _source(folder, report, found)
        source_dtype = str(report.get("roof_dtype") or "fp32")
        batch = int(report.get("batch_size") or 1)
        label = f"{report.get('model')} {report.get('hardware')} bs{batch} {report.get('variant')}"
        for key, what in (("training", "training step"), ("inference", "batch-1 forward")):
            # each figure from the run whose own figure is the median: a run's forwards can be disturbed
            # while its steps were not, and the other way round
            timed_runs = sorted((r for r in runs if _whole_s(r, key) > 0), key=lambda r: _whole_s(r, key))
            report = dict(median_run(timed_runs)) if timed_runs else report
            table, whole = _rows(report, key), _whole_s(report, key)
            if not table or not whole > 0:
                continue
            named = report.get("shapes") if key == "training" else (report.get("inference") or {}).get("shapes")
            if there and source.path not in here:
                here[source.path] = _shapes_of(Path(source.path) if source.path else None)
            timed = Shapes(named or {}, there, here[source.path]) if there else None
            try:
                p = predict_parts(table, whole, dtype=source_dtype, source=source, target=target, what=what,
                                  target_dtype=dtype or source_dtype,
                                  run_log_sd=_run_log_sd(runs, floors, key), shapes=timed)
            except PredictError as exc:
                if skip:
                    skipped[f"{label}: {what}"] = str(exc)
                    continue
                raise ConfigError(f"{target.path or target.machine}: {exc}; measure it with `benchlib roofline "
                                  f"--results-dir DIR` on the target (this benchlib's ceilings hold every kind)") \
                    from None
            parts[f"{label}: {what}"] = p.parts
            rows += _figures(p, report, target, batch, len(runs))
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out.attrs["parts"] = parts
    out.attrs["skipped"] = skipped
    return out


def study_targets(names: Sequence[str]) -> list[Ceilings]:
    """A study's ``predict_on`` targets resolved before anything runs (``target_ceilings``): ConfigError for the
    first that is no ceilings file, cached machine or datasheet (a typo is refused before hours of measuring)."""
    return [target_ceilings(n) for n in names]


def keep_targets(folder: Path, targets: Sequence[Ceilings]) -> None:
    """Each target's ceilings copied under the results folder's ``targets/``: the folder then holds what its
    predictions are made from (a SLURM array's report step, or a later ``benchlib report``, predicts again from
    them); a target the study no longer names is removed. Rewritten only when changed, so an unchanged study's
    page is reused."""
    layout = ResultsLayout.of(folder)
    kept = {layout.target_path(t.machine, t.device) for t in targets}
    for old in layout.target_files():
        if old not in kept:  # a target the study no longer names: its predictions go with it
            old.unlink()
    for target in targets:
        text = json_text(target.to_json(), indent=1) + "\n"
        write_if_changed(layout.target_path(target.machine, target.device), text)


def save_predictions(folder: Path, progress: ProgressFn) -> pd.DataFrame | None:
    """The folder's configurations predicted on each machine under its ``targets/``, written to
    ``predictions.csv`` for the summary (only when its text changed); None where it holds no targets. A
    configuration a target cannot take (a roof it lacks) is said through ``progress`` and left out; a target
    file that is not one is said and skipped, so the summary of the measured rows still runs."""
    layout = ResultsLayout.of(folder)
    tables = []
    for path in layout.target_files():
        try:
            target = read_ceilings(path)
            table = predict(folder, target, skip=True)
        except (ConfigError, OSError, ValueError, TypeError) as exc:
            progress(f"predictions on {path.name}: none ({exc})")
            continue
        for label, why in table.attrs["skipped"].items():
            progress(f"predictions on {target.machine}:{target.device}: {label} not predicted ({why})")
        progress(f"predictions on {target.machine}:{target.device}: {len(table)} figure(s)")
        table.attrs.clear()  # its parts stay with it; a concat would compare them between targets
        tables.append(table)
    if not layout.target_files():
        return None
    out = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=list(COLUMNS))
    write_if_changed(layout.predictions_csv, out.to_csv(index=False))
    return out


def _figures(p: Prediction, report: dict[str, Any], target: Ceilings, batch: int, runs: int) -> list[dict[str, Any]]:
    """A prediction's rows: a step as seconds and as throughput (samples/s), a forward as batch-1 latency (ms)."""
    base = {"machine": report.get("machine"), "target": f"{target.machine}:{target.device}",
            "model": report.get("model"), "hardware": report.get("hardware"), "batch_size": batch,
            "variant": report.get("variant"), "dtype": p.dtype, "runs": runs, "method": METHOD, "weakest": p.weakest,
            "notes": "; ".join(p.notes)}
    w = p.whole
    if p.what == "training step":
        return [{**base, "figure": "train_step_s", "measured": w.measured, "predicted": w.value, "low": w.low,
                 "high": w.high, "unit": "s"},
                {**base, "figure": "train_samples_per_s", "measured": batch / w.measured, "predicted": batch / w.value,
                 "low": batch / w.high, "high": batch / w.low, "unit": "samples/s"}]
    return [{**base, "figure": "latency_ms_p50", "measured": w.measured * 1e3, "predicted": w.value * 1e3,
             "low": w.low * 1e3, "high": w.high * 1e3, "unit": "ms"}]
