"""The environment manifests a study's rows point to (``manifest_id``), read back as one table."""
from __future__ import annotations

import json
from collections.abc import Iterable

import pandas as pd

from ...store.layout import ResultsLayout

MANIFEST_KEYS = ("machine", "cpu_model", "cpus_usable", "torch_num_threads", "python", "torch", "torchvision",
                 "cuda_version", "cudnn_version", "driver_version", "git_commit", "benchlib_version")


def manifest_table(results_dirs: Iterable[str]) -> pd.DataFrame:
    """One line per environment manifest the rows point to (``manifest_id``)."""
    records = []
    for d in results_dirs:
        for path in ResultsLayout.of(d).manifest_files():
            try:
                m = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            records.append({"manifest_id": path.stem, **{k: m.get(k) for k in MANIFEST_KEYS}})
    return pd.DataFrame(records)
