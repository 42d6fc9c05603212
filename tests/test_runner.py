"""One configuration measured end to end on a tiny set-up: structure, units and invariants of the row."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import quiet_check, what_benchlib_saw

from benchlib.run.columns import measured_row
from benchlib.run.measure import measure
from benchlib.run.record import record
from benchlib.spec.settings import RunConfig
from benchlib.store.rows import read_results
from benchlib.store.schema import REQUIRED_COLUMNS as ROW_COLUMNS


@pytest.fixture(scope="module")
def measured():
    from conftest import TINY

    from benchlib.spec.settings import RunSettings

    # 20 latency passes: the timing test reads published percentiles, and six (TINY's) left even the p50
    # refused once as too wide (the torch-floor run in CI)
    cfg = RunConfig("t", "cpu", "squeezenet1_1", 16, RunSettings(**{**TINY, "latency_repeats": 20}))
    m = measure(cfg, machine="m")
    return cfg, measured_row(m), m.samples


def test_row_has_every_column(measured):
    _, row, _ = measured
    assert set(ROW_COLUMNS) <= set(row)
    assert row["status"] == "ok" and row["error"] is None


def test_steps_and_warmup_are_counted_apart(measured):
    cfg, row, samples = measured
    assert row["train_steps"] == 3 == len(samples["train_step_s"])
    assert len(samples["warmup_step_s"]) == cfg.settings.warmup_steps
    assert row["train_steps_total"] == 4


def test_timing_invariants(measured):
    _, row, samples = measured
    published = [row[f"latency_ms_p{q}"] for q in (50, 90, 99) if row[f"latency_ms_p{q}_status"] == "ok"]
    # on a busy host every percentile's interval can be too wide to publish: benchlib refusing them is right
    with quiet_check(**what_benchlib_saw(row)):
        assert published, [row[f"latency_ms_p{q}_status"] for q in (50, 90, 99)]
    assert published == sorted(published) and published[0] > 0  # p50 <= p90 <= p99 where shown
    assert all(row[f"latency_ms_p{q}_ci_low"] <= row[f"latency_ms_p{q}"] <= row[f"latency_ms_p{q}_ci_high"]
               for q in (50, 90, 99) if row[f"latency_ms_p{q}_status"] == "ok")
    q1, q3 = np.percentile(samples["train_step_s"], [25, 75])
    assert row["train_step_s_iqr"] == pytest.approx(q3 - q1) and row["train_step_s_iqr"] > 0
    assert row["train_samples_per_s"] == pytest.approx(16 * 3 / sum(samples["train_step_s"]))
    # inference throughput is samples over summed timed work (back-to-back batches), never batch / latency
    repeats = samples["infer_repeat_s"]
    assert row["infer_samples_per_s"] == pytest.approx(16 * 5 * len(repeats) / sum(repeats))
    assert len(samples["latency_s"]) == row["latency_n"] >= 5  # at least latency_repeats, more within the budget


def test_accuracy_and_memory(measured):
    _, row, _ = measured
    assert 0.0 <= row["train_accuracy"] <= 1.0 and 0.0 <= row["test_accuracy"] <= 1.0
    assert row["peak_rss_bytes"] > row["rss_baseline_bytes"] > 0
    assert row["peak_cuda_allocated_bytes"] is None
    assert row["params"] == row["params_trainable"] > 0
    assert row["threads"] >= 1


def test_epoch_time_only_from_full_epochs(measured):
    _, row, _ = measured
    # 128 training samples at batch 16 is 8 batches; 4 steps never complete an epoch
    assert row["batches_per_epoch"] == 8 and math.isnan(row["epoch_s"])


def test_full_epochs_and_synthetic_data(tiny_settings):
    s = dataclasses.replace(tiny_settings, dataset="synthetic", synthetic_samples=64, train_steps=None, epochs=2)
    m = measure(RunConfig("t", "cpu", "squeezenet1_1", 16, s), machine="m")
    row, samples = measured_row(m), m.samples
    assert row["synthetic"] is True
    assert row["train_accuracy"] is None and row["test_accuracy"] is None
    assert row["epochs_timed"] == 2 and len(samples["epoch_s"]) == 2
    assert row["train_steps"] == 2 * 4 - s.warmup_steps


def test_record_writes_row_samples_and_manifest(tmp_path, tiny_settings):
    row = record(RunConfig("t", "cpu", "squeezenet1_1", 16, tiny_settings), tmp_path, progress=None)
    df = read_results([tmp_path])
    assert len(df) == 1 and df.loc[0, "run_id"] == row["run_id"]
    manifest = json.loads((tmp_path / "manifests" / f"{row['manifest_id']}.json").read_text())
    assert manifest["torch"] and manifest["cpus_usable"] >= 1
    samples = pd.read_csv(next((tmp_path / "samples").glob("*.csv")))
    assert set(samples["series"]) >= {"train_step_s", "latency_s", "batch_latency_s"}


@pytest.mark.slow
def test_failure_is_recorded_not_raised(tmp_path, tiny_settings, monkeypatch):
    import benchlib.run.measure as runner

    def boom(*a, **k):
        raise RuntimeError("kaboom\nsecond line")

    monkeypatch.setattr(runner, "train", boom)
    row = record(RunConfig("t", "cpu", "squeezenet1_1", 16, tiny_settings), tmp_path, progress=None)
    assert row["status"] == "failed" and row["error"] == "RuntimeError: kaboom"
    assert read_results([tmp_path]).loc[0, "status"] == "failed"


@pytest.mark.slow
def test_default_study_points_lie_under_their_roofs(tmp_path):
    """The default study's configurations (fewer steps) against this machine's measured ceilings."""
    from benchlib.run.admission import load_study

    cfg = load_study("params/default.yaml")
    settings = dataclasses.replace(cfg.settings, train_steps=8, latency_repeats=10, latency_budget_s=0)
    for model in cfg.models:
        row = record(RunConfig("default", "cpu", model, cfg.batch_sizes[0], settings), tmp_path, progress=None)
        assert row["status"] == "ok"
        assert row["flops_per_sample"] == pytest.approx(2 * row["macs_per_sample"], rel=0.1)
        assert row["achieved_train_flops_per_s"] == pytest.approx(
            row["train_flops_per_sample"] * row["train_samples_per_s"]
        )
        assert 0 < row["roof_fraction"] <= 1.05 and 0 < row["infer_roof_fraction"] <= 1.05
        assert row["above_roof"] is False
        assert row["roof_dtype"] == "fp32" and row["roof_peak_flops_per_s"] > 0
    assert len(list((tmp_path / "ceilings").glob("*.json"))) == 1, "ceilings measured once and reused"
