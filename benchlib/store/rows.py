"""Result rows on disk: written atomically one file per configuration, read back as one table.

A row is a flat JSON object whose keys are columns of :mod:`benchlib.store.schema`; its raw samples and
telemetry sit beside it under the same key (see :mod:`benchlib.store.layout`). Every row read is checked
(:mod:`benchlib.store.integrity`): one that is not what it says is listed with why, never reported, and a
resume measures it again.
"""
from __future__ import annotations

import errno
import importlib.util
import io
import json
import shutil
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .._version import __version__
from ..errors import DiskFull, ResultsFileError
from .atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from .integrity import integrity_problem
from .layout import ResultsLayout, row_key
from .samples_file import SAMPLE_COLUMNS, read_series, samples_text
from .schema import (
    COLUMN_NAMES,
    COMPLETE_STATUSES,
    FORMAT_VERSION,
    REQUIRED_COLUMNS,
    row_problem,
    unknown_columns,
)

Row = dict[str, Any]
# Where a row that failed its check goes on resume: superseded/<stamp>-failed-check/ (kept, out of the report).
FAILED_CHECK = "failed-check"
# The set-aside folders a results folder keeps (superseded/<stamp>/), newest first: a study edited and run
# again every day for a year would otherwise keep every row it ever replaced.
SUPERSEDED_KEPT = 20
# A manifest no row (reported or set aside) points to is deleted once this old: a row written a moment
# after its manifest is never robbed of it.
ORPHAN_MANIFEST_AGE_S = 3600.0


def layout_of(results: str | Path | ResultsLayout) -> ResultsLayout:
    return results if isinstance(results, ResultsLayout) else ResultsLayout(Path(results))


def key_of(row: Mapping[str, Any]) -> str:
    """The file stem of a row (``<machine>__<run_id>``)."""
    return row_key(str(row["machine"]), str(row["run_id"]))


def write_row(results: str | Path | ResultsLayout, row: Mapping[str, Any],
              samples: Mapping[str, Sequence[float]] | None = None) -> Path:
    """Write one row (and its raw samples) atomically; returns the row file.

    Raises:
        ValueError: the row lacks a required column or has one the schema does not list (a writer's bug).
    """
    layout = layout_of(results)
    missing = [c for c in REQUIRED_COLUMNS if c not in row]
    if missing:
        raise ValueError(f"row lacks columns: {', '.join(missing)}")
    unknown = unknown_columns(list(row))
    if unknown:
        raise ValueError(f"row has columns the schema does not list: {', '.join(unknown)}")
    if row["format_version"] != FORMAT_VERSION:
        raise ValueError(f"row is of format {row['format_version']!r}; this benchlib writes format {FORMAT_VERSION}")
    machine, run_id = str(row["machine"]), str(row["run_id"])
    if samples:
        atomic_write_text(layout.samples_path(machine, run_id), samples_text(run_id, machine, samples))
    path = layout.row_path(machine, run_id)
    try:
        atomic_write_json(path, dict(row))
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            complete = sum(1 for r in stored_rows(layout) if r.get("status") in COMPLETE_STATUSES)
            raise DiskFull(f"disk full while writing {path}: {complete} complete row(s) kept in {layout.root}; "
                           "free space and run the same command again to resume") from exc
        raise
    return path


def write_manifest(results: str | Path | ResultsLayout, manifest: Mapping[str, Any], manifest_id: str) -> Path:
    """Write an environment manifest once (its id is a hash of its content)."""
    path = layout_of(results).manifest_path(manifest_id)
    if not path.exists():
        atomic_write_json(path, dict(manifest))
    return path


def _from_format_1(row: Row) -> Row:
    """Format 1 (before rows said their format) to 2: the ``format_version`` column; nothing else changed."""
    return {**row, "format_version": 2}


# Format N's row -> format N + 1's: one step each, applied in turn, so an old row reaches today's format.
_MIGRATIONS: dict[int, Callable[[Row], Row]] = {1: _from_format_1}


def migrate(row: Mapping[str, Any], where: str) -> Row:
    """The row in this benchlib's format, the one way every row is read: an older row brought up step by step,
    a row newer than this code refused in one line (its columns could mean what this code does not know).

    Raises:
        ValueError: the format is not a version number (a corrupt row: listed as such, never reported).
        ResultsFileError: the row is of a newer format than this benchlib reads.
    """
    version = row.get("format_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"format_version {version!r} is not a row format (1..{FORMAT_VERSION})")
    if version > FORMAT_VERSION:
        raise ResultsFileError(f"{where}: row format {version} is newer than this benchlib {__version__} reads; "
                               f"allowed: formats 1..{FORMAT_VERSION}: upgrade benchlib to read it")
    out = dict(row)
    for step in range(version, FORMAT_VERSION):
        out = _MIGRATIONS[step](out)
    return out


def read_row(path: Path) -> Row:
    """One row file in this benchlib's format (:func:`migrate`); ValueError when it is not a benchlib row."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or any(k not in data for k in ("study", "run_id", "machine", "status")):
        raise ValueError("not a benchlib result row")
    return migrate(data, str(path))


def checked_row(results: str | Path | ResultsLayout, machine: str, run_id: str) -> tuple[Row | None, str | None]:
    """(the row stored for this configuration, why it cannot be believed): (None, None) where there is none,
    (None, why) for a file that is no row, (row, why) for a row that fails its check (``store.integrity``)."""
    path = layout_of(results).row_path(machine, run_id)
    if not path.exists():
        return None, None
    try:
        row = read_row(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return None, f"unreadable: {exc}"
    return row, row_problem(row) or integrity_problem(row, path)


def complete_row(results: str | Path | ResultsLayout, machine: str, run_id: str) -> Row | None:
    """The row already written for this configuration if it is complete and passes its check (a ``failed`` one
    is retried, and so is one that fails its check: :func:`set_aside_failed_check` moves it out of the way)."""
    row, problem = checked_row(results, machine, run_id)
    return row if row is not None and problem is None and row.get("status") in COMPLETE_STATUSES else None


def set_aside_failed_check(results: str | Path | ResultsLayout, machine: str, run_id: str,
                           stamp: str) -> tuple[Path, str] | None:
    """Move this configuration's row file (with its samples and telemetry) to ``superseded/<stamp>-failed-check/``
    when it fails its check, so the measurement that replaces it deletes nothing; (where, why), or None."""
    _, problem = checked_row(results, machine, run_id)
    if problem is None:
        return None
    target = _move_aside(layout_of(results), [(machine, run_id)], f"{stamp}-{FAILED_CHECK}")
    return (target, problem) if target is not None else None


def _checked_rows(results: str | Path | ResultsLayout) -> tuple[list[Row], list[dict[str, str]]]:
    """(the rows of a folder that can be reported, the others with why not)."""
    good, bad = [], []
    for path in layout_of(results).row_files():
        try:
            row = read_row(path)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            warnings.warn(f"skipping unreadable results file {path}: {exc}", stacklevel=2)
            bad.append({"path": str(path), "run_id": "", "reason": f"unreadable: {exc}"})
            continue
        problem = row_problem(row) or integrity_problem(row, path)
        if problem is None:
            good.append(row)
        else:
            warnings.warn(f"not reporting {path}: {problem}", stacklevel=2)
            bad.append({"path": str(path), "run_id": str(row.get("run_id", "")), "reason": problem})
    return good, bad


def stored_rows(results: str | Path | ResultsLayout) -> list[Row]:
    """Every valid row of one results folder; unreadable files are skipped with a warning naming them."""
    return _checked_rows(results)[0]


INVALID_COLUMNS = ["path", "run_id", "reason"]


def invalid_rows(dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Row files that cannot be reported (unreadable, an unknown status, a value of the wrong kind, a row that
    fails its check), with why."""
    bad = [b for d in dirs for b in _checked_rows(Path(d))[1]]
    return pd.DataFrame(bad, columns=INVALID_COLUMNS)


def set_aside(results: str | Path | ResultsLayout, rows: Iterable[Mapping[str, Any]], stamp: str) -> Path | None:
    """Move rows (with their samples and telemetry) to ``superseded/<stamp>/``: kept, but out of the report.

    Returns the folder they went to, or None when there was nothing to move.
    """
    return _move_aside(layout_of(results), [(str(r["machine"]), str(r["run_id"])) for r in rows], stamp)


def _move_aside(layout: ResultsLayout, keys: Iterable[tuple[str, str]], stamp: str) -> Path | None:
    """Move the files of each (machine, run_id) to ``superseded/<stamp>/rows|samples|telemetry|layers|
    profiles``, then keep only the ``SUPERSEDED_KEPT`` newest set-aside folders."""
    target = layout.superseded_dir(stamp)
    moved = False
    for machine, run_id in keys:
        for path, kind in (
            (layout.row_path(machine, run_id), "rows"),
            (layout.samples_path(machine, run_id), "samples"),
            (layout.telemetry_path(machine, run_id), "telemetry"),
            (layout.layers_path(machine, run_id), "layers"),
            (layout.profile_dir(machine, run_id), "profiles"),
        ):
            if path.exists():
                (target / kind).mkdir(parents=True, exist_ok=True)
                shutil.rmtree(target / kind / path.name, ignore_errors=True)  # a second move within one second
                shutil.move(str(path), str(target / kind / path.name))
                moved = True
    if moved:
        prune_superseded(layout)
    return target if moved else None


def prune_superseded(layout: ResultsLayout, keep: int = SUPERSEDED_KEPT) -> list[Path]:
    """Delete all but the ``keep`` newest set-aside folders (by their stamp, which sorts by time); returns
    those deleted."""
    stamps = sorted((p for p in (layout.root / "superseded").glob("*") if p.is_dir()), key=lambda p: p.name)
    gone = stamps[:-keep] if keep > 0 else stamps
    for folder in gone:
        shutil.rmtree(folder, ignore_errors=True)
    return gone


def prune_manifests(layout: ResultsLayout, now_s: float | None = None) -> list[Path]:
    """Delete the manifests no row of the folder (reported or set aside) points to, once
    ``ORPHAN_MANIFEST_AGE_S`` old; returns those deleted."""
    wanted: set[str] = set()
    for path in [*layout.row_files(), *layout.superseded_row_files()]:
        try:
            wanted.add(str(json.loads(path.read_text(encoding="utf-8")).get("manifest_id")))
        except (OSError, ValueError, AttributeError):
            return []  # a row that cannot be read may point to any manifest: delete none
    cutoff = (time.time() if now_s is None else now_s) - ORPHAN_MANIFEST_AGE_S
    gone = []
    for path in layout.manifest_files():
        try:
            if path.stem not in wanted and path.stat().st_mtime < cutoff:
                path.unlink()
                gone.append(path)
        except OSError:
            continue
    return gone


def read_results(dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Merge the rows of every results folder given (several machines land side by side).

    A row met twice (same machine, study and run_id, e.g. a folder imported twice) counts once: the
    newest by ``finished_utc``. Corrupt or foreign files, and rows that fail their check, are skipped with a
    warning naming them.
    """
    return read_checked(dirs)[0]


def read_checked(dirs: Iterable[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(:func:`read_results`, :func:`invalid_rows`) of the same folders, each row file read and checked once
    (what a report needs: the rows it draws and the ones it lists)."""
    rows: list[Row] = []
    bad: list[dict[str, str]] = []
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise FileNotFoundError(f"results folder '{d}' does not exist")
        good, refused = _checked_rows(d)
        bad += refused
        for row in good:
            row["results_dir"] = str(d)
            rows.append(row)
    return _table(rows), pd.DataFrame(bad, columns=INVALID_COLUMNS)


def _table(rows: list[Row]) -> pd.DataFrame:
    """The rows as one table: required columns always, a row met twice once, the schema's column order."""
    if not rows:
        return pd.DataFrame(columns=list(REQUIRED_COLUMNS))
    df = pd.DataFrame(rows)
    for col in REQUIRED_COLUMNS:
        if col not in df:
            df[col] = None
    if "finished_utc" in df:
        df = df.sort_values("finished_utc", kind="stable")
    df = df.drop_duplicates(subset=["machine", "study", "run_id"], keep="last").reset_index(drop=True)
    ordered = [c for c in COLUMN_NAMES if c in df.columns] + [c for c in df.columns if c not in COLUMN_NAMES]
    return df[ordered]


def flag_mask(column: pd.Series) -> pd.Series:
    """A flag column (``interfered``, ``above_roof``, ...) as booleans, a missing value not a flag.

    ``fillna(False)`` on a column pandas read as float (every value missing) is deprecated; ``== True`` is not.
    """
    return column.eq(True)


def read_samples(results: str | Path | ResultsLayout, row: Mapping[str, Any]) -> pd.DataFrame:
    """The raw samples behind a row (empty when it has none), read strictly (``store.samples_file``)."""
    machine, run_id = str(row["machine"]), str(row["run_id"])
    series = read_series(layout_of(results).samples_path(machine, run_id), run_id, machine) or {}
    frames = [pd.DataFrame({"run_id": run_id, "machine": machine, "series": name, "index": range(len(values)),
                            "value": values}) for name, values in series.items()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(SAMPLE_COLUMNS))


def parquet_ready(df: pd.DataFrame) -> pd.DataFrame:
    """The table with one type per column, as Parquet needs: a text column that also holds numbers or
    flags (a setting that is ``auto`` in one row and ``4`` in another) becomes text, missing values kept."""
    out = df.copy()
    for name in out.columns:
        column = out[name]
        if column.dtype != object:
            continue
        kinds = {type(v) for v in column if v is not None and not (isinstance(v, float) and v != v)}
        if len(kinds) > 1 or kinds & {dict, list}:
            out[name] = column.map(lambda v: None if v is None or (isinstance(v, float) and v != v)
                                   else json.dumps(v) if isinstance(v, dict | list) else str(v))
    return out


def write_table(results: str | Path | ResultsLayout) -> Path:
    """Rebuild ``results.csv`` (every row of the folder) atomically, and ``results.parquet`` beside it where
    pyarrow is installed (the ``parquet`` extra); manifests no row points to any more are let go."""
    layout = layout_of(results)
    prune_manifests(layout)
    df = read_results([layout.root])
    atomic_write_text(layout.results_csv, df.to_csv(index=False))
    if importlib.util.find_spec("pyarrow") is not None:
        buffer = io.BytesIO()
        parquet_ready(df).to_parquet(buffer, index=False)
        atomic_write_bytes(layout.results_parquet, buffer.getvalue())
    return layout.results_csv
