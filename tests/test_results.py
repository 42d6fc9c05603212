"""Results files: atomic, one row per configuration, merged across folders, corrupt files skipped."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from benchlib.store.atomic import atomic_write_text
from benchlib.store.rows import parquet_ready, read_results, write_row, write_table
from benchlib.store.schema import FORMAT_VERSION
from benchlib.store.schema import REQUIRED_COLUMNS as ROW_COLUMNS


def _row(**kw):
    row = {**{c: None for c in ROW_COLUMNS}, "format_version": FORMAT_VERSION}
    row.update(
        study="s",
        run_id="cpu__resnet18__bs8__default__fp32__seed0",
        machine="m1",
        hardware="cpu",
        model="resnet18",
        batch_size=8,
        status="ok",
        train_samples_per_s=100.0,
        finished_utc="2026-01-01T00:00:00",
    )
    row.update(kw)
    return row


def _write(folder, row):
    """Write a row with the one training step its throughput says it took: a figure with no samples behind it
    is not believed (``store.integrity``)."""
    rate = row.get("train_samples_per_s")
    return write_row(folder, row, {"train_step_s": [row["batch_size"] / rate]} if rate else None)


def test_write_and_read_row(tmp_path):
    path = _write(tmp_path, _row())
    assert path.parent.name == "rows"
    df = read_results([tmp_path])
    assert len(df) == 1 and df.loc[0, "train_samples_per_s"] == 100.0
    assert list(df.columns[: len(ROW_COLUMNS)]) == list(ROW_COLUMNS)
    samples = (tmp_path / "samples").glob("*.csv")
    assert len(list(samples)) == 1


def test_row_missing_columns_is_refused(tmp_path):
    with pytest.raises(ValueError, match="lacks columns"):
        write_row(tmp_path, {"study": "s"})


def test_nan_is_written_as_null(tmp_path):
    path = _write(tmp_path, _row(epoch_s=float("nan")))
    assert json.loads(path.read_text())["epoch_s"] is None


def test_merge_several_machines_and_dedupe(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a, _row(machine="m1"))
    _write(b, _row(machine="m2", train_samples_per_s=300.0))
    df = read_results([a, b, b])  # b imported twice counts once
    assert sorted(df["machine"]) == ["m1", "m2"]
    _write(a, _row(machine="m1", train_samples_per_s=150.0, finished_utc="2026-02-01T00:00:00"))
    df = read_results([a, b])
    assert df.set_index("machine").loc["m1", "train_samples_per_s"] == 150.0


def test_corrupt_file_is_skipped_with_warning(tmp_path):
    _write(tmp_path, _row())
    (tmp_path / "rows" / "broken.json").write_text('{"study": "s", "run_')
    (tmp_path / "rows" / "foreign.json").write_text('[1, 2, 3]')
    with pytest.warns(UserWarning, match="broken.json"):
        df = read_results([tmp_path])
    assert len(df) == 1


def test_a_row_of_the_first_format_is_read_in_todays(tmp_path):
    """Rows written before rows said their format (format 1) read as today's: the one migration step adds it."""
    path = _write(tmp_path, _row())
    old = json.loads(path.read_text())
    del old["format_version"]
    path.write_text(json.dumps(old))
    df = read_results([tmp_path])
    assert len(df) == 1 and df.loc[0, "format_version"] == FORMAT_VERSION


def test_a_row_newer_than_this_benchlib_is_refused_in_one_line(tmp_path, capsys):
    from benchlib.cli import main

    path = _write(tmp_path, _row())
    path.write_text(json.dumps({**json.loads(path.read_text()), "format_version": FORMAT_VERSION + 1}))
    assert main(["report", str(tmp_path), "--reports-root", str(tmp_path / "reports")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"row format {FORMAT_VERSION + 1} is newer than this benchlib" in err[0], err
    assert "upgrade benchlib" in err[0] and path.name in err[0]


def test_a_row_whose_format_is_not_a_version_is_listed_not_read(tmp_path):
    from benchlib.store.rows import invalid_rows

    path = _write(tmp_path, _row())
    path.write_text(json.dumps({**json.loads(path.read_text()), "format_version": "two"}))
    with pytest.warns(UserWarning, match="not a row format"):
        assert read_results([tmp_path]).empty
    with pytest.warns(UserWarning, match="not a row format"):
        assert "not a row format" in invalid_rows([tmp_path]).loc[0, "reason"]


def test_a_writer_of_another_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="this benchlib writes format"):
        _write(tmp_path, _row(format_version=1))


def test_write_table(tmp_path):
    _write(tmp_path, _row())
    _write(tmp_path, _row(run_id="other"))
    table = write_table(tmp_path)
    assert table.read_text().count("\n") == 3


def test_the_table_is_also_parquet_with_one_type_per_column(tmp_path):
    pytest.importorskip("pyarrow", reason="results.parquet needs the parquet extra (pyarrow)")
    _write(tmp_path, _row(error=None))
    _write(tmp_path, _row(run_id="other", status="oom", train_samples_per_s=None, error="CUDA out of memory"))
    write_table(tmp_path)
    back = pd.read_parquet(tmp_path / "results.parquet")
    csv = read_results([tmp_path])
    assert list(back.columns) == list(csv.columns) and len(back) == 2
    assert back["train_samples_per_s"].dtype.kind == "f" and back["train_samples_per_s"].isna().sum() == 1
    assert back.set_index("run_id").loc["other", "error"] == "CUDA out of memory"
    mixed = pd.DataFrame({"threads": pd.Series([2, "auto", None], dtype=object), "knobs": [{"a": 1}, None, None]})
    import pyarrow

    with pytest.raises((pyarrow.ArrowTypeError, pyarrow.ArrowInvalid)):  # unprepared: the reason for the step
        mixed.to_parquet(tmp_path / "raw.parquet")
    ready = parquet_ready(mixed)
    ready.to_parquet(tmp_path / "ready.parquet")
    threads = pd.read_parquet(tmp_path / "ready.parquet")["threads"]
    assert list(threads[:2]) == ["2", "auto"] and threads.isna()[2], "as text, nothing lost"
    assert ready["knobs"][0] == '{"a": 1}'


_CHILD = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import benchlib.store.atomic as r
    stage = sys.argv[2]
    if stage == "replace":
        os.replace = lambda *a: (print("ready", flush=True), time.sleep(60))
    else:
        os.fsync = lambda fd: (print("ready", flush=True), time.sleep(60))
    r.atomic_write_text(Path(sys.argv[1]), "NEW" * 1_000_000)
""")


@pytest.mark.parametrize("stage", ["write", "replace"])
def test_killed_writer_leaves_old_file_intact(tmp_path, stage):
    target = tmp_path / "rows" / "row.json"
    atomic_write_text(target, '{"old": true}\n')
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(target), stage], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert json.loads(target.read_text()) == {"old": True}
    leftovers = [p for p in target.parent.iterdir() if p.name != "row.json"]
    assert all(p.name.endswith(".tmp") for p in leftovers)


def test_stale_temp_files_are_removed_fresh_ones_kept(tmp_path):
    import os
    import time

    from benchlib.store.atomic import remove_stale_temp_files

    (tmp_path / "rows").mkdir()
    old, fresh = tmp_path / "rows" / ".a.json.x.tmp", tmp_path / "rows" / ".b.json.y.tmp"
    old.write_text("x")
    fresh.write_text("y")
    past = time.time() - 3600
    os.utime(old, (past, past))
    assert remove_stale_temp_files(tmp_path) == 1
    assert not old.exists() and fresh.exists()
