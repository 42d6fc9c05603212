"""Sweeps: largest stable and best batch, scaling tables, and the sweep notebook on real rows."""
from __future__ import annotations

import pandas as pd
import pytest

from benchlib.pipeline.study import summarize
from benchlib.report.tables.comparisons import scaling_table
from benchlib.report.tables.summaries import sweep_summary
from benchlib.run.admission import load_study
from benchlib.run.record import run_pair
from benchlib.spec.settings import RunSettings
from benchlib.spec.study import doubling_range
from benchlib.store.rows import read_results

TINY = {"dataset": "digits", "image_size": 32, "train_subset": 64, "test_subset": 32, "train_steps": 2,
        "warmup_steps": 1, "latency_repeats": 3, "latency_budget_s": 0,
        "infer_warmup_batches": 1}


def _frame(rows):
    base = {"machine": "m", "hardware": "cpu", "model": "resnet18", "variant": "default", "threads": 2,
            "num_workers": 0, "peak_rss_bytes": 1e9, "peak_cuda_allocated_bytes": None, "train_step_s_median": 0.1,
            "run_id": "x", "study": "s"}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_doubling_range():
    assert doubling_range(16, 512) == [16, 32, 64, 128, 256, 512]
    assert doubling_range(3, 20) == [3, 6, 12]


def test_sweep_summary_largest_stable_and_best_batch():
    df = _frame([
        {"batch_size": 16, "status": "ok", "train_samples_per_s": 100.0},
        {"batch_size": 32, "status": "ok", "train_samples_per_s": 180.0},
        {"batch_size": 64, "status": "ok", "train_samples_per_s": 170.0},
        {"batch_size": 128, "status": "unstable", "train_samples_per_s": None},
        {"batch_size": 256, "status": "oom", "train_samples_per_s": None},
    ])
    s = sweep_summary(df).iloc[0]
    assert s["largest_stable_batch"] == 64
    assert s["best_throughput_batch"] == 32
    assert s["failed_batches"] == "128 (unstable), 256 (oom)"


def test_scaling_table_speedup_and_efficiency():
    df = _frame([
        {"batch_size": 64, "status": "ok", "threads": 1, "train_samples_per_s": 100.0},
        {"batch_size": 64, "status": "ok", "threads": 2, "train_samples_per_s": 150.0},
    ])
    t = scaling_table(df, "threads").set_index("threads")
    assert t.loc[2, "speedup"] == pytest.approx(1.5)
    assert t.loc[2, "parallel_efficiency"] == pytest.approx(0.75)
    assert t.loc[1, "parallel_efficiency"] == pytest.approx(1.0)
    assert scaling_table(df[df["threads"] == 1], "threads").empty


def test_sweep_params_file_expands():
    cfg = load_study("params/sweep-cpu.yaml")
    assert cfg.batch_sizes == (16, 32, 64, 128, 256, 512)
    configs = cfg.configs("cpu", "resnet18")
    assert len(configs) == 6 * 2 and len({c.run_id for c in configs}) == 12
    assert {c.settings.knobs.threads for c in configs} == {1, 2}


@pytest.mark.notebook
def test_sweep_notebook_on_real_rows(tmp_path):
    results = tmp_path / "results" / "sw"
    rows = run_pair("sw", "cpu", "squeezenet1_1", [4, 8], RunSettings(**TINY), results, sweep={"threads": [1, 2]})
    assert {(r["batch_size"], r["threads"]) for r in rows} == {(4, 1), (4, 2), (8, 1), (8, 2)}
    html = summarize([results], tmp_path / "reports" / "sw", title="sweep test", notebook="sweep")
    text = html.read_text()
    assert "largest_stable_batch" in text and "Scaling with threads" in text
    assert (tmp_path / "reports" / "sw" / "figures" / "sweep_batch_size.png").exists()
    assert (tmp_path / "reports" / "sw" / "figures" / "scaling_threads.png").exists()
    assert len(read_results([results])) == 4
