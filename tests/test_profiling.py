"""Profiler tables and traces: structure and invariants of one tiny profiled run, and the pure helpers."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import HostLoad, host_load, quiet_check
from torch.autograd import DeviceType

from benchlib.errors import ConfigError
from benchlib.instruments.profiler import (
    HOST_CATEGORIES,
    OPERATOR_COLUMNS,
    REGIONS,
    STEP_COLUMNS,
    ProfileResult,
    StepSpans,
    breakdown_table,
    clip_intervals,
    covered_us,
    device_work_kind,
    merge_intervals,
    step_breakdown_us,
    step_spans,
    subtract_intervals,
)
from benchlib.run.profile import profile_training, save_tables
from benchlib.spec.settings import RunConfig, RunSettings

ACTIVE = 3
TOP_N = 10
CONV_OPS = ("aten::convolution", "aten::_convolution", "aten::mkldnn_convolution", "aten::cudnn_convolution",
            "aten::convolution_backward")


def _tiny(hardware: str = "cpu") -> RunConfig:
    return RunConfig("t", hardware, "squeezenet1_1", 8, RunSettings(
        dataset="digits", image_size=32, train_subset=64, test_subset=32, warmup_steps=1, latency_repeats=3,
        infer_warmup_batches=1))


@pytest.fixture(scope="module")
def profiling(tmp_path_factory) -> tuple[ProfileResult, Path, HostLoad]:
    """The profiled run, and the load other processes put on the host while it ran."""
    out = tmp_path_factory.mktemp("profile")
    with host_load() as window:
        result = profile_training(_tiny(), out, wait=1, warmup=1, active=ACTIVE, top_n=TOP_N)
    return result, out, window


@pytest.fixture(scope="module")
def profiled(profiling) -> tuple[ProfileResult, Path]:
    return profiling[0], profiling[1]


# ---------------------------------------------------------------- one profiled CPU run

def test_chrome_trace_names_our_regions(profiled):
    result, out = profiled
    assert result.trace_path == out / "trace.json"
    names = {e.get("name") for e in json.loads(result.trace_path.read_text())["traceEvents"]}
    assert set(REGIONS) <= names
    assert sum(str(n).startswith("ProfilerStep#") for n in names) == ACTIVE


def test_tensorboard_dir_holds_a_plugin_trace(profiled):
    result, out = profiled
    assert result.tensorboard_dir == out / "tensorboard"
    traces = list(result.tensorboard_dir.glob("*.pt.trace.json"))
    assert len(traces) == 1
    assert "traceEvents" in json.loads(traces[0].read_text())


def test_operators_table(profiled):
    ops = profiled[0].operators
    assert list(ops.columns) == list(OPERATOR_COLUMNS)
    assert ops["name"].is_unique
    assert (ops["calls"] > 0).all()
    assert (ops["cpu_time_total_us"] >= ops["self_cpu_time_us"] - 1e-3).all()
    assert set(CONV_OPS) & set(ops["name"])
    assert not set(REGIONS) & set(ops["name"])  # regions are in `steps`, not operators


def test_top_by_self_cpu_sorted_and_capped(profiled):
    top = profiled[0].top_by_self_cpu
    assert 0 < len(top) <= TOP_N
    assert top["self_cpu_time_us"].is_monotonic_decreasing
    assert top["self_cpu_time_us"].iloc[0] == profiled[0].operators["self_cpu_time_us"].max()


def test_cpu_run_has_no_device_time_and_says_so(profiled):
    result = profiled[0]
    assert result.top_by_self_device.empty
    assert list(result.top_by_self_device.columns) == list(OPERATOR_COLUMNS)
    assert (result.operators["self_device_time_us"] == 0).all()
    assert any("no device timeline on cpu: operators have no device time" in n for n in result.notes)
    assert any("split into forward, backward and optimizer by the step's labelled regions" in n for n in result.notes)


def test_steps_table(profiled):
    steps = profiled[0].steps
    assert list(steps.columns) == list(STEP_COLUMNS)
    assert len(steps) == ACTIVE
    assert list(steps["step"]) == [2, 3, 4]  # after wait=1 and warmup=1
    assert (steps["step_time_us"] > 0).all()
    regions = steps[[f"{r}_us" for r in REGIONS]]
    assert (regions.le(steps["step_time_us"], axis=0)).all().all()
    assert (regions.sum(axis=1) <= steps["step_time_us"]).all()
    assert (steps[["forward_us", "backward_us"]] > 0).all().all()


def test_breakdown(profiled, profiling):
    result = profiled[0]
    b = result.breakdown
    assert tuple(b["category"]) == HOST_CATEGORIES, "a CPU run: its host time split by the step's regions"
    assert b["fraction"].between(0, 1).all()
    assert b["fraction"].sum() == pytest.approx(1.0, abs=1e-6)
    assert b["time_us"].sum() == pytest.approx(result.steps["step_time_us"].sum(), rel=1e-9)
    times = b.set_index("category")["time_us"]
    assert times[["forward", "backward", "optimizer"]].min() > 0, "each phase of the step measured"
    with quiet_check(profiling[2]):  # host time: where other processes take the cores, a phase waits for one
        assert times["backward"] > times["optimizer"], "the backward outweighs SGD's update"
    assert times["forward"] == pytest.approx(result.steps["forward_us"].sum(), rel=0.01)
    assert times["data_loading"] == pytest.approx(result.steps["data_wait_us"].sum())


def test_save_writes_csvs_that_read_back(profiled, tmp_path):
    result = profiled[0]
    paths = save_tables(result, tmp_path / "tables")
    assert {p.name for p in paths.values()} == {
        "operators.csv", "top_self_cpu.csv", "top_self_device.csv", "steps.csv", "breakdown.csv"}
    for name, table in result.tables().items():
        back = pd.read_csv(paths[name])
        assert list(back.columns) == list(table.columns)
        assert len(back) == len(table)
    assert not list((tmp_path / "tables").glob(".*.tmp"))


def test_bad_schedule_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="active"):
        profile_training(_tiny(), tmp_path, active=0)
    assert not (tmp_path / "trace.json").exists()


# ---------------------------------------------------------------- pure helpers

def test_interval_helpers():
    assert merge_intervals([(5, 6), (0, 2), (1, 3), (4, 4)]) == [(0, 3), (5, 6)]
    assert subtract_intervals([(0, 10)], [(2, 3), (5, 7), (9, 12)]) == [(0, 2), (3, 5), (7, 9)]
    assert subtract_intervals([(0, 1)], []) == [(0, 1)]
    assert clip_intervals([(-5, 2), (8, 20)], 0, 10) == [(0, 2), (8, 10)]
    assert covered_us([(0, 4), (2, 6), (10, 11)]) == 7


def _span_with_device_work() -> StepSpans:
    span = StepSpans(step=5, start_us=0.0, end_us=100.0)
    span.regions.update(data_wait=[(0, 10)], h2d_copy=[(10, 15)], forward=[(15, 40)], backward=[(40, 70)],
                        optimizer_step=[(70, 80)])
    span.kernels = [(20, 50), (45, 90), (95, 130)]  # overlapping, one running past the step
    span.copies = [(12, 18)]
    return span


def test_device_breakdown_partitions_the_step_by_priority():
    times = step_breakdown_us(_span_with_device_work(), device_timeline=True)
    assert times == pytest.approx({"compute": 75.0, "memcpy": 8.0, "data_loading": 10.0, "cpu_exec": 2.0,
                                   "other": 5.0})
    assert sum(times.values()) == pytest.approx(100.0)


def test_host_breakdown_splits_the_compute_into_forward_backward_and_optimizer():
    times = step_breakdown_us(_span_with_device_work(), device_timeline=False)
    assert times == pytest.approx({"forward": 25.0, "backward": 30.0, "optimizer": 10.0, "memcpy": 5.0,
                                   "data_loading": 10.0, "other": 20.0})
    table, _ = breakdown_table([_span_with_device_work()], device_timeline=False)
    assert tuple(table["category"]) == HOST_CATEGORIES and table["fraction"].sum() == pytest.approx(1.0)


def test_breakdown_table_fractions_sum_to_one():
    table, notes = breakdown_table([_span_with_device_work()] * 2, device_timeline=True)
    assert table["time_us"].sum() == pytest.approx(200.0)
    assert table["fraction"].sum() == pytest.approx(1.0)
    assert notes == []
    empty, notes = breakdown_table([], device_timeline=False)
    assert empty["fraction"].sum() == pytest.approx(1.0) and notes


def _event(name, start, end, device=DeviceType.CPU, activity=None, trace_name=None):
    return SimpleNamespace(name=name, trace_name=trace_name or name, device_type=device, is_async=False,
                           activity_type=activity, time_range=SimpleNamespace(start=start, end=end))


def test_step_spans_from_events_with_a_device_timeline():
    events = [
        _event("ProfilerStep*", 0, 100, trace_name="ProfilerStep#7"),
        _event("forward", 10, 50, activity="user_annotation"),
        _event("aten::conv2d", 12, 40, activity="cpu_op"),
        _event("forward", 20, 60, DeviceType.CUDA, "gpu_user_annotation"),
        _event("ProfilerStep#7", 0, 100, DeviceType.CUDA, "gpu_user_annotation"),
        _event("void implicit_gemm", 30, 55, DeviceType.CUDA, "kernel"),
        _event("Memcpy HtoD (Pageable -> Device)", 5, 8, DeviceType.CUDA, "gpu_memcpy"),
        _event("ProfilerStep*", 100, 150, trace_name="ProfilerStep#8"),
    ]
    first, second = step_spans(events)
    assert (first.step, first.step_time_us, second.step) == (7, 100, 8)
    assert first.regions["forward"] == [(10, 50)] and second.regions["forward"] == []
    assert first.kernels == [(30, 55)] and first.copies == [(5, 8)]
    assert device_work_kind(events[3]) is None and device_work_kind(events[2]) is None


def test_device_work_kind_without_activity_types():
    assert device_work_kind(_event("Memset (Device)", 0, 1, DeviceType.CUDA)) == "copy"
    assert device_work_kind(_event("sgemm_kernel", 0, 1, DeviceType.CUDA)) == "kernel"
    assert device_work_kind(_event("backward", 0, 1, DeviceType.CUDA)) is None


# ---------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_cuda_profile_charges_device_time_to_conv_ops(tmp_path):
    result = profile_training(_tiny("cuda"), tmp_path, wait=1, warmup=1, active=2)
    ops = result.operators.set_index("name")
    conv = [n for n in ops.index if "conv" in n]
    assert conv and (ops.loc[conv, "self_device_time_us"] > 0).any()
    assert not result.top_by_self_device.empty
    assert result.top_by_self_device["self_device_time_us"].is_monotonic_decreasing
    b = result.breakdown.set_index("category")
    assert b["fraction"].sum() == pytest.approx(1.0, abs=1e-6)
    assert b.loc["compute", "time_us"] > 0
    names = {e.get("name") for e in json.loads(result.trace_path.read_text())["traceEvents"]}
    assert set(REGIONS) <= names
