"""A row's own files read back, each at most once: its raw samples, its per-layer file, its telemetry series,
and its folder's noise floors. One ``SampleFiles`` serves a whole report (``display.results.Results`` holds
one), so a comparison, a table and an explanation that need the same run read its files once between them.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ...store.layout import ResultsLayout
from ...store.noise_floor import NoiseFloor, load_noise_floors
from ...store.rows import read_samples
from .layers import layer_file_of, read_layer_file

NO_SAMPLES_COLUMNS = ["series", "value"]


class SampleFiles:
    """Reads a row's files, and a results folder's noise floors, once (rows carry ``results_dir`` from
    ``read_results``). It is the ``evidence.samples.SampleReader`` every comparison takes."""

    def __init__(self) -> None:
        self._samples: dict[tuple[str, str, str], pd.DataFrame] = {}
        self._floors: dict[str, list[NoiseFloor]] = {}
        self._layers: dict[str, dict[str, Any]] = {}
        self._series: dict[str, pd.DataFrame | None] = {}

    def floors(self, folder: object) -> list[NoiseFloor]:
        """The noise floors saved in ``folder`` (none where there is no folder)."""
        if not folder or not Path(str(folder)).is_dir():
            return []
        if str(folder) not in self._floors:
            self._floors[str(folder)] = load_noise_floors([str(folder)])
        return self._floors[str(folder)]

    def __call__(self, row: Mapping[str, Any]) -> pd.DataFrame:
        """The row's raw samples (columns ``series`` and ``value``; empty without a results folder)."""
        folder = row.get("results_dir")
        if not folder:
            return pd.DataFrame(columns=NO_SAMPLES_COLUMNS)
        key = (str(folder), str(row["machine"]), str(row["run_id"]))
        if key not in self._samples:
            self._samples[key] = read_samples(Path(str(folder)), row)
        return self._samples[key]

    def layer_file(self, row: Mapping[str, Any]) -> dict[str, Any] | None:
        """The row's per-layer file, migrated (None where it has none or it cannot be read, with a warning)."""
        path = layer_file_of(row)
        if path is None:
            return None
        if not path.is_file():
            return None
        try:
            return self.read_layers(path)
        except (OSError, ValueError) as exc:
            warnings.warn(f"skipping unreadable per-layer table {path}: {exc}", stacklevel=2)
            return None

    def read_layers(self, path: Path) -> dict[str, Any]:
        """The per-layer file at ``path``, migrated, read once (a file that cannot be read raises, each time)."""
        if str(path) not in self._layers:
            self._layers[str(path)] = read_layer_file(path)
        return self._layers[str(path)]

    def layer_files(self, rows: pd.DataFrame) -> tuple[list[dict[str, Any]], list[Mapping[str, Any]]]:
        """The per-layer files of ``rows`` (one per run that has one) and the rows without one."""
        found: list[dict[str, Any]] = []
        missing: list[Mapping[str, Any]] = []
        for row in rows.to_dict("records"):
            data = self.layer_file(row)
            if data is None:
                missing.append(row)
            else:
                found.append(data)
        return found, missing

    def telemetry(self, row: Mapping[str, Any]) -> pd.DataFrame | None:
        """The row's telemetry time series (None where it kept none)."""
        folder = row.get("results_dir")
        if not isinstance(folder, str):
            return None
        path = ResultsLayout.of(folder).telemetry_path(str(row["machine"]), str(row["run_id"]))
        if str(path) not in self._series:
            self._series[str(path)] = pd.read_csv(path) if path.is_file() else None
        return self._series[str(path)]
