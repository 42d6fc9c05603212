"""Figures that do not mislead: timed steps in ms after the warmup, only the roofs that have points, memory above
baseline, phases told apart, integer ticks, colour-blind-safe colours; each saved as PNG."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402

from benchlib.report.figures import charts, style, telemetry
from benchlib.report.figures import roofline as roofline_figures
from benchlib.roofline.measured import Ceilings  # noqa: E402

MIB = 2**20


def _row(**kw) -> dict:
    base = {"machine": "m", "hardware": "cpu", "model": "resnet18", "batch_size": 64, "variant": "default",
            "status": "ok", "run_id": "r", "roof_dtype": "fp32", "train_arithmetic_intensity": 40.0,
            "achieved_train_flops_per_s": 20e9, "arithmetic_intensity": 30.0, "achieved_infer_flops_per_s": 30e9,
            "above_roof": False, "peak_rss_bytes": 1.3e9, "peak_rss_above_baseline_bytes": 300 * MIB,
            "peak_cuda_allocated_bytes": None, "train_samples_per_s": 100.0}
    return {**base, **kw}


def _ceilings(device: str = "cpu", machine: str = "m") -> Ceilings:
    return Ceilings(device=device, device_name="Some CPU", peak_flops_per_s={"fp32": 100e9, "bf16": 110e9},
                    bandwidth_bytes_per_s=10e9, machine=machine)


def test_step_times_in_ms_warmup_first_and_legend_outside(tmp_path):
    samples = pd.DataFrame({"series": ["train_step_s"] * 20 + ["warmup_step_s"] * 3,
                            "value": [0.050] * 20 + [0.9, 0.06, 0.055]})
    fig = charts.step_time_distribution(samples, "t", tmp_path, "steps")
    ax = fig.axes[0]
    offsets = {c.get_label(): c.get_offsets() for c in ax.collections}
    timed = next(v for k, v in offsets.items() if k.startswith("timed step"))
    warm = np.concatenate([v for k, v in offsets.items() if k.startswith("warmup step")])
    assert timed[:, 0].min() == 4 and timed[:, 0].max() == 23, "timed steps follow the 3 warmup steps"
    assert warm[:, 0].max() == 3
    assert np.allclose(timed[:, 1], 50.0), "milliseconds on a milliseconds axis"
    assert ax.get_ylabel() == "step time (ms)"
    assert ax.get_ylim()[1] < 900, "the axis fits the timed steps; the slow first warmup step is marked off scale"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("off scale (up to 900 ms)" in t for t in labels) and any("median of timed steps: 50.0 ms" in t
                                                                         for t in labels)
    assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1, "legend right of the data"
    assert (tmp_path / "steps.png").stat().st_size > 1000


def _roof_labels(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines() if " roof: " in line.get_label()]


def test_device_roofline_draws_only_the_dtypes_with_points_and_their_values(tmp_path):
    df = pd.DataFrame([_row(), _row(model="mobilenet_v2", run_id="q")])
    (fig,) = roofline_figures.device_rooflines(df, [_ceilings()], tmp_path)
    labels = _roof_labels(fig.axes[0])
    assert labels == ["measured fp32 roof: 100 GFLOP/s, 10.0 GB/s, ridge 10.0 FLOP/byte"]
    point_colours = {to_hex(line.get_color()) for line in fig.axes[0].get_lines() if " roof: " not in line.get_label()}
    assert point_colours == {style.OKABE_ITO[0].lower(), style.OKABE_ITO[1].lower()}
    df_bf16 = pd.DataFrame([_row(), _row(run_id="b", roof_dtype="bf16", variant="cpu-bf16")])
    (fig,) = roofline_figures.device_rooflines(df_bf16, [_ceilings()], tmp_path)
    assert [label.split(":")[0] for label in _roof_labels(fig.axes[0])] == ["measured fp32 roof", "measured bf16 roof"]
    assert (tmp_path / "roofline__m__cpu.png").exists()


def test_a_point_without_a_measured_roof_is_hollow_and_says_so(tmp_path):
    df = pd.DataFrame([_row(), _row(run_id="q", roof_dtype="int8", variant="cpu-quantized")])
    (fig,) = roofline_figures.device_rooflines(df, [_ceilings()], tmp_path)
    ax = fig.axes[0]
    assert [label.split(":")[0] for label in _roof_labels(ax)] == ["measured fp32 roof"]
    quantized = [line for line in ax.get_lines() if line.get_label().startswith("resnet18 cpu-quantized")]
    assert quantized and all("int8: no measured roof" in line.get_label() for line in quantized)
    assert all(line.get_markerfacecolor() == "none" for line in quantized)


def test_a_device_without_points_and_a_model_on_one_device_draw_nothing(tmp_path):
    df = pd.DataFrame([_row()])
    assert roofline_figures.device_rooflines(df, [_ceilings(), _ceilings("cuda:0")], tmp_path).__len__() == 1
    assert roofline_figures.model_rooflines(df, [_ceilings(), _ceilings("cuda:0")], tmp_path) == []
    two = pd.DataFrame([_row(), _row(hardware="cuda", run_id="g")])
    (fig,) = roofline_figures.model_rooflines(two, [_ceilings(), _ceilings("cuda:0")], tmp_path)
    assert len(_roof_labels(fig.axes[0])) == 2 and (tmp_path / "roofline_model__resnet18.png").exists()


def test_memory_bars_are_the_peak_above_baseline(tmp_path):
    df = pd.DataFrame([_row(), _row(model="mobilenet_v2", run_id="q", peak_rss_above_baseline_bytes=100 * MIB)])
    fig = charts.metric_bars(df, style.MEMORY_METRIC, tmp_path)
    heights = sorted(p.get_height() for p in fig.axes[0].patches if p.get_height() > 0)
    assert heights == [100.0, 300.0]
    assert "above baseline" in fig.axes[0].get_ylabel()
    assert (tmp_path / f"{style.MEMORY_METRIC}.png").exists()


def test_telemetry_phases_in_their_colours_with_a_legend_and_integer_thread_ticks(tmp_path):
    t = np.arange(0, 6, 0.5)
    frame = pd.DataFrame({"t_s": t, "phase": ["train"] * 6 + ["eval"] * 3 + ["latency"] * 3,
                          "cpu_util_pct": 50.0, "proc_cpu_util_pct": 90.0, "rss_bytes": 1.2e9,
                          "threads": [16, 16, 17, 17, 17, 16, 16, 16, 17, 17, 16, 16]})
    fig = telemetry.telemetry_timeline(frame, "t", tmp_path, "tele")
    legend_texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert legend_texts == ["phase: train", "phase: eval", "phase: latency"]
    spans = {to_hex(p.get_facecolor()) for p in fig.axes[0].patches}
    assert len(spans) == 3, "each phase its own colour"
    labels = {ax.get_ylabel(): ax for ax in fig.axes}
    threads_ax = labels["threads"]
    # the machine (0-100%) and this process (0-200% on two cores) on two labelled axes, not one scale
    assert labels["% of the machine"].get_ylim() == (0, 105)
    assert labels["this process\n(% of one core)"].get_ylim()[1] >= 99.0
    assert all(float(tick).is_integer() for tick in threads_ax.get_yticks())


def test_scaling_axis_has_integer_ticks(tmp_path):
    table = pd.DataFrame({"model": "resnet18", "batch_size": 64, "hardware": "cpu", "threads": [1, 2, 4],
                          "train_samples_per_s": [100.0, 180.0, 300.0], "parallel_efficiency": [1.0, 0.9, 0.75]})
    fig = charts.scaling(table, "threads", tmp_path)
    assert all(float(tick).is_integer() for tick in fig.axes[0].get_xticks())


def test_palette_is_colour_blind_safe_and_long_enough():
    assert style.palette(3) == list(style.OKABE_ITO[:3])
    assert len(style.palette(12)) == 12 and style.palette(12)[:8] == list(style.OKABE_ITO)


def test_batch_sweep_one_curve_per_swept_setting_and_plain_batch_ticks(tmp_path):
    rows = [_row(run_id=f"b{b}t{t}", batch_size=b, threads=t, train_samples_per_s=b * t, train_step_s_median=0.1)
            for b in (16, 32, 64) for t in (1, 2)]
    rows.append(_row(run_id="oom", batch_size=128, threads=1, status="oom"))
    fig = charts.batch_sweep(pd.DataFrame(rows), tmp_path)
    labels = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert labels == ["resnet18 @ cpu, 1 threads", "resnet18 @ cpu, 2 threads"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["16", "32", "64", "128"]
    heights = fig.axes[1].get_lines()[0].get_ydata()
    assert np.allclose(heights, 300.0), "memory above baseline (300 MiB), not the process total"


def _whisker_spans(ax) -> list[tuple[float, float]]:
    """Each drawn whisker's (low, high), from the error bars' vertical segments."""
    spans = []
    for collection in ax.collections:
        for segment in collection.get_segments():
            (_, y0), (_, y1) = segment[0], segment[-1]
            spans.append((min(y0, y1), max(y0, y1)))
    return sorted(spans)


def test_one_run_a_bar_draws_its_own_interval_and_says_what_the_whiskers_are(tmp_path):
    """A bar of one run shows the run's own 95% interval where the row has one (the test set's Wilson interval,
    scaled to % like the bar), says so under the bars, and says "no interval" where the row has none."""
    df = pd.DataFrame([_row(test_accuracy=0.975, test_accuracy_ci_low=0.953, test_accuracy_ci_high=0.987),
                       _row(model="mobilenet_v2", run_id="q", test_accuracy=0.928, test_accuracy_ci_low=0.896,
                            test_accuracy_ci_high=0.950)])
    ax = charts.metric_bars(df, "test_accuracy", tmp_path).axes[0]
    assert np.allclose(_whisker_spans(ax), [(89.6, 95.0), (95.3, 98.7)]), _whisker_spans(ax)
    assert "95% interval over the test set's sampling" in ax.get_xlabel()
    ax = charts.metric_bars(df, "train_samples_per_s", tmp_path).axes[0]
    assert _whisker_spans(ax) == [] and "no interval" in ax.get_xlabel()


def test_several_runs_a_bar_draw_the_middle_half_of_the_runs(tmp_path):
    df = pd.DataFrame([_row(run_id=f"r{i}", train_samples_per_s=v, test_accuracy=0.9, test_accuracy_ci_low=0.8,
                            test_accuracy_ci_high=0.95) for i, v in enumerate((90.0, 100.0, 110.0, 120.0, 130.0))])
    ax = charts.metric_bars(df, "train_samples_per_s", tmp_path).axes[0]
    assert "middle half of each bar's runs (5 runs a bar" in ax.get_xlabel()
    lows_highs = [(line.get_ydata().min(), line.get_ydata().max()) for line in ax.get_lines()]
    assert any(np.allclose(span, (100.0, 120.0)) for span in lows_highs), lows_highs
    ax = charts.metric_bars(df, "test_accuracy", tmp_path).axes[0]
    assert "middle half" in ax.get_xlabel() and _whisker_spans(ax) == []  # the runs' spread, not one run's


def test_each_whisker_stands_on_its_own_bar_among_several_hues(tmp_path):
    """Two variants of two models, one run each: every whisker sits on the bar of its model and variant."""
    cells = {("resnet18", "a"): (4.0, 3.9, 4.2), ("resnet18", "b"): (6.0, 5.5, 6.1),
             ("mobilenet_v2", "a"): (2.0, 1.8, 2.3), ("mobilenet_v2", "b"): (9.0, 8.0, 9.5)}
    df = pd.DataFrame([_row(model=m, variant=v, run_id=f"{m}{v}", latency_ms_p50=p, latency_ms_p50_ci_low=lo,
                            latency_ms_p50_ci_high=hi) for (m, v), (p, lo, hi) in cells.items()])
    ax = charts.metric_bars(df, "latency_ms_p50", tmp_path).axes[0]
    bars = {round(b.get_x() + b.get_width() / 2, 3): b.get_height() for c in ax.containers
            if isinstance(c, BarContainer) for b in c}
    drawn = {}
    for collection in ax.collections:
        for segment in collection.get_segments():
            (x, y0), (_, y1) = segment[0], segment[-1]
            drawn[round(float(x), 3)] = (min(y0, y1), max(y0, y1))
    assert len(drawn) == 4 and set(drawn) == set(bars)
    for x, (lo, hi) in drawn.items():
        truth = next(c for c in cells.values() if c[0] == bars[x])
        assert np.allclose((lo, hi), truth[1:]), (x, lo, hi, truth)
