"""Saved per-layer tables (``benchlib layers``, ``layers: true`` in a study) read back for the summary."""
from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from ...store.layout import ResultsLayout


def load_layer_reports(results_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every saved per-layer report: its checks as saved, its rows as a DataFrame under ``table``."""
    found = []
    for d in results_dirs:
        for path in ResultsLayout.of(d).layers_files():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                data["table"] = pd.DataFrame(data.pop("layers"))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                warnings.warn(f"skipping unreadable per-layer table {path}: {exc}", stacklevel=2)
                continue
            data["path"] = str(path)
            found.append(data)
    return found
