"""Results folders read back for a report: which folders a path holds, their rows (checked, migrated and placed
under the page's roofs), their noise floors and the rules ``benchlib study`` recorded beside the rows.

With ``samples`` (a row's own files) and the other modules here, the one place in ``report/`` that opens a
file: tables, findings and figures take what these read.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from ...store.layout import ResultsLayout
from ...store.noise_floor import NoiseFloor, load_noise_floors
from ...store.rows import read_checked, read_results
from .roofs import page_ceilings, placed


def results_folders(path: Path) -> list[Path]:
    """A study folder (it has ``rows/``) or a results root holding study folders."""
    if ResultsLayout.of(path).holds_rows:
        return [path]
    found = sorted(p for p in path.iterdir() if ResultsLayout.of(p).holds_rows) if path.is_dir() else []
    if not found:
        raise FileNotFoundError(f"'{path}' holds no results (no rows/ folder in it or in a folder below it)")
    return found


def load_rows(results_dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Every valid row of the given results folders, merged and de-duplicated, each placed under the roof the
    page shows for its device (``roofs.placed``); the invalid ones, with why, in ``attrs["invalid_rows"]``."""
    dirs = [str(d) for d in results_dirs]
    rows, invalid = read_checked(dirs)  # each row file read and checked once (store.integrity)
    df = placed(rows, page_ceilings(dirs))
    df.attrs["invalid_rows"] = invalid
    return df


def folder_rows(path: Path) -> pd.DataFrame:
    """The rows of a study folder, or of every study folder under a results root (``diff``'s sides)."""
    return read_results(results_folders(path))


def folder_floors(path: Path) -> list[NoiseFloor]:
    """The noise floors saved in a study folder, or in every study folder under a results root."""
    return load_noise_floors(results_folders(path))


def superseded_rows(results_dirs: Iterable[str | Path]) -> int:
    """Rows set aside because the study's settings changed (kept under ``superseded/``, never deleted)."""
    return sum(len(ResultsLayout.of(d).superseded_row_files()) for d in results_dirs)


def _recorded(results_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """The ``run_rules.json`` benchlib study wrote in each folder (unreadable ones left out)."""
    out = []
    for d in results_dirs:
        try:
            data = json.loads(ResultsLayout.of(d).run_rules_path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("study"), str):
            out.append(data)
    return out


def read_interleave(results_dirs: Iterable[str | Path]) -> dict[str, bool]:
    """The ``interleave`` each study ran with, from the ``run_rules.json`` benchlib study wrote."""
    return {d["study"]: d["interleave"] for d in _recorded(results_dirs) if isinstance(d.get("interleave"), bool)}


def read_rounds(results_dirs: Iterable[str | Path]) -> dict[str, dict[str, Any]]:
    """How many rounds (fresh processes) each study ran and, under ``repeats: auto``, why it stopped."""
    return {d["study"]: d["rounds"] for d in _recorded(results_dirs) if isinstance(d.get("rounds"), dict)}
