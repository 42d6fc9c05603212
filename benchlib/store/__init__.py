"""Results and reports on disk: paths, the row schema, atomic writes, reading rows back.

The lowest layer with I/O: it knows files and tables, nothing of torch or of how a figure was measured.
"""
from __future__ import annotations

import importlib
from typing import Any

# The names below load their module on first use: the command line reads a study file and refuses a bad one
# without pandas (``rows``), which only reading rows back needs (1.5 s of every command on a busy 2-core VM).
_HOMES = {"atomic_write_bytes": "atomic", "atomic_write_json": "atomic", "atomic_write_text": "atomic",
          "remove_stale_temp_files": "atomic", "safe_name": "atomic", "ReportLayout": "layout",
          "ResultsLayout": "layout", "StudyPaths": "layout", "pair_notebook_name": "layout", "row_key": "layout",
          "tuned_params_dir": "layout", "complete_row": "rows", "key_of": "rows", "read_results": "rows",
          "read_row": "rows", "read_samples": "rows", "set_aside": "rows", "stored_rows": "rows",
          "write_manifest": "rows", "write_row": "rows", "write_table": "rows", "COLUMNS": "schema",
          "COMPLETE_STATUSES": "schema", "STATUSES": "schema", "Column": "schema"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
