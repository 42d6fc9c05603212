"""What the pair and profile pages show: their tables in human units, and the files they link.

The pair notebook (``benchmark.ipynb``) and the profile notebook (``profile.ipynb``) each call these, so
their pages read like the summary: units in headers or cells, three significant digits, an en dash for
what is missing, and no column that cannot hold a value on the device that ran (device times on a CPU).
"""
from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import HTML, Markdown, display

from ... import log as messages
from ...instruments.profiler import REGIONS, ProfileResult
from ...nets.flops import layer_table as count_layers
from ...nets.models import build_model
from ...store.layout import ReportLayout
from ..words import fmt

BREAKDOWN_MEANINGS = {
    "data_loading": "waiting for the next batch (data_wait)",
    "memcpy": "copies to the device (h2d_copy) and device-side copies",
    "compute": "kernels on the GPU",
    "forward": "the forward pass and the loss, on the host (the CPU's compute)",
    "backward": "the backward pass, on the host",
    "optimizer": "the optimizer step (and zeroing the gradients), on the host",
    "cpu_exec": "host time of forward, backward and the optimizer step not hidden under kernels (GPU runs only)",
    "other": "the rest of the step: Python, the profiler's own bookkeeping",
}


TEXT_COLUMNS = ("category", "what it covers", "operator", "layer", "type", "status", "interfered")


def _styled(df: pd.DataFrame) -> Any:
    """Text cells already formatted, without the index; words left-aligned, figures right-aligned."""
    words = [c for c in df.columns if c in TEXT_COLUMNS]
    styler = df.style.hide(axis="index")
    if words:
        styler = styler.set_properties(subset=words, **{"text-align": "left"})
    return styler


def _table(df: pd.DataFrame, empty_message: str) -> Any:
    return Markdown(f"*{empty_message}*") if df.empty else _styled(df)


def _us(value: Any) -> str:
    x = fmt._number(value)
    return fmt.MISSING if x is None else fmt.seconds_text(x / 1e6)


def _formatted(df: pd.DataFrame, columns: Mapping[str, tuple[str, Callable[[Any], str]]]) -> pd.DataFrame:
    """``df``'s ``columns`` renamed to their headers and formatted cell by cell."""
    return pd.DataFrame({header: [show(v) for v in df[name]] for name, (header, show) in columns.items()
                         if name in df})


def _device_timeline(result: ProfileResult, hardware: str) -> bool:
    return hardware.startswith("cuda") or not result.top_by_self_device.empty


def breakdown(result: ProfileResult, *, device: bool = True) -> pd.DataFrame:
    """The step-time breakdown per profiled step, with the share and what each category covers.

    Each kind of run has its own categories (a CPU's host time split into forward, backward and optimizer,
    a GPU's into kernels and the host time beside them); a profile saved before the split keeps its own.
    """
    steps = max(1, len(result.steps))
    b = result.breakdown if device else result.breakdown[result.breakdown["category"] != "cpu_exec"]
    return pd.DataFrame({
        "category": b["category"],
        "time per step": [_us(t / steps) for t in b["time_us"]],
        "share": [fmt.percent_text(f) for f in b["fraction"]],
        "what it covers": [BREAKDOWN_MEANINGS.get(c, "") for c in b["category"]],
    })


def operators(table: pd.DataFrame, *, device: bool) -> pd.DataFrame:
    """Top operators in human units; device columns only where a device timeline was recorded."""
    columns: dict[str, tuple[str, Callable[[Any], str]]] = {
        "name": ("operator", str), "calls": ("calls", fmt.value_text),
        "self_cpu_time_us": ("self CPU time", _us), "cpu_time_total_us": ("CPU time with children", _us),
        "self_cpu_memory_usage_bytes": ("self CPU memory", fmt.bytes_text),
    }
    if device:
        columns.update({"self_device_time_us": ("self device time", _us),
                        "device_time_total_us": ("device time with children", _us),
                        "self_device_memory_usage_bytes": ("self device memory", fmt.bytes_text)})
    return _formatted(table, columns)


def steps(table: pd.DataFrame, *, device: bool) -> pd.DataFrame:
    """Each profiled step's wall time and the host time of its labelled regions."""
    columns: dict[str, tuple[str, Callable[[Any], str]]] = {"step": ("step", fmt.value_text),
                                                            "step_time_us": ("step time", _us)}
    for region in REGIONS:
        if region != "h2d_copy" or device:  # the copy to a CPU is a no-op
            columns[f"{region}_us"] = (region, _us)
    return _formatted(table, columns)


def _shown_path(path: Path, results_dir: str | Path | None = None) -> str:
    """A path as a reader can use it: relative to the results root (the folder that holds ``results_dir``)
    where it lies under it, else to the working folder where it lies under that; a published page names no
    folder of the machine that made it."""
    resolved = Path(path).resolve()
    for root in ([Path(results_dir).resolve().parent] if results_dir is not None else []) + [Path.cwd()]:
        if resolved.is_relative_to(root):
            return str(resolved.relative_to(root))
    return str(path)


def profile_page(result: ProfileResult, out_dir: str | Path, hardware: str, model: str,
                 results_dir: str | Path | None = None) -> None:
    """A pair's profile: breakdown, top operators, per-step regions, the trace and the notes; its files named
    relative to the results root (the folder holding ``results_dir``)."""
    device = _device_timeline(result, hardware)
    n = len(result.steps)
    display(Markdown(f"### Step-time breakdown\nWall time of {n} profiled training step(s), split by what ran "
                     "(each instant counted once, in the order of the table)."))
    display(_table(breakdown(result, device=device), "no profiled step"))
    display(Markdown(f"### Top operators by self CPU time\nTotals over the {n} profiled step(s); *self* leaves out "
                     "the operators each one called. Self memory is what an operator allocated less what it freed "
                     "(below 0: it freed memory allocated earlier)." + ("" if device else " No device timeline on "
                                                                       f"{hardware}: device columns are left out.")))
    display(_table(operators(result.top_by_self_cpu, device=device), "no operator recorded"))
    if device:
        display(Markdown("### Top operators by self device time"))
        display(_table(operators(result.top_by_self_device, device=True), "the profiler recorded no device time"))
    display(Markdown("### Per step\nHost time of each labelled region of the training step."))
    display(_table(steps(result.steps, device=device), "no profiled step"))
    trace = ReportLayout(Path(".")).profile_trace(hardware, model).name
    notes = "".join(f"\n- {note}" for note in result.notes)
    display(Markdown(
        f"### Files\n- [Trace of the profiled steps]({trace}) (gzipped Chrome trace JSON: open it in "
        "[ui.perfetto.dev](https://ui.perfetto.dev) or chrome://tracing)\n"
        f"- TensorBoard, from the results root: `tensorboard --logdir "
        f"{_shown_path(result.tensorboard_dir, results_dir)}` (torch-tb-profiler plugin)\n"
        f"- Tables as CSV, under the results root: `{_shown_path(Path(out_dir), results_dir)}`"
        + (f"\n\n### Notes{notes}" if notes else "")))


def plain_warnings(results_dir: str | Path | None = None) -> None:
    """Warnings in this kernel as benchlib's one-line warnings, without the source line that raised them, and
    paths under the results root (the folder holding ``results_dir``) relative to it (``log.warnings_as_lines``)."""
    messages.warnings_as_lines(*([Path(results_dir).parent] if results_dir is not None else []))


def _with_spread(median: Any, iqr: Any, show: Callable[[Any], str]) -> str:
    text = show(median)
    return text if fmt._number(iqr) is None or text == fmt.MISSING else f"{text} (IQR {show(iqr)})"


def _interference(row: Mapping[str, Any]) -> str:
    if row.get("interfered") is True:
        return f"yes: {fmt.significant(row.get('interference_cpu_pct'))}% of the CPUs used by others"
    if row.get("machine_drifted") is True:  # nobody else, but the machine's own speed moved under the run
        return f"no; the machine's speed drifted {fmt.significant(row.get('train_step_drift_pct'))}%"
    return "no" if row.get("interfered") is False else fmt.MISSING


def pair_results(rows: Sequence[Mapping[str, Any]]) -> Any:
    """One line per configuration of the pair with its headline figures, in human units."""
    if not rows:
        return Markdown("*No configuration ran.*")
    varies = {k: len({str(r.get(k)) for r in rows}) > 1 for k in ("variant", "seed", "precision")}
    table = []
    for r in rows:
        line: dict[str, str] = {"batch": fmt.value_text(r.get("batch_size"))}
        line.update({k: fmt.value_text(r.get(k)) for k in ("variant", "precision", "seed") if varies[k]})
        ok = r.get("status") == "ok"
        line["status"] = str(r.get("status")) if ok else f"{r.get('status')}: {r.get('error') or 'no reason given'}"
        line.update({
            "training": fmt.samples_per_s_text(r.get("train_samples_per_s")),
            "step time": _with_spread(r.get("train_step_s_median"), r.get("train_step_s_iqr"), fmt.seconds_text),
            "epoch": fmt.seconds_text(r.get("epoch_s")),
            "test accuracy": fmt.accuracy_text(r.get("test_accuracy"), r.get("test_accuracy_ci_low"),
                                               r.get("test_accuracy_ci_high")),
            "latency, batch 1 (p50 / p99)": " / ".join(
                fmt.percentile_text(r.get(f"latency_ms_p{q}"), r.get(f"latency_ms_p{q}_status"),
                                    low=r.get(f"latency_ms_p{q}_ci_low"), high=r.get(f"latency_ms_p{q}_ci_high"))
                for q in (50, 99)),
            "inference": fmt.samples_per_s_text(r.get("infer_samples_per_s")),
            "peak memory, whole process (CUDA allocated on a GPU, RSS elsewhere)": fmt.bytes_text(
                r.get("peak_cuda_allocated_bytes") if str(r.get("hardware", "")).startswith("cuda")
                else r.get("peak_rss_bytes")),
            "interfered": _interference(r),
        })
        table.append(line)
    display(Markdown("Step time: median of the timed steps with its interquartile range; test accuracy with its "
                     "95% interval over the test set's images (the sampling of the test set; another seed moves it "
                     "further); a latency percentile with its 95% interval over the run's passes, or, without the "
                     "samples or the narrow interval it needs, "
                     f"{fmt.MISSING} with why; inference: samples per "
                     "second at the working batch; peak memory: the whole process's peak (the summary's is the "
                     "peak above the pre-model baseline, what the model and its training took). Every column of "
                     "these rows is in `results.csv` ([columns explained](../docs/columns.md)); the summary compares "
                     "them with intervals."))
    return _table(pd.DataFrame(table), "no configuration ran")


LAYER_COLUMNS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "module": ("layer", str), "type": ("type", str),
    "output_shape": ("output shape", lambda v: " x ".join(map(str, v)) if len(v) else fmt.MISSING),
    "calls": ("calls", fmt.value_text), "macs": ("MACs", fmt.count_text),
    "flops": ("FLOPs", lambda v: fmt.flops_text(v, per_s=False)), "params": ("parameters", fmt.count_text),
    "activation_bytes": ("activations in + out", fmt.bytes_text),
}


def layer_table(model: str, image_size: int, rows: Sequence[Mapping[str, Any]]) -> Any:
    """Per-layer MACs, FLOPs, parameters and activation bytes of the pair's model, for one sample."""
    num_classes = next((r["num_classes"] for r in rows if r.get("num_classes")), None)
    if num_classes is None:
        return Markdown("*No configuration of this pair ran: no layer table.*")
    table = count_layers(build_model(model, int(num_classes)), image_size)
    totals = (f"{len(table)} layers, {fmt.count_text(table['macs'].sum())} MACs, "
              f"{fmt.count_text(table['params'].sum())} parameters")
    display(Markdown(
        f"One sample of {image_size} x {image_size} px. MACs (fvcore) and FLOPs (torch's FlopCounterMode) count "
        "the multiply-accumulates of convolutions and linear layers only, so FLOPs are twice the MACs in every "
        "row. Normalization, activation and pooling layers do element-wise work that neither counts: they show 0 "
        "here, and the model's total of that work is `non_mac_ops_per_sample` in the results. Additions and "
        "concatenations done between layers belong to no row."))
    shown = _styled(_formatted(table, LAYER_COLUMNS)).to_html()
    return HTML(f"<details><summary>Every layer ({html.escape(totals)})</summary>{shown}</details>")
