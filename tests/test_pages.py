"""The pair and profile pages' tables: human units, nothing that cannot hold a value, failures said in words."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pandas as pd

import benchlib.roofline.cache
from benchlib import log
from benchlib.instruments.profiler import (
    DEVICE_CATEGORIES,
    HOST_CATEGORIES,
    OPERATOR_COLUMNS,
    STEP_COLUMNS,
    ProfileResult,
)
from benchlib.report.display import pages

TIME = re.compile(r"[\d.,]+ (µs|ms|s)")


def _result(device_us: float = 0.0) -> ProfileResult:
    ops = pd.DataFrame([{c: 0 for c in OPERATOR_COLUMNS} | {
        "name": "aten::convolution_backward", "calls": 78, "self_cpu_time_us": 3.42e6, "cpu_time_total_us": 3.5e6,
        "self_cpu_memory_usage_bytes": -624, "self_device_time_us": device_us}])
    steps = pd.DataFrame([dict.fromkeys(STEP_COLUMNS, 1000.0) | {"step": s, "step_time_us": 2.83e6} for s in (2, 3)])
    if device_us:
        breakdown = pd.DataFrame({"category": list(DEVICE_CATEGORIES), "time_us": [3060.0, 69.8, 2.04e6, 0.0, 464.0],
                                  "fraction": [0.0015, 0.00003, 0.998, 0.0, 0.0002]})
    else:
        breakdown = pd.DataFrame({"category": list(HOST_CATEGORIES),
                                  "time_us": [3060.0, 69.8, 0.62e6, 1.2e6, 0.22e6, 464.0],
                                  "fraction": [0.0015, 0.00003, 0.30, 0.59, 0.108, 0.0002]})
    return ProfileResult(ops, ops, ops if device_us else ops.iloc[:0], steps, breakdown, Path("t/trace.json"),
                         Path("t/tensorboard"), ["a note"])


def _cells(df: pd.DataFrame) -> list[str]:
    return [str(v) for v in df.to_numpy().ravel()]


def test_cpu_profile_tables_leave_out_what_a_cpu_cannot_have():
    result = _result()
    ops = pages.operators(result.top_by_self_cpu, device=False)
    assert list(ops.columns) == ["operator", "calls", "self CPU time", "CPU time with children", "self CPU memory"]
    assert ops.iloc[0].tolist() == ["aten::convolution_backward", "78", "3.42 s", "3.50 s", "-624 B"]
    steps = pages.steps(result.steps, device=False)
    assert "h2d_copy" not in steps.columns and all(TIME.fullmatch(v) for v in steps["step time"])
    shares = pages.breakdown(result, device=False)
    assert shares["category"].tolist() == ["data_loading", "memcpy", "forward", "backward", "optimizer", "other"]
    assert shares.loc[shares["category"] == "backward", "time per step"].item() == "600 ms", "per profiled step"
    assert all(v.endswith("%") for v in shares["share"]) and all(shares["what it covers"])


def test_gpu_profile_tables_keep_device_columns():
    result = _result(device_us=1500.0)
    ops = pages.operators(result.top_by_self_device, device=True)
    assert ops["self device time"].tolist() == ["1.50 ms"]
    assert "cpu_exec" in pages.breakdown(result, device=True)["category"].tolist()


def test_profile_page_links_the_trace_published_beside_it(monkeypatch):
    shown: list = []
    monkeypatch.setattr(pages, "display", shown.append)
    pages.profile_page(_result(), "results/x/profiles/p", "cpu", "resnet18")
    text = "\n".join(getattr(o, "data", "") for o in shown if isinstance(getattr(o, "data", None), str))
    assert "[Trace of the profiled steps](cpu__resnet18.trace.json.gz)" in text and "- a note" in text
    assert "/tmp" not in text and "device columns are left out" in text


def test_pair_results_read_like_the_report():
    ok = {"batch_size": 64, "status": "ok", "hardware": "cpu", "train_samples_per_s": 27.713,
          "train_step_s_median": 0.2881, "train_step_s_iqr": 0.0123, "epoch_s": None, "test_accuracy": 0.1875,
          "latency_ms_p50": 1.2, "latency_ms_p99": 2.94, "infer_samples_per_s": 164.9, "peak_rss_bytes": 877 * 2**20,
          "interfered": True, "interference_cpu_pct": 66.7}
    failed = {"batch_size": 128, "status": "oom", "error": "CPU memory above memory_limit_bytes", "hardware": "cpu"}
    table = pages.pair_results([ok, failed]).data
    first = table.iloc[0].to_dict()
    assert first["training"] == "27.7 samples/s" and first["step time"] == "288 ms (IQR 12.3 ms)"
    assert first["epoch"] == "\u2013" and first["test accuracy"] == "18.8%"
    assert first["latency, batch 1 (p50 / p99)"] == "1.20 ms / 2.94 ms"
    assert first["peak memory, whole process (CUDA allocated on a GPU, RSS elsewhere)"] == "877 MiB"
    assert first["interfered"] == "yes: 66.7% of the CPUs used by others"
    assert table.iloc[1]["status"] == "oom: CPU memory above memory_limit_bytes"
    assert not [c for c in _cells(table) if c in ("None", "nan", "NaN")]


def test_a_pages_warnings_are_benchlibs_one_liners_without_a_local_path(monkeypatch, capsys, tmp_path):
    """Issue 36: a published pair page carried Python warnings with their source lines and an absolute path."""
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # restored after the test
    log.configure()
    results_dir = tmp_path / "results" / "default"
    pages.plain_warnings(str(results_dir))
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn_explicit(f"re-measuring ceilings in {results_dir}/ceilings/vm__cpu.json: other processes "
                               "used 56% of the 2 usable CPUs", UserWarning, benchlib.roofline.cache.__file__, 80)
        warnings.warn_explicit("the profiler saw\nno device", UserWarning,
                               "/venv/lib/python3.12/site-packages/torch/profiler/profiler.py", 12)
    err = capsys.readouterr().err.splitlines()
    assert err == ["benchlib: warning: re-measuring ceilings in default/ceilings/vm__cpu.json: other processes "
                   "used 56% of the 2 usable CPUs",
                   "benchlib: warning: torch: UserWarning: the profiler saw no device"], err


def test_the_profile_pages_files_are_named_under_the_results_root(monkeypatch, tmp_path):
    shown: list = []
    monkeypatch.setattr(pages, "display", shown.append)
    results_dir = tmp_path / "results" / "s"
    pages.profile_page(_result(), results_dir / "profiles" / "p", "cpu", "resnet18", str(results_dir))
    text = "\n".join(getattr(o, "data", "") for o in shown if isinstance(getattr(o, "data", None), str))
    assert str(tmp_path) not in text and "under the results root: `s/profiles/p`" in text, text
