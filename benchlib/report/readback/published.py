"""Published report folders read back for the index: each study's record (``report.json``), the rows copied
under ``data/``, and which pages, data files, traces and figures it holds. ``display.site`` writes the index
from what these list and opens nothing itself.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ...store.layout import ReportLayout, ResultsLayout, reports_page

ANALYSES = ("sweep", "tune")  # analysis notebooks a study may publish beside its summary
PAIR_PAGES = ("measurements", "profile", "tuning")  # the kinds of page a pair may have


@dataclass(frozen=True)
class DataCopy:
    """A copy of a results folder under a report's ``data/``: which of its files are there."""

    name: str
    results_csv: Path | None
    run_rules: Path | None
    manifests: tuple[Path, ...]
    ceilings: tuple[Path, ...]


@dataclass(frozen=True)
class StudyReport:
    """What the index shows of one report folder, as found on disk."""

    layout: ReportLayout
    meta: dict[str, Any]
    rows: pd.DataFrame
    summary: Path | None  # the summary page, where published
    analyses: dict[str, Path]  # each published analysis page (``ANALYSES``) by notebook name
    pair_pages: dict[str, dict[str, Path]]  # per pair (``hardware__model``), its page of each kind (``PAIR_PAGES``)
    data: tuple[DataCopy, ...]
    several_copies: bool  # data/ holds more than one entry, so each copy is labelled by its name
    traces: tuple[Path, ...]
    figures: tuple[Path, ...]

    @property
    def name(self) -> str:
        return self.layout.root.name

    @classmethod
    def read(cls, folder: Path) -> StudyReport:
        layout = ReportLayout(folder)
        try:
            meta = json.loads(layout.meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = {}
        frames = []
        for csv in sorted(layout.data_dir.glob("*/results.csv")):
            try:
                frames.append(pd.read_csv(csv))
            except (OSError, ValueError, pd.errors.EmptyDataError):
                continue
        summary = layout.analysis_notebook("summary").with_suffix(".html")
        analyses = {n: p for n in ANALYSES if (p := layout.analysis_notebook(n).with_suffix(".html")).exists()}
        return cls(layout, meta if isinstance(meta, dict) else {}, pd.concat(frames) if frames else pd.DataFrame(),
                   summary if summary.exists() else None, analyses, _pair_pages(layout), _data(layout),
                   len(list(layout.data_dir.glob("*"))) > 1, tuple(sorted(layout.profiles_dir.glob("*.trace.json.gz"))),
                   tuple(sorted(layout.figures_dir.glob("*.png"))))


def _pair_pages(layout: ReportLayout) -> dict[str, dict[str, Path]]:
    stems: dict[str, dict[str, Path]] = {}
    for kind, folder in zip(PAIR_PAGES, (layout.runs_dir, layout.profiles_dir, layout.tune_dir)):
        for p in sorted(folder.glob("*.html")):
            stems.setdefault(p.stem, {})[kind] = p
    return stems


def _data(layout: ReportLayout) -> tuple[DataCopy, ...]:
    out = []
    for copy in sorted(p for p in layout.data_dir.glob("*") if p.is_dir()):
        held = ResultsLayout.of(copy)  # a copy of a results folder's files, laid out as the folder is
        out.append(DataCopy(copy.name, held.results_csv if held.results_csv.exists() else None,
                            held.run_rules_path if held.run_rules_path.exists() else None,
                            tuple(held.manifest_files()), tuple(held.ceilings_files())))
    return tuple(out)


def published_shared(reports_root: Path, names: Iterable[str]) -> list[str]:
    """Which of the pages every study shares (``names``) have been written under ``reports_root``."""
    return [n for n in names if reports_page(reports_root, n).exists()]
