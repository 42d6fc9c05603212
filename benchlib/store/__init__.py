"""Results and reports on disk: paths, the row schema, atomic writes, reading rows back.

The lowest layer with I/O: it knows files and tables, nothing of torch or of how a figure was measured.
"""
from .atomic import atomic_write_bytes, atomic_write_json, atomic_write_text, remove_stale_temp_files, safe_name
from .layout import ReportLayout, ResultsLayout, StudyPaths, pair_notebook_name, row_key, tuned_params_dir
from .rows import (
                   complete_row,
                   key_of,
                   read_results,
                   read_row,
                   read_samples,
                   set_aside,
                   stored_rows,
                   write_manifest,
                   write_row,
                   write_table,
)
from .schema import COLUMNS, COMPLETE_STATUSES, STATUSES, Column

__all__ = [
    "COLUMNS", "COMPLETE_STATUSES", "STATUSES", "Column", "ReportLayout", "ResultsLayout", "StudyPaths",
    "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "complete_row", "key_of", "pair_notebook_name",
    "read_results", "read_row", "read_samples", "remove_stale_temp_files", "row_key", "safe_name", "set_aside",
    "stored_rows", "tuned_params_dir", "write_manifest", "write_row", "write_table",
]
