"""What the notebooks show: thin wrappers that turn tables and figures into notebook output.

Every notebook cell calls one function here, so no logic lives only in a notebook.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import Image, Markdown, display

from ..instruments import interference
from ..instruments.profiler import ProfileResult, format_breakdown
from ..nets.flops import layer_table as count_layers
from ..nets.models import build_model
from ..roofline.cache import load_ceilings
from ..store.layout import ResultsLayout
from ..store.rows import key_of, read_samples
from . import plots
from . import rules as report_rules
from . import tables as report
from .profiles import load_profiles
from .tuning import study_frame, tuning_figures

_FLOAT_FORMAT = "{:,.4g}".format


def _show(df: pd.DataFrame, empty_message: str) -> Any:
    if df.empty:
        return Markdown(f"*{empty_message}*")
    return df.style.format(_FLOAT_FORMAT, subset=df.select_dtypes("number").columns).hide(axis="index")


def _show_figure(fig: Any) -> bool:
    """Show a figure (already saved as PNG by ``plots``) and free it; False when there was none."""
    if fig is None:
        return False
    display(fig)
    plots.plt.close(fig)
    return True


def load(results_dirs: Iterable[str]) -> pd.DataFrame:
    return report.load(results_dirs)


def heading(title: str, df: pd.DataFrame) -> Markdown:
    machines = ", ".join(sorted(map(str, df["machine"].dropna().unique()))) or "none"
    counts = df["status"].value_counts().to_dict() if not df.empty else {}
    status = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no rows"
    text = f"# {title}\n\n{len(df)} configurations ({status}) from machine(s): {machines}."
    warning = interference.summarize(report.ok_rows(df)) if not df.empty else None
    if warning:
        text += (f"\n\n**Warning: {warning}.** The configurations table marks them (column `interfered`, "
                 "with the other processes' share of the CPUs).")
    return Markdown(text)


def pair_rows(rows: Sequence[Mapping[str, Any]]) -> Any:
    return _show(report.pair_table(pd.DataFrame(rows)), "no configuration ran")


def pair_table(df: pd.DataFrame) -> Any:
    return _show(report.pair_table(df), "no results found in the given folders")


def failures(df: pd.DataFrame) -> Any:
    return _show(report.failures_table(df, df.attrs.get("invalid_rows")),
                 "none: every configuration produced a measurement")


INTERVAL_NOTE = ("the 95% bootstrap interval of the ratio of medians and a verdict (faster/slower when the "
                 "interval excludes 1 and the change is at least 2%, else same; unknown with one sample a side). "
                 "Intervals from one run a side cover step-to-step noise, not run-to-run drift: study `repeats: 3` "
                 "or more to resample runs.")


def speedups(df: pd.DataFrame) -> Any:
    if report.devices_count(df) < 2:
        return Markdown("*One device only: no cross-device speedups to show.*")
    display(Markdown(f"Each cell: how much faster the row's device trains than the column's, with {INTERVAL_NOTE}"))
    return report.speedup_matrix(df).style


def metric_figures(df: pd.DataFrame, figures_dir: str) -> None:
    shown = 0
    for metric in ("train_samples_per_s", "epoch_s", "latency_ms_p50", "infer_samples_per_s",
                   "peak_rss_bytes", "peak_cuda_allocated_bytes", "test_accuracy"):
        shown += _show_figure(plots.metric_bars(df, metric, figures_dir))
    if not shown:
        display(Markdown("*No successful configuration to plot.*"))


def step_time_figures(results_dir: str, rows: Sequence[Mapping[str, Any]], figures_dir: str) -> None:
    figures = Path(figures_dir)
    for row in rows:
        if row.get("status") != "ok":
            continue
        _show_figure(plots.step_time_distribution(read_samples(Path(results_dir), row), row["run_id"], figures,
                                                  f"steps__{row['machine']}__{row['run_id']}"))


def complexity(df: pd.DataFrame) -> Any:
    return _show(report.complexity_table(df), "no counted work in these results")


def rooflines(df: pd.DataFrame, results_dirs: Iterable[str], figures_dir: str) -> None:
    """Device rooflines, per-model rooflines and the batch-size effect, from measured ceilings."""
    ceilings = load_ceilings(results_dirs)
    if not ceilings:
        display(Markdown("*No measured ceilings in these results folders: run `benchlib roofline --results-dir DIR`.*"))
        return
    figures = plots.device_rooflines(df, ceilings, figures_dir) + plots.model_rooflines(df, ceilings, figures_dir)
    for fig in figures + [plots.batch_effect(df, figures_dir)]:
        _show_figure(fig)
    display(_show(pd.DataFrame([
        {"machine": c.machine, "device": c.device, "device_name": c.device_name,
         **{f"peak_{k}_flops_per_s": v for k, v in c.peak_flops_per_s.items()},
         "bandwidth_bytes_per_s": c.bandwidth_bytes_per_s, "noisy": ", ".join(c.noisy) or None}
        for c in ceilings]), ""))


def roof_check(df: pd.DataFrame) -> Any:
    """Every point under its roof, and the ones above flagged as measurement errors."""
    flagged = report.above_roof_rows(df)
    if not flagged.empty:
        display(Markdown(f"**{len(flagged)} point(s) lie above their roof: a measurement error, not a finding.**"))
        return _show(flagged, "")
    display(Markdown("No point lies above its roof."))
    return _show(report.roof_table(df), "no successful configuration")


def layer_table(model: str, image_size: int, rows: Sequence[Mapping[str, Any]]) -> Any:
    """Per-layer MACs, FLOPs, params and activation bytes of the pair's model (batch 1)."""
    num_classes = next((r["num_classes"] for r in rows if r.get("num_classes")), None)
    if num_classes is None:
        return Markdown("*No configuration of this pair ran: no layer table.*")
    return _show(count_layers(build_model(model, int(num_classes)), image_size), "")


def profiles(results_dirs: Iterable[str], figures_dir: str) -> None:
    """Step-time breakdown of every profiled pair and each pair's top operators."""
    found = load_profiles(results_dirs)
    if not found:
        display(Markdown("*No profiles in these results: set `profile: true` in the study or run `benchlib profile`.*"))
        return
    figures = [plots.profile_breakdowns(found, figures_dir)] + [plots.top_operators(p, figures_dir) for p in found]
    for fig in figures:
        _show_figure(fig)
    for p in found:
        if p.get("notes"):
            display(Markdown(f"*{p['model']} on {p['hardware']}:* " + " ".join(p["notes"])))


def profile_result(result: ProfileResult, out_dir: str) -> None:
    """A pair's profile: breakdown, top operators by self CPU and device time, per-step regions, files."""
    display(Markdown(f"```\n{format_breakdown(result.breakdown)}\n```"))
    display(_show(result.top_by_self_cpu, "no operators recorded"))
    display(_show(result.top_by_self_device, "no device time: CPU-only run"))
    display(_show(result.steps, "no profiled steps"))
    display(Markdown(f"Trace (Chrome/Perfetto): `{result.trace_path}`. TensorBoard: "
                     f"`tensorboard --logdir {result.tensorboard_dir}` (torch-tb-profiler plugin). "
                     + " ".join(result.notes)))


def run_rules(df: pd.DataFrame, results_dirs: Iterable[str]) -> Any:
    """Repeats, seeds, warmup and the timing rules of each study, and every run that did not count."""
    dirs = list(results_dirs)
    rules = report_rules.run_rules(df, report_rules.superseded_rows(dirs))
    return Markdown(report_rules.as_markdown(rules, report_rules.read_interleave(dirs)))


def repeats(df: pd.DataFrame) -> Any:
    """Median, IQR, min and max over the seeds of each configuration; noisy figures flagged."""
    agg = report.repeat_summary(df)
    if agg.empty or (agg["n"] < 2).all():
        return Markdown("*One seed per configuration: set `repeats: N` in the study for spreads across seeds.*")
    return _show(agg, "")


def sweep(df: pd.DataFrame, figures_dir: str) -> None:
    """Largest stable and best-throughput batch per pair, sweep plots, thread and worker scaling."""
    display(_show(report.sweep_summary(df), "no configurations"))
    figures = [plots.batch_sweep(df, figures_dir)]
    for knob in ("threads", "num_workers", "world_size"):
        table = report.scaling_table(df, knob)
        if not table.empty:
            display(Markdown(f"### Scaling with {knob}"))
            display(Markdown(f"Speedup against the smallest {knob}, with {INTERVAL_NOTE}"))
            display(_show(table, ""))
            figures.append(plots.scaling(table, knob, figures_dir))
    if not sum(_show_figure(fig) for fig in figures):
        display(Markdown("*Nothing was swept: give several batch sizes, or `sweep: {threads: [...]}`.*"))


def device_scaling(df: pd.DataFrame, figures_dir: str) -> Any:
    """Data-parallel scaling: throughput per process count, speedup and efficiency against one process."""
    table = report.scaling_table(df, "world_size")
    if table.empty:
        return Markdown("*One process per configuration: run with `--nproc-per-node N` to see data-parallel scaling.*")
    _show_figure(plots.scaling(table, "world_size", figures_dir))
    display(Markdown(f"Speedup against one process, with {INTERVAL_NOTE}"))
    return _show(table, "")


def tuning(results_dir: str, study_name: str, figures_dir: str) -> None:
    """A pair's tuning study: every trial, the best against the default trial, and Optuna's figures."""
    frame = study_frame(results_dir, study_name)
    states = frame["state"].value_counts().to_dict() if not frame.empty else {}
    counts = ", ".join(f"{n} {state.lower()}" for state, n in states.items()) or "no trials"
    display(Markdown(f"Study `{study_name}` in `{ResultsLayout.of(results_dir).tuning_storage}`: {len(frame)} "
                     f"trial(s) ({counts}). Best exported to `{ResultsLayout.of(results_dir).tuning_dir}`."))
    display(Markdown("The best trial against the default trial: one short trial each, so the ratios have no "
                     "interval (a trial's figure is a single run). Measure the tuned variant (`cpu-tuned`/"
                     "`gpu-tuned` in `benchlib compare`) for the same comparison with its interval and verdict."))
    display(_show(report.best_against_default(frame), "no completed default or best trial to compare"))
    display(_show(frame.drop(columns=["params"], errors="ignore"), "no trials"))
    for path in tuning_figures(results_dir, study_name, Path(figures_dir)):
        display(Image(filename=str(path)))


UTILIZATION_COLUMNS = ["machine", "hardware", "model", "batch_size", "variant", "cpu_util_pct_mean", "cpu_util_pct_p95",
                       "proc_cpu_util_pct_mean", "gpu_util_pct_mean", "gpu_util_pct_p95", "gpu_mem_used_bytes_max",
                       "gpu_power_w_mean", "gpu_temp_c_max", "cpu_temp_c_max", "threads_max", "telemetry_samples",
                       "telemetry_missing"]
ENERGY_COLUMNS = [
    "machine",
    "hardware",
    "model",
    "batch_size",
    "variant",
    "train_samples_per_s",
    "train_energy_j_per_sample",
    "infer_samples_per_s",
    "infer_energy_j_per_sample",
    "train_energy_method",
    "train_energy_unmeasurable",
]


def telemetry(df: pd.DataFrame, results_dirs: Iterable[str], figures_dir: str, max_timelines: int = 8) -> None:
    """Utilization table (training phase), energy per sample beside throughput, and timelines over time."""
    good = report.ok_rows(df)
    display(Markdown("### Utilization while training (sampled in the background, not once after the run)"))
    display(_show(good[[c for c in UTILIZATION_COLUMNS if c in good]], "no successful configuration"))
    display(Markdown("### Energy per sample beside throughput"))
    display(_show(good[[c for c in ENERGY_COLUMNS if c in good]], "no successful configuration"))
    shown = 0
    for d in results_dirs:
        for _, row in good[good["results_dir"] == str(d)].iterrows() if "results_dir" in good else []:
            path = ResultsLayout.of(d).telemetry_path(str(row["machine"]), str(row["run_id"]))
            if shown >= max_timelines or not path.exists():
                continue
            shown += _show_figure(plots.telemetry_timeline(
                pd.read_csv(path), f"{row['machine']}:{row['hardware']} {row['run_id']}", figures_dir,
                f"telemetry__{key_of(row)}"))
    if not shown:
        display(Markdown("*No telemetry time series in these results.*"))


VARIANT_COLUMNS = ["machine", "hardware", "model", "batch_size", "variant", "baseline", "train_throughput", "epoch",
                   "latency_bs1", "infer_throughput", "accuracy_delta_pts", "peak_memory_ratio", "model_size_ratio"]


def variants(df: pd.DataFrame) -> Any:
    """Each optimization variant against its hardware's default: speedups, accuracy and memory."""
    table = report.variant_speedups(df)
    if table.empty:
        return Markdown("*One variant only: list several under `variants:` (or run `benchlib compare`).*")
    display(Markdown(f"Each variant against its hardware's default (> 1: better), with {INTERVAL_NOTE}"))
    table = table[[c for c in VARIANT_COLUMNS if c in table]]
    quant = report.ok_rows(df)
    cols = [c for c in ("machine", "hardware", "model", "variant", "fp32_test_accuracy", "test_accuracy",
                        "accuracy_drop_pts", "model_size_bytes", "fp32_model_size_bytes", "quantized_modules",
                        "weights_trained_by", "compile_s") if c in quant]
    if "quantization" in quant and (quant["quantization"] != "none").any():
        display(Markdown("Quantized variants train nothing of their own: each evaluates the weights its fp32 "
                         "baseline trained (`weights_trained_by`), so it has no epoch-time bar and its accuracy "
                         "drop is measured on the very same weights."))
        display(_show(quant[quant["quantization"] != "none"][cols], ""))
    return _show(table, "")


def manifests(results_dirs: Iterable[str]) -> Any:
    records = []
    for d in results_dirs:
        for path in ResultsLayout.of(d).manifest_files():
            try:
                m = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            records.append({"manifest_id": path.stem, **{k: m.get(k) for k in (
                "machine", "cpu_model", "cpus_usable", "torch_num_threads", "python", "torch", "torchvision",
                "cuda_version", "cudnn_version", "driver_version", "git_commit", "benchlib_version")}})
    return _show(pd.DataFrame(records), "no manifest found")
