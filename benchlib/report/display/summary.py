"""What the summary and sweep notebooks show, section by section: one call per notebook cell.

Findings first, then the compact headline table and the study's settings, then figures and the
comparisons the study asked for. A section without data shows nothing at all (its heading included):
the findings' last line says what the study did not run.
"""
from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import pandas as pd
from IPython.display import Markdown, display

from ...instruments.samples import NOISY_IQR_OVER_MEDIAN
from ...roofline.measured import Ceilings
from ...store.noise_floor import NoiseFloor
from ...store.rows import key_of
from ..evidence import rules as report_rules
from ..evidence import selection
from ..evidence.floors import noise_floor_sentences, noise_floor_table
from ..evidence.samples import SampleReader
from ..figures import charts, profile, style
from ..figures import roofline as roofline_figures
from ..figures.telemetry import telemetry_timeline
from ..findings import caveats, key
from ..findings.key import INTERVAL_NOTE
from ..readback.samples import SampleFiles
from ..tables import comparisons, headline, summaries
from ..words import fmt
from . import show
from .layers import layers as layers  # the notebook's "Layer by layer" section, beside the others
from .layers import predictions as predictions  # and its "Predicted on other machines"
from .layers import variant_explanations

IDENTITY = ("machine", "hardware", "model", "batch_size", "variant")
UTILIZATION_COLUMNS = ["machine", "hardware", "model", "batch_size", "variant", "cpu_util_pct_mean", "cpu_util_pct_p95",
                       "proc_cpu_util_pct_mean", "gpu_util_pct_mean", "gpu_util_pct_p95", "gpu_mem_used_bytes_max",
                       "gpu_power_w_mean", "gpu_temp_c_max", "cpu_temp_c_max", "threads_max", "telemetry_samples",
                       "telemetry_interval_s", "telemetry_missing"]
ENERGY_COLUMNS = ["machine", "hardware", "model", "batch_size", "variant", "train_samples_per_s",
                  "train_energy_j_per_sample", "infer_samples_per_s", "infer_energy_j_per_sample",
                  "train_energy_method", "train_energy_unmeasurable"]
VARIANT_COLUMNS = ["machine", "hardware", "model", "batch_size", "variant", "baseline", "train_throughput", "epoch",
                   "latency_bs1", "infer_throughput", "accuracy_delta_pts", "peak_memory_ratio", "model_size_ratio"]


def _drop_empty(df: pd.DataFrame) -> pd.DataFrame:
    """Columns with no value in any row left out (GPU columns on a CPU-only study), and the machine where the
    rows come from one."""
    out = df.dropna(axis="columns", how="all")
    if "machine" in out and out["machine"].nunique() <= 1:
        out = out.drop(columns="machine")
    return out


def heading(title: str, df: pd.DataFrame) -> Markdown:
    """The title and one line: how many configurations, on which devices, how many measured."""
    if df.empty:
        return Markdown(f"# {title}\n\nNo results in the given folders.")
    names = df.get("device_name", pd.Series([None] * len(df), index=df.index))
    devices = sorted({f"{h} ({n})" if isinstance(n, str) and n else str(h) for h, n in zip(df["hardware"], names)
                      if (isinstance(n, str) and n) or not names[df["hardware"] == h].notna().any()})
    machines = sorted(map(str, df["machine"].dropna().unique()))
    ok = int((df["status"] == "ok").sum())
    studies = ", ".join(sorted(map(str, df["study"].dropna().unique()))) if "study" in df else ""
    configs = int(selection.config_key(df["run_id"]).nunique()) if "run_id" in df else len(df)
    runs = f" in {len(df)} run(s)" if configs != len(df) else ""
    text = (f"# {title}\n\nStudy {studies}: {configs} configuration(s){runs}, {ok} measured, on "
            f"{'; '.join(devices)} (machine{'s' if len(machines) > 1 else ''} {', '.join(machines)}).")
    return Markdown(text)


def key_findings(df: pd.DataFrame, found_profiles: list[dict[str, Any]],
                 layer_reports: list[dict[str, Any]], reader: SampleReader | None = None) -> Markdown:
    """Warnings, then what the data says per question the study asked, then what it did not run."""
    return Markdown(key.as_markdown(key.key_findings(df, found_profiles, reader, layers=layer_reports)))


def results(df: pd.DataFrame, reader: SampleReader | None = None) -> None:
    """The headline table (median over seeds, human units), why figures are missing, and every column behind a click."""
    table = headline.headline_table(df, reader=reader)
    show.heading("Results", anchor="headline")  # the browser check finds the headline table by this id
    if table.table.empty:
        display(Markdown("*No configuration produced a measurement.*"))
        return
    display(Markdown(f"One line per configuration. Training and inference throughput at the working batch (each "
                     "run's samples over its summed timed work, geometric mean over the runs: the figure every "
                     "comparison divides); "
                     f"latency of one image (batch 1); {headline.memory_label(df)}; energy per training sample."))
    display(show.table(table.table, text=True))
    if table.notes:
        display(Markdown("Missing figures (" + fmt.MISSING + "):\n\n" + "\n".join(f"- {n}" for n in table.notes)))
    full = summaries.pair_table(df)
    show.collapsed_table(f"Every configuration, all headline columns ({len(full)} rows; raw values in "
                         "results.csv)", full)


def how_it_was_run(df: pd.DataFrame, superseded: int, interleave: dict[str, bool],
                   rounds: dict[str, dict[str, Any]], floors: list[NoiseFloor]) -> None:
    """The study's settings as a table, then repeats, warmup and every run that did not count (``superseded``:
    rows set aside; ``interleave`` and ``rounds`` as the folders' rules recorded them)."""
    if df.empty:
        return
    show.heading("How it was run")
    display(show.table(headline.settings_table(df), text=True))
    show.collapsed_table("Every other setting", headline.settings_table(df, main=False), text=True)
    rules = report_rules.run_rules(df, superseded)
    display(Markdown(report_rules.as_markdown(rules, interleave, rounds)))
    noise_floor(df, floors)


def noise_floor(df: pd.DataFrame, floors: list[NoiseFloor]) -> None:
    """The machines' run-to-run noise floor (``benchlib calibrate``): the difference between single runs it does
    not let a comparison claim, and per metric its table."""
    machines = df["machine"].dropna().astype(str).unique() if "machine" in df else []
    show.heading("Run-to-run noise floor", 3)
    display(Markdown(" ".join(noise_floor_sentences(floors, machines))))
    if floors:
        display(Markdown("One small configuration run in several fresh processes per thread count: `floor %` is how "
                         "far two single runs of identical settings may land apart by noise alone (99% prediction "
                         "bound of their ratio, the thread counts' spreads pooled)."))
        display(show.table(noise_floor_table(floors), text=True))


def metric_figures(df: pd.DataFrame, figures_dir: str) -> None:
    """Throughput, latency, memory above baseline and accuracy per model and device."""
    metrics = ("train_samples_per_s", "infer_samples_per_s", "latency_ms_p50", style.MEMORY_METRIC, "test_accuracy")
    figures = [charts.metric_bars(df, m, figures_dir) for m in metrics]
    if any(f is not None for f in figures):
        show.heading("Throughput, latency, memory and accuracy")
        show.figures(figures)
        if said := caveats.accuracy_sentence(df):
            display(Markdown(said))


def speedups(df: pd.DataFrame, reader: SampleReader | None = None) -> None:
    """Cross-device training speedups, only where there are two devices or more."""
    if selection.devices_count(df) < 2:
        return
    show.heading("Cross-device speedup")
    display(Markdown(f"How much faster the row's device trains than the column's. {INTERVAL_NOTE}"))
    display(show.table(comparisons.speedup_matrix(df, reader=reader).reset_index(), text=True))


def variants(df: pd.DataFrame, figures_dir: str | None = None, reader: SampleReader | None = None) -> None:
    """Each optimization variant against its device's default: speedups with intervals, accuracy and memory, and
    under them each comparison split layer by layer where its rows have per-layer tables (``explain``)."""
    reader = reader or SampleFiles()
    table = comparisons.variant_speedups(df, reader)
    if table.empty:
        return
    show.heading("Optimization variants")
    display(Markdown(f"Each variant against its device's default (`baseline`; > 1: better). {INTERVAL_NOTE}"))
    table = table[table["variant"] != table["baseline"]]
    display(show.table(_drop_empty(table[[c for c in VARIANT_COLUMNS if c in table]])))
    variant_explanations(df, table, figures_dir, reader)
    quant = selection.ok_rows(df)
    if "quantization" in quant and (quant["quantization"] != "none").any():
        cols = [c for c in ("machine", "hardware", "model", "variant", "fp32_test_accuracy", "test_accuracy",
                            "accuracy_drop_pts", "model_size_bytes", "fp32_model_size_bytes", "weights_trained_by",
                            "compile_s") if c in quant]
        display(Markdown("Quantized variants evaluate the weights their fp32 baseline trained (`weights_trained_by`): "
                         "no training figures of their own, and the accuracy drop is on the very same weights."))
        display(show.table(_drop_empty(quant[quant["quantization"] != "none"][cols])))


def device_scaling(df: pd.DataFrame, figures_dir: str, reader: SampleReader | None = None) -> None:
    """Data-parallel scaling, only where the study ran several process counts."""
    table = comparisons.scaling_table(df, "world_size", reader)
    if table.empty:
        return
    show.heading("Data-parallel scaling")
    show.figure(charts.scaling(table, "world_size", figures_dir))
    display(Markdown(f"Speedup against one process. {INTERVAL_NOTE}"))
    display(show.table(_scaling_shown(table)))


def repeats(df: pd.DataFrame) -> None:
    """Median over seeds with its 95% interval per configuration, only where a configuration ran several seeds."""
    agg = summaries.repeat_summary(df)
    if agg.empty or (agg["n"] < 2).all():
        return
    show.heading("Repeats")
    display(Markdown("Median over the seeds of each configuration, with its 95% bootstrap interval; `noisy`: the "
                     f"seeds' IQR is over {NOISY_IQR_OVER_MEDIAN:.0%} of their median."))
    display(show.table(summaries.repeat_cells(agg), text=True))
    show.collapsed_table("Every statistic over the seeds (IQR, min, max)", agg)


def rooflines(df: pd.DataFrame, ceilings: list[Ceilings], figures_dir: str) -> None:
    """Each device's roofline with its workloads, models across devices, the batch effect, and the roof check
    (``ceilings``: the roofs ``load`` placed every row under, ``readback.roofs.page_ceilings``)."""
    if not ceilings or selection.ok_rows(df).empty:
        return
    show.heading("Rooflines")
    display(Markdown("Roofs measured on the machine that ran the study (per dtype the fastest product measured: a "
                     "large matmul, a 3x3, a 1x1 or a depthwise convolution, on CUDA not a 3x3; the higher of a large "
                     "copy and a DRAM-sized add, bytes read + written), drawn only for the dtypes the workloads ran "
                     "in; datasheet roofs thin and grey where the device is known. Circles: training; triangles: "
                     "inference. Per layer, each kind of operation meets its own roof (the measured ceilings table)."))
    figures = (roofline_figures.device_rooflines(df, ceilings, figures_dir)
               + roofline_figures.model_rooflines(df, ceilings, figures_dir)
               + [roofline_figures.batch_effect(df, figures_dir)])
    show.figures(figures)
    flagged = summaries.above_roof_rows(df)
    if not flagged.empty:
        display(Markdown(f"**{len(flagged)} point(s) lie above their roof: a measurement error, not a finding.**"))
        display(show.table(_drop_empty(flagged)))
    else:
        display(Markdown("No point lies above its roof."))
    show.collapsed_table("Where every configuration sits under its roof", _drop_empty(summaries.roof_table(df)))
    show.collapsed_table("Measured ceilings (each dtype's peak: the fastest product measured; each layer meets "
                         "its own kind's roof)", pd.DataFrame([
        {"machine": c.machine, "device": c.device, "device_name": c.device_name,
         **{f"peak_{k}_flops_per_s": v for k, v in c.peak_flops_per_s.items()},
         **{f"{kind}_{k}_flops_per_s": v for kind, per in c.kind_flops_per_s.items() for k, v in per.items()},
         "bandwidth_bytes_per_s": c.bandwidth_bytes_per_s,
         **{f"{kind}_{k}_bytes_per_s": v for kind, per in c.kind_bandwidth_bytes_per_s.items()
            for k, v in per.items()},
         "noisy": ", ".join(c.noisy) or None} for c in ceilings]))


def profiles(found_profiles: list[dict[str, Any]], figures_dir: str) -> None:
    """Step-time breakdown of every profiled pair and each pair's top operators, only where there are profiles."""
    if not found_profiles:
        return
    show.heading("Where the time goes")
    display(Markdown("From `torch.profiler` over a few training steps of each profiled pair: the share of the step "
                     "spent loading data and copying memory; on a CPU, in the forward pass, the backward pass and "
                     "the optimizer; on a GPU, in device kernels and in host time beside them."))
    show.figure(profile.profile_breakdowns(found_profiles, figures_dir))
    show.figures([profile.top_operators(p, figures_dir) for p in found_profiles])
    notes = [f"<li><i>{html.escape(str(p['model']))} on {html.escape(str(p['hardware']))}:</i> "
             f"{html.escape(' '.join(map(str, p['notes'])))}</li>" for p in found_profiles if p.get("notes")]
    if notes:
        display(show.collapsible("How the profiler's times were attributed", f"<ul>{''.join(notes)}</ul>"))


def telemetry_timelines(series: list[tuple[pd.Series, pd.DataFrame]], figures_dir: str) -> int:
    """Telemetry time series (each row with its samples) drawn side by side; how many were."""
    return show.figures([telemetry_timeline(
        frame, f"{row['model']} on {row['machine']}:{row['hardware']}, bs{row['batch_size']}, {row['variant']}",
        figures_dir, f"telemetry__{key_of(row)}") for row, frame in series])


def telemetry(df: pd.DataFrame, series: Callable[[pd.DataFrame], list[tuple[pd.Series, pd.DataFrame]]],
              figures_dir: str) -> None:
    """Utilization and energy while training (sampled in the background), and timelines over time (``series``:
    the successful rows' telemetry samples, as ``Results.telemetry_series`` reads them)."""
    good = selection.ok_rows(df)
    if good.empty:
        return
    show.heading("Hardware while it works")
    display(Markdown("Sampled every `telemetry_interval_s` in a background thread while each configuration ran; "
                     "energy from the NVML counter or RAPL where readable."))
    utilization = good[[c for c in UTILIZATION_COLUMNS if c in good and c != "telemetry_missing"]]
    sampled = utilization.drop(columns=[c for c in IDENTITY if c in utilization]).notna().any(axis="columns")
    shown = _drop_empty(utilization[sampled])  # rows that trained (an evaluating variant did not)
    if "hardware" in shown and shown["hardware"].nunique() <= 1:  # one device: said once, not per line
        shown = shown.drop(columns="hardware")
    display(show.table(shown))
    missing = sorted({str(m) for m in good.get("telemetry_missing", pd.Series(dtype=str)).dropna() if str(m).strip()})
    if missing:  # the reasons once under the table, not a wide column repeating them
        display(Markdown("Not sampled: " + "; ".join(missing) + "."))
    if "telemetry_interval_note" in good and (widened := good[good["telemetry_interval_note"].notna()]).size:
        display(Markdown("Sampled less often than asked (`telemetry_interval_s` above), so as not to slow the work:\n\n"
                         + "\n".join(f"- {r.model}, batch {r.batch_size}, {r.variant}: {r.telemetry_interval_note}"
                                      for r in widened.itertuples())))
    energy = _drop_empty(good[[c for c in ENERGY_COLUMNS if c in good]])
    if any(c.endswith("_j_per_sample") for c in energy):
        display(show.table(energy))
    elif "train_energy_unmeasurable" in good:
        reasons = sorted({str(r) for r in good["train_energy_unmeasurable"].dropna()})
        display(Markdown("Energy was not measured: " + ("; ".join(reasons) or "no energy source") + "."))
    if not telemetry_timelines(series(good), figures_dir):
        display(Markdown("*No telemetry time series in these results.*"))


def failures(df: pd.DataFrame) -> None:
    """Configurations that produced no measurement, with why, only where there are some."""
    table = summaries.failures_table(df, df.attrs.get("invalid_rows"))
    if table.empty:
        return
    show.heading("Failed and skipped configurations")
    display(show.table(_drop_empty(table)))


COMPLEXITY_SHOWN = ["model", "batch_size", "params", "macs_per_sample", "flops_per_sample", "train_flops_per_sample",
                    "model_size_bytes", "arithmetic_intensity", "train_arithmetic_intensity"]


def _scaling_shown(table: pd.DataFrame) -> pd.DataFrame:
    """A scaling table as read: the ratio with its interval and verdict in one column, not four."""
    shown = table.drop(columns=["speedup", "ci_low", "ci_high", "verdict", "level", "note"], errors="ignore")
    return _drop_empty(shown.rename(columns={"speedup_text": "speedup [95% interval]"}))


def complexity(df: pd.DataFrame) -> None:
    """Params, MACs, FLOPs, bytes moved and intensity per model, behind a click."""
    table = _drop_empty(summaries.complexity_table(df))
    if table.empty:
        return
    show.heading("Work per model")
    display(Markdown("MACs and FLOPs under their own names (a multiply-accumulate is 2 FLOPs); training FLOPs count "
                     "forward and backward. Bytes moved: weights once per batch plus every layer's input and output "
                     "activations (and gradients in training), so intensity grows with the batch size."))
    display(show.table(table[[c for c in COMPLEXITY_SHOWN if c in table]]))
    show.collapsed_table("Every counted figure (bytes moved, activations, uncounted operators)", table)


def manifests(table: pd.DataFrame) -> None:
    """The environment each row was measured in (``readback.manifests.manifest_table``), behind a click."""
    table = _drop_empty(table)
    if not table.empty:
        show.heading("Environment")
        show.collapsed_table(f"{len(table)} environment manifest(s): versions, CPU, threads, commit", table)


def sweep(df: pd.DataFrame, figures_dir: str, reader: SampleReader | None = None) -> None:
    """Largest stable and best-throughput batch per pair, sweep plots, thread and worker scaling."""
    summary = summaries.sweep_summary(df)
    figures: list[Any] = [charts.batch_sweep(df, figures_dir)]
    show.heading("Batch size, threads and workers")
    if not summary.empty:
        display(show.table(_drop_empty(summary)))
    reader = reader or SampleFiles()  # one for every table: a run's samples read once
    for knob in ("threads", "num_workers", "world_size"):
        table = comparisons.scaling_table(df, knob, reader)
        if not table.empty:
            show.heading(f"Scaling with {knob}", 3)
            display(Markdown(f"Speedup against the smallest {knob}. {INTERVAL_NOTE}"))
            display(show.table(_scaling_shown(table)))
            figures.append(charts.scaling(table, knob, figures_dir))
    if not sum(show.figure(fig) for fig in figures):
        display(Markdown("*Nothing was swept: give several batch sizes, or `sweep: {threads: [...]}`.*"))
