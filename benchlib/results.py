"""Results on disk: one tidy row per measured configuration, written atomically.

Layout of a results folder (``results/<study>/``)::

    rows/<machine>__<run_id>.json       one row (a flat JSON object), replaced whole on re-run
    samples/<machine>__<run_id>.csv     the raw per-step / per-repeat samples behind the row
    manifests/<manifest_id>.json        the environment a row was measured in
    results.csv                         every row of the folder, rebuilt by ``write_table``

One file per row means concurrent writers never share a file, and a crash leaves either the old
file or the new one, never half of either.
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

ROW_COLUMNS: tuple[str, ...] = (
    "study", "run_id", "machine", "hardware", "device_name", "model", "dataset", "image_size", "batch_size",
    "variant", "precision", "threads", "seed", "status", "error", "train_steps", "train_step_s_median",
    "train_step_s_iqr", "train_samples_per_s", "epoch_s", "val_samples_per_s", "train_accuracy",
    "test_accuracy", "latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "batch_latency_ms_p50",
    "infer_samples_per_s", "peak_rss_bytes", "peak_cuda_allocated_bytes", "params",
)
STATUSES = ("ok", "failed", "skipped", "oom", "unstable")
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file-name-safe form of ``text`` (keeps letters, digits, '.', '_' and '-')."""
    return _SAFE.sub("-", text).strip("-") or "unnamed"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never a part."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, fsynced, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide results from other users
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:
        pass


def remove_stale_temp_files(results_dir: Path, older_than_s: float = 600.0) -> int:
    """Delete temporary files a killed writer left behind (old enough that no live writer owns them)."""
    import time

    cutoff = time.time() - older_than_s
    removed = 0
    for tmp in Path(results_dir).rglob(".*.tmp"):
        try:
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
                removed += 1
        except OSError:
            continue
    return removed


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):  # numpy / torch scalars
        return _json_value(v.item())
    return v


def row_key(row: Mapping[str, Any]) -> str:
    return safe_name(f"{row['machine']}__{row['run_id']}")


def write_row(results_dir: Path, row: Mapping[str, Any], samples: Mapping[str, Sequence[float]] | None = None) -> Path:
    """Write one row (and its raw samples) under ``results_dir``; returns the row file."""
    missing = [c for c in ROW_COLUMNS if c not in row]
    if missing:
        raise ValueError(f"row lacks columns: {', '.join(missing)}")
    key = row_key(row)
    if samples:
        lines = ["run_id,machine,series,index,value"]
        for series, values in samples.items():
            lines += [f"{row['run_id']},{row['machine']},{series},{i},{float(v)!r}" for i, v in enumerate(values)]
        atomic_write_text(results_dir / "samples" / f"{key}.csv", "\n".join(lines) + "\n")
    path = results_dir / "rows" / f"{key}.json"
    atomic_write_text(path, json.dumps({k: _json_value(v) for k, v in row.items()}, indent=1, sort_keys=False) + "\n")
    return path


def write_manifest(results_dir: Path, manifest: Mapping[str, Any], manifest_id: str) -> Path:
    path = results_dir / "manifests" / f"{manifest_id}.json"
    if not path.exists():
        atomic_write_text(path, json.dumps(manifest, indent=1, default=str) + "\n")
    return path


def _read_row(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or any(k not in data for k in ("study", "run_id", "machine", "status")):
        raise ValueError("not a benchlib result row")
    return data


def row_files(results_dir: Path) -> list[Path]:
    return sorted((results_dir / "rows").glob("*.json"))


def read_results(dirs: Iterable[str | Path]) -> pd.DataFrame:
    """Merge the rows of every results folder given (several machines land side by side).

    A row met twice (same machine, study and run_id, e.g. a folder imported twice) counts once: the
    newest by ``finished_utc``. Corrupt or foreign files are skipped with a warning naming them.
    """
    rows: list[dict[str, Any]] = []
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise FileNotFoundError(f"results folder '{d}' does not exist")
        for path in row_files(d):
            try:
                row = _read_row(path)
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                warnings.warn(f"skipping unreadable results file {path}: {exc}", stacklevel=2)
                continue
            row["results_dir"] = str(d)
            rows.append(row)
    if not rows:
        return pd.DataFrame(columns=list(ROW_COLUMNS))
    df = pd.DataFrame(rows)
    for col in ROW_COLUMNS:
        if col not in df:
            df[col] = None
    if "finished_utc" in df:
        df = df.sort_values("finished_utc", kind="stable")
    df = df.drop_duplicates(subset=["machine", "study", "run_id"], keep="last").reset_index(drop=True)
    ordered = list(ROW_COLUMNS) + [c for c in df.columns if c not in ROW_COLUMNS]
    return df[ordered]


def read_samples(results_dir: Path, row: Mapping[str, Any]) -> pd.DataFrame:
    path = results_dir / "samples" / f"{row_key(row)}.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["run_id", "machine", "series", "index", "value"])


def write_table(results_dir: Path) -> Path:
    """Rebuild ``results.csv`` (every row of the folder) atomically."""
    df = read_results([results_dir])
    path = results_dir / "results.csv"
    atomic_write_text(path, df.to_csv(index=False))
    return path
