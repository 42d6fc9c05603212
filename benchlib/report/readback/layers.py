"""Saved per-layer tables (``benchlib layers``, ``layers: true`` in a study) read back for the summary."""
from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ...store.layout import ResultsLayout
from ...store.schema import LAYERS_FORMAT_VERSION, finite_float

# what makes two per-layer reports runs of one configuration (a study's repeats differ by seed only)
CONFIGURATION_KEYS = ("machine", "device", "model", "batch_size", "variant", "image_size")


def migrate_layers(data: dict[str, Any]) -> dict[str, Any]:
    """A saved per-layer file brought to today's format: format 1 (no ``format_version``) kept each (layer,
    phase)'s median only, so it gains empty per-step series and no batch-1 forward; a newer file is refused."""
    version = int(data.get("format_version") or 1)
    if version > LAYERS_FORMAT_VERSION:
        raise ValueError(f"per-layer file format {version} is newer than this benchlib reads "
                         f"({LAYERS_FORMAT_VERSION}); allowed: format {LAYERS_FORMAT_VERSION} or older")
    if version < 2:
        data = {**data, "plain_steps_s": [], "plain_data_wait_s": [], "per_step": [], "inference": None}
    return {**data, "format_version": LAYERS_FORMAT_VERSION, "migrated_from": version}


def read_layer_file(path: Path) -> dict[str, Any]:
    """One saved per-layer file, migrated; its rows stay a list under ``layers``."""
    return migrate_layers(json.loads(path.read_text(encoding="utf-8")))


def load_layer_reports(results_dirs: Iterable[str | Path],
                       read: Callable[[Path], dict[str, Any]] = read_layer_file) -> list[dict[str, Any]]:
    """Every saved per-layer report: its checks as saved, its rows as a DataFrame under ``table`` (``read``: how a
    file is read, ``samples.SampleFiles.read_layers`` where a report reads each once)."""
    found = []
    for d in results_dirs:
        for path in ResultsLayout.of(d).layers_files():
            try:
                data = dict(read(path))  # a copy: the file as read stays whole for whoever else asks
                data["table"] = pd.DataFrame(data.pop("layers"))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                warnings.warn(f"skipping unreadable per-layer table {path}: {exc}", stacklevel=2)
                continue
            data["path"] = str(path)
            found.append(data)
    return found


def configurations(reports: Iterable[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The reports grouped into configurations (``CONFIGURATION_KEYS``), in first-seen order, each group's runs
    sorted by measured step: a study's repeats are read as one configuration, not as so many."""
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for r in reports:
        groups.setdefault(tuple(str(r.get(k)) for k in CONFIGURATION_KEYS), []).append(r)
    return [sorted(g, key=lambda r: finite_float(r.get("step_s")) or math.inf) for g in groups.values()]


def median_run(runs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The run whose measured step is the median of a configuration's (sorted, as ``configurations`` gives
    them; the lower of the two middle ones): a real run that stands for the rest, not an average of tables."""
    return runs[(len(runs) - 1) // 2]


def layer_file_of(row: Mapping[str, Any]) -> Path | None:
    """Where the per-layer file of a result row's configuration lives (its machine and run id, in the results
    folder ``read_results`` noted), or None without a results folder."""
    folder = row.get("results_dir")
    return ResultsLayout.of(str(folder)).layers_path(str(row["machine"]), str(row["run_id"])) if folder else None


def load_predictions(results_dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Every results folder's ``predictions.csv`` (a study's ``predict_on``), stacked; empty where none has one. A
    file that cannot be read is warned about and skipped, as a per-layer file is."""
    found = []
    for d in results_dirs:
        path = ResultsLayout.of(d).predictions_csv
        if not path.is_file():
            continue
        try:
            found.append(pd.read_csv(path))
        except (OSError, ValueError, pd.errors.ParserError) as exc:
            warnings.warn(f"skipping unreadable predictions {path}: {exc}", stacklevel=2)
    found = [f for f in found if not f.empty]
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame()
