"""Nothing lost: resume after SIGKILL, failing and dying notebooks as data, concurrent writers, sweeps."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import seed_ceilings

from benchlib.cli import main
from benchlib.run.record import run_pair
from benchlib.spec.settings import RunSettings
from benchlib.store.rows import read_results
from benchlib.store.schema import ROOF

TINY = {"dataset": "digits", "image_size": 32, "train_subset": 64, "test_subset": 32, "train_steps": 2,
        "warmup_steps": 1, "latency_repeats": 3, "latency_budget_s": 0,
        "infer_warmup_batches": 1}


def _study(tmp_path: Path, **extra) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"study": "s", "hardware": ["cpu"], "models": ["squeezenet1_1"],
                                    "batch_sizes": [4, 8], "calibrate": False, **TINY, **extra}))
    seed_ceilings(tmp_path / "results" / "s")
    return path


def _rows(tmp_path: Path):
    return sorted((tmp_path / "results" / "s" / "rows").glob("*.json"))


def _args(tmp_path: Path, params: Path, *extra: str) -> list[str]:
    return ["study", str(params), "--results-root", str(tmp_path / "results"), "--reports-root",
            str(tmp_path / "reports"), *extra]


def _cli(tmp_path: Path, params: Path, *extra: str) -> list[str]:
    """The command as a process of its own: what a kill ends. Where no kill is needed the tests call ``main``
    in this process instead (a process's start, torch's import with it, is about 4 s here)."""
    return [sys.executable, "-m", "benchlib", *_args(tmp_path, params, *extra)]


@pytest.mark.notebook
def test_sigkill_mid_study_then_resume_gives_each_row_once(tmp_path, capsys):
    params = _study(tmp_path, batch_sizes=[4, 8, 16])
    proc = subprocess.Popen(_cli(tmp_path, params, "--no-summary"), start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(_rows(tmp_path)) < 1:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the study, mid-way
    proc.wait(timeout=30)
    # its kernel runs in a session of its own (jupyter_client starts it so) and ends when its parent poller
    # (once a second) sees the study gone: a row it was finishing may still land, so the rows are read after
    time.sleep(2.5)
    before = {p.name: p.read_text() for p in _rows(tmp_path)}
    assert 1 <= len(before) < 3, "the kill should land mid-study"
    capsys.readouterr()
    with pytest.warns(UserWarning, match="taking over a lock of process"):  # the killed study's, said once
        code = main(_args(tmp_path, params, "--no-summary"))
    done = capsys.readouterr()
    assert code == 0, done.err[-2000:]
    assert "ceilings of cpu once more at the end of the study" in done.err  # ceilings_at_end's default
    df = read_results([tmp_path / "results" / "s"])
    assert len(df) == 3 and df["run_id"].is_unique and (df["status"] == "ok").all()
    # rows written before the kill are kept as measured; only their place under the roof may move, since the
    # study measures its ceilings once more at its end and keeps the higher (a roof is a maximum)
    placement = {c.name for c in ROOF}
    for name, text in before.items():
        after = json.loads((tmp_path / "results" / "s" / "rows" / name).read_text())
        kept = json.loads(text)
        assert {k: v for k, v in after.items() if k not in placement} == \
            {k: v for k, v in kept.items() if k not in placement}
        assert kept["roof_peak_flops_per_s"] <= after["roof_peak_flops_per_s"]
    assert f"cpu / squeezenet1_1: {3 - len(before)} of 3 configuration(s) to run" in done.err, done.err[-2000:]


@pytest.mark.notebook
def test_raising_and_dying_notebooks_become_failure_rows(tmp_path, capsys, monkeypatch):
    """One study, two faults: a configuration whose cell raises (its pair's other configuration stands) and a
    kernel that dies (every configuration of its pair fails); the study goes on and its summary says so."""
    params = _study(tmp_path, models=["resnet18", "squeezenet1_1"], batch_sizes=[4, 8], ceilings_at_end=False)
    monkeypatch.setenv("BENCHLIB_FAULT", "exit@resnet18,raise@squeezenet1_1__bs8")  # the kernels inherit it
    capsys.readouterr()
    code = main(_args(tmp_path, params))
    assert "once more at the end" not in capsys.readouterr().err, "ceilings_at_end: false keeps the ceilings"
    assert code == 1, "a failed pair makes the study exit non-zero"
    df = read_results([tmp_path / "results" / "s"]).set_index(["model", "batch_size"])
    assert df.loc[("squeezenet1_1", 4), "status"] == "ok", "the study went on past the dead kernel"
    assert df.loc[("squeezenet1_1", 8), "status"] == "failed"
    assert "InjectedFault" in df.loc[("squeezenet1_1", 8), "error"]
    assert all(df.loc[("resnet18", b), "status"] == "failed" for b in (4, 8))
    assert all("DeadKernel" in df.loc[("resnet18", b), "error"] for b in (4, 8))
    assert (tmp_path / "reports" / "s" / "runs" / "cpu__resnet18.ipynb").exists()
    summary = (tmp_path / "reports" / "s" / "summary.html").read_text()
    assert "Failed and skipped" in summary and "DeadKernel" in summary and "InjectedFault" in summary
    executed = json.loads((tmp_path / "reports" / "s" / "runs" / "cpu__squeezenet1_1.ipynb").read_text())
    assert any(o.get("output_type") == "error" for c in executed["cells"] for o in c.get("outputs", []))


def test_fresh_moves_the_old_results_and_reports_aside_keeping_the_lock(tmp_path):
    from benchlib.pipeline.study import move_aside
    from benchlib.store.layout import StudyPaths

    paths = StudyPaths.for_study("s", tmp_path / "results", tmp_path / "reports")
    lock = paths.results.root / ".benchlib-study.lock"
    for f in (paths.results.root / "rows" / "a.json", paths.reports.root / "summary.html", lock):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x")
    moved = move_aside(paths, keep=(lock,))
    assert sorted(p.name.split(".old-")[0] for p in moved) == ["s", "s"]
    assert [p.name for p in paths.results.root.iterdir()] == [lock.name], "only the lock stays"
    assert not any(paths.reports.root.iterdir())
    assert (moved[0] / "rows" / "a.json").read_text() == "x" and (moved[1] / "summary.html").exists()


def test_fresh_on_the_command_line_reaches_the_study(monkeypatch, tmp_path):
    from benchlib.cli import main
    from benchlib.pipeline import study

    seen = {}
    monkeypatch.setattr(study, "run_study", lambda *a, **k: seen.update(k) or study.StudyOutcome(0, 0, 0, 0))
    main(["study", str(_study(tmp_path)), "--fresh", "--no-summary"])
    assert seen.get("fresh") is True and seen.get("summary") is False, seen


@pytest.mark.slow
def test_resume_skips_complete_rows_and_retries_failed(tmp_path, capsys):
    settings = RunSettings(**TINY)
    out = tmp_path / "r"
    first = run_pair("s", "cpu", "squeezenet1_1", [4, 8], settings, out)
    second = run_pair("s", "cpu", "squeezenet1_1", [4, 8], settings, out)
    assert [r["finished_utc"] for r in first] == [r["finished_utc"] for r in second]
    assert capsys.readouterr().err.count("row exists, skipped") == 2
    row_file = next((out / "rows").glob("*bs4*.json"))
    row = json.loads(row_file.read_text())
    row_file.write_text(json.dumps({**row, "status": "failed"}))
    third = run_pair("s", "cpu", "squeezenet1_1", [4, 8], settings, out)
    assert third[0]["status"] == "ok" and third[0]["finished_utc"] >= row["finished_utc"]


@pytest.mark.slow
def test_sweep_records_oom_and_nan_and_goes_on(tmp_path):
    settings = RunSettings(**TINY)
    rows = run_pair("s", "cpu", "squeezenet1_1", [4], settings, tmp_path,
                    sweep={"lr": [0.01, 10.0], "memory_limit_bytes": [None, 1]})
    status = {(r["lr"], "__memory_limit_bytes1__" in r["run_id"]): r["status"] for r in rows}
    assert len(rows) == 4
    assert status[(0.01, False)] == "ok"
    assert status[(0.01, True)] == "oom" and status[(10.0, True)] == "oom"
    assert status[(10.0, False)] == "unstable", "the largest lr a study accepts diverges here"
    unstable = next(r for r in rows if r["status"] == "unstable")
    assert "non-finite training loss" in unstable["error"] and "at step" in unstable["error"]
    assert len(read_results([tmp_path])) == 4


@pytest.mark.slow
def test_repeats_run_each_configuration_with_several_seeds(tmp_path):
    rows = run_pair("s", "cpu", "squeezenet1_1", [4], RunSettings(**TINY), tmp_path, repeats=3)
    assert [r["seed"] for r in rows] == [0, 1, 2]
    from benchlib.report.tables.summaries import repeat_summary

    agg = repeat_summary(read_results([tmp_path]))
    assert len(agg) == 1 and agg.loc[0, "n"] == 3
    values = sorted(r["train_samples_per_s"] for r in rows)
    assert agg.loc[0, "train_samples_per_s_median"] == pytest.approx(values[1])
    assert agg.loc[0, "train_samples_per_s_min"] == pytest.approx(values[0])
    assert agg.loc[0, "train_samples_per_s_max"] == pytest.approx(values[2])
    q1, q3 = np.percentile(values, [25, 75])
    assert agg.loc[0, "train_samples_per_s_iqr"] == pytest.approx(q3 - q1)


_WRITER = """
import sys
from pathlib import Path
from benchlib.store.rows import write_row, write_table
from benchlib.store.schema import FORMAT_VERSION
from benchlib.store.schema import REQUIRED_COLUMNS as ROW_COLUMNS
out, name = Path(sys.argv[1]), sys.argv[2]
for i in range(40):
    row = {**{c: None for c in ROW_COLUMNS}, "format_version": FORMAT_VERSION}
    row.update(study="s", run_id=f"{name}-{i}", machine=name, status="ok", finished_utc=str(i))
    write_row(out, row, {"train_step_s": [0.1] * 200})
    if i % 10 == 0:
        write_table(out)
"""


def test_two_concurrent_writers_lose_nothing(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), name]) for name in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    df = read_results([tmp_path])
    assert len(df) == 80 and df["run_id"].is_unique
    assert not list(tmp_path.rglob("*.tmp"))
    assert len(list((tmp_path / "samples").glob("*.csv"))) == 80


@pytest.mark.slow
def test_report_skips_a_corrupt_results_file_and_reports_the_rest(tmp_path, capsys):
    run_pair("s", "cpu", "squeezenet1_1", [4], RunSettings(**TINY), tmp_path / "res")
    (tmp_path / "res" / "rows" / "truncated.json").write_text('{"study": "s", "run_id": "x", "mach')
    with pytest.warns(UserWarning, match="truncated.json"):
        code = main(["report", str(tmp_path / "res"), "--reports-root", str(tmp_path / "reports")])
    assert code == 0
    assert (tmp_path / "reports" / "res" / "summary.html").exists()
