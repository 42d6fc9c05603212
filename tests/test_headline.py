"""The summary's compact tables: human units, one rounding rule, an en dash with its reason, the study's settings."""
from __future__ import annotations

import json
import math

import pandas as pd

from benchlib.report.tables import headline
from benchlib.report.words import cells, fmt

MIB = 2**20


def _row(run_id: str, **kw) -> dict:
    base = {"study": "s", "machine": "m", "hardware": "cpu", "model": "resnet18", "batch_size": 64,
            "variant": "default", "status": "ok", "train_samples_per_s": 6515.3, "infer_samples_per_s": 10234.0,
            "latency_ms_p50": 4.04321, "latency_ms_p99": 12.0, "peak_rss_bytes": 1.264e9,
            "rss_baseline_bytes": 1.0e9, "peak_rss_above_baseline_bytes": 264 * MIB, "test_accuracy": 0.96944,
            "train_energy_j_per_sample": None, "train_energy_unmeasurable": "RAPL not readable: permission denied",
            "interfered": False, "train_step_noisy": False,
            "settings_json": json.dumps({"epochs": 8, "lr": 0.05, "optimizer": "sgd", "warmup_steps": 5})}
    return {**base, "run_id": run_id, **kw}


def test_headline_columns_units_and_rounding():
    out = headline.headline_table(pd.DataFrame([_row("a__seed0"), _row("b__seed0", model="mobilenet_v2")]))
    t = out.table
    assert list(t.columns[:4]) == ["model", "device", "variant", "batch"]
    assert list(t["model"]) == ["mobilenet_v2", "resnet18"], "sorted by model"
    first = t.iloc[0]
    assert first["train (samples/s)"] == "6,520" and first["infer (samples/s)"] == "10,200"
    assert first["latency p50 (ms)"] == "4.04" and first["peak memory above baseline"] == "264 MiB"
    assert first["test accuracy"] == "96.9%"
    text = t.to_string()
    assert "e+" not in text and "None" not in text and "nan" not in text.lower()


def test_a_column_missing_everywhere_is_left_out_and_its_reason_said():
    out = headline.headline_table(pd.DataFrame([_row("a__seed0")]))
    assert "train energy (J/sample)" not in out.table.columns
    assert out.notes == ["train energy (J/sample): not measured in any configuration (RAPL not readable: "
                         "permission denied)"]


def test_a_missing_figure_is_an_en_dash_with_its_reason():
    rows = [_row("a__seed0", train_energy_j_per_sample=0.5, train_energy_unmeasurable=None),
            _row("q__seed0", variant="cpu-quantized", train_samples_per_s=None, weights_trained_by="a__seed0")]
    out = headline.headline_table(pd.DataFrame(rows))
    quant = out.table[out.table["variant"] == "cpu-quantized"].iloc[0]
    assert quant["train (samples/s)"] == fmt.MISSING and quant["train energy (J/sample)"] == fmt.MISSING
    assert out.notes == [
        "train (samples/s): \u2013 in 1 of 2 configurations (it trains nothing: it evaluates the weights another "
        "configuration trained)",
        "train energy (J/sample): \u2013 in 1 of 2 configurations (it trains nothing: it evaluates the weights another "
        "configuration trained)"]


def test_memory_is_the_peak_above_baseline_cuda_on_gpu_rows():
    df = pd.DataFrame([_row("c"), _row("g", hardware="cuda", peak_cuda_allocated_bytes=3 * 2**30),
                       _row("old", peak_rss_above_baseline_bytes=None)])
    memory = headline.memory_above_baseline(df)
    assert memory.tolist() == [264 * MIB, 3 * 2**30, 1.264e9 - 1.0e9]
    assert "CUDA allocated" in headline.memory_label(df) and "CUDA" not in headline.memory_label(df.iloc[:1])


def test_seeds_of_one_configuration_are_one_line_with_their_figure_and_count():
    """Throughput is the figure every comparison divides (the geometric mean over the runs), other figures the
    median over the seeds."""
    rows = [_row(f"a__seed{i}", train_samples_per_s=v, latency_ms_p50=v / 100) for i, v in
            enumerate((100.0, 200.0, 300.0))]
    t = headline.headline_table(pd.DataFrame(rows)).table
    assert len(t) == 1 and t.iloc[0]["runs"] == 3 and t.iloc[0]["train (samples/s)"] == "182"  # (100*200*300)^(1/3)
    assert t.iloc[0]["latency p50 (ms)"] == "2.00"


def test_flags_column_only_when_a_row_is_flagged():
    clean = headline.headline_table(pd.DataFrame([_row("a__seed0")])).table
    assert "flags" not in clean
    flagged = headline.headline_table(pd.DataFrame([_row("a__seed0", interfered=True),
                                                    _row("b__seed0", model="x", train_step_noisy=True)])).table
    assert set(flagged["flags"]) == {"interfered", "noisy"}


def test_settings_table_lists_the_grid_and_common_settings_and_marks_what_varies():
    other = json.dumps({"epochs": 8, "lr": 0.01})
    rows = [_row("a", batch_size=128), _row("a2"), _row("b", model="mobilenet_v2", settings_json=other)]
    t = headline.settings_table(pd.DataFrame(rows)).set_index("setting")["value"]
    assert t["models"] == "mobilenet_v2, resnet18"
    assert t["epochs"] == "8" and t["lr"].endswith("(varies)") and "0.05" in t["lr"] and "0.01" in t["lr"]
    assert t["batch sizes"] == "64, 128"


def test_a_setting_left_unset_beside_a_value_varies():
    """A study of the default (threads left to benchlib: 2 from the affinity) against one thread must not read
    'threads 1' as if every configuration ran on one."""
    auto, one = json.dumps({"threads": None, "lr": 0.01}), json.dumps({"threads": 1, "lr": 0.01})
    rows = [_row("a", settings_json=auto), _row("b", variant="one-thread", settings_json=one)]
    t = headline.settings_table(pd.DataFrame(rows)).set_index("setting")["value"]
    assert t["threads"] == "1, unset (varies)" and t["lr"] == "0.01"
    all_auto = headline.settings_table(pd.DataFrame([_row("a", settings_json=auto)])).set_index("setting")["value"]
    assert "threads" not in all_auto.index


def test_readable_cells_by_unit():
    df = pd.DataFrame({"peak_rss_bytes": [1.264e9, None], "params": [2.237e6, math.nan],
                       "train_samples_per_s": [6515.0, 10234.0], "train_step_s_median": [0.0123, 1.5],
                       "roof_fraction": [0.31, None], "achieved_train_flops_per_s": [172.1e9, None],
                       "interfered": [True, None], "error": [None, "boom"]})
    out = cells.readable(df)
    assert out["peak_rss_bytes"].tolist() == ["1.18 GiB", fmt.MISSING]
    assert out["params"].tolist() == ["2.24 M", fmt.MISSING]
    assert out["train_samples_per_s"].tolist() == ["6,520", "10,200"]
    assert out["train_step_s_median"].tolist() == ["12.3 ms", "1.50 s"]
    assert out["roof_fraction"].tolist() == ["31.0%", fmt.MISSING]
    assert out["achieved_train_flops_per_s"].tolist() == ["172 GFLOP/s", fmt.MISSING]
    assert out["interfered"].tolist() == ["yes", fmt.MISSING] and out["error"].tolist() == [fmt.MISSING, "boom"]
