"""Saved profiles read back for the summary: each profile's metadata with its breakdown and top operators."""
from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from ...store.layout import ResultsLayout


def load_profiles(results_dirs: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every saved profile: its metadata plus the breakdown and top-operator tables (read from CSV)."""
    found = []
    for d in results_dirs:
        for meta_path in ResultsLayout.of(d).profile_meta_files():
            try:
                meta = json.loads(meta_path.read_text())
                folder = meta_path.parent
                meta["breakdown"] = pd.read_csv(folder / "breakdown.csv")
                meta["top_self_cpu"] = pd.read_csv(folder / "top_self_cpu.csv")
                meta["top_self_device"] = pd.read_csv(folder / "top_self_device.csv")
                meta["steps"] = pd.read_csv(folder / "steps.csv")
                meta["folder"] = str(folder)
            except (OSError, ValueError) as exc:
                warnings.warn(f"skipping unreadable profile {meta_path.parent}: {exc}", stacklevel=2)
                continue
            found.append(meta)
    return found
