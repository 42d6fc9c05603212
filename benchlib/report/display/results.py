"""A study's results folders read once, and every section of its report one method away.

``Results.load(results_dirs)`` reads the rows (checked and migrated, placed under their roofs) and, on first
use, each of the folders' other files: per-layer tables, profiles, ceilings, noise floors, manifests, the
rules they were run under, predictions, and each run's samples and telemetry series (through one
``readback.samples.SampleFiles``, shared by every section). The summary and sweep notebooks hold one of
these and call a method per cell (``results.rooflines()``); the section functions of ``summary`` and
``layers`` take what it read and read nothing themselves. Every read is a ``readback`` function.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import Markdown

from ...roofline.measured import Ceilings
from ...store.noise_floor import NoiseFloor
from ..readback.folders import load_rows, read_interleave, read_rounds, superseded_rows
from ..readback.layers import load_layer_reports, load_predictions
from ..readback.manifests import manifest_table
from ..readback.profiles import load_profiles
from ..readback.roofs import page_ceilings
from ..readback.samples import SampleFiles
from . import layers as layer_views
from . import summary

MAX_TIMELINES = 8  # telemetry timelines a page draws at most


@dataclass
class Results:
    """The rows of one or more results folders, and what else the folders hold, each read at most once."""

    folders: tuple[str, ...]
    rows: pd.DataFrame
    figures_dir: str = "reports/figures"
    reader: SampleFiles = field(default_factory=SampleFiles, repr=False)  # each run's own files, read once

    @classmethod
    def load(cls, results_dirs: Iterable[str | Path], figures_dir: str | Path = "reports/figures") -> Results:
        """The folders' rows read (``readback.folders.load_rows``); the rest on first use."""
        folders = tuple(str(d) for d in results_dirs)
        return cls(folders, load_rows(folders), str(figures_dir))

    # -- what the folders hold, read once
    @cached_property
    def layer_reports(self) -> list[dict[str, Any]]:
        return load_layer_reports(self.folders, self.reader.read_layers)  # the explanations' files, read once

    @cached_property
    def profiles(self) -> list[dict[str, Any]]:
        return load_profiles(self.folders)

    @cached_property
    def ceilings(self) -> list[Ceilings]:
        """The roofs the rows were placed under (the page's, ``readback.roofs``)."""
        return page_ceilings(self.folders)

    @cached_property
    def floors(self) -> list[NoiseFloor]:
        """Every folder's noise floors, as the comparisons read them (``reader.floors``)."""
        return [f for folder in self.folders for f in self.reader.floors(folder)]

    @cached_property
    def manifests(self) -> pd.DataFrame:
        return manifest_table(self.folders)

    @cached_property
    def predicted(self) -> pd.DataFrame:
        """The study's predictions on other machines (``predict_on``)."""
        return load_predictions(self.folders)

    @cached_property
    def rules(self) -> tuple[int, dict[str, bool], dict[str, dict[str, Any]]]:
        """Rows set aside, whether each study interleaved, and each study's rounds (``run_rules.json``)."""
        return superseded_rows(self.folders), read_interleave(self.folders), read_rounds(self.folders)

    def telemetry_series(self, rows: pd.DataFrame) -> list[tuple[pd.Series, pd.DataFrame]]:
        """Up to ``MAX_TIMELINES`` of ``rows``' telemetry time series, each with its row, read once."""
        found: list[tuple[pd.Series, pd.DataFrame]] = []
        for _, row in rows.iterrows():
            if len(found) >= MAX_TIMELINES or row.get("results_dir") not in self.folders:
                continue
            if (series := self.reader.telemetry(row)) is not None:
                found.append((row, series))
        return found

    # -- the report, a section per method
    def heading(self, title: str) -> Markdown:
        return summary.heading(title, self.rows)

    def key_findings(self) -> Markdown:
        return summary.key_findings(self.rows, self.profiles, self.layer_reports, self.reader)

    def results(self) -> None:
        summary.results(self.rows, self.reader)

    def how_it_was_run(self) -> None:
        summary.how_it_was_run(self.rows, *self.rules, self.floors)

    def metric_figures(self) -> None:
        summary.metric_figures(self.rows, self.figures_dir)

    def speedups(self) -> None:
        summary.speedups(self.rows, self.reader)

    def variants(self) -> None:
        summary.variants(self.rows, self.figures_dir, self.reader)

    def device_scaling(self) -> None:
        summary.device_scaling(self.rows, self.figures_dir, self.reader)

    def repeats(self) -> None:
        summary.repeats(self.rows)

    def rooflines(self) -> None:
        summary.rooflines(self.rows, self.ceilings, self.figures_dir)

    def layers(self) -> None:
        layer_views.layers(self.layer_reports, self.figures_dir)

    def predictions(self) -> None:
        layer_views.predictions(self.rows, self.predicted)

    def profile_breakdowns(self) -> None:
        summary.profiles(self.profiles, self.figures_dir)

    def telemetry(self) -> None:
        summary.telemetry(self.rows, self.telemetry_series, self.figures_dir)

    def failures(self) -> None:
        summary.failures(self.rows)

    def complexity(self) -> None:
        summary.complexity(self.rows)

    def environment(self) -> None:
        summary.manifests(self.manifests)

    def sweep(self) -> None:
        summary.sweep(self.rows, self.figures_dir, self.reader)
