"""What the pair, profile and tune notebooks show: thin wrappers that turn tables and figures into output.

Every notebook cell calls one function here (the summary and sweep notebooks: ``summary_views``), so no
logic lives only in a notebook.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from IPython.display import Image, Markdown, display

from ..instruments.profiler import ProfileResult, format_breakdown
from ..nets.flops import layer_table as count_layers
from ..nets.models import build_model
from ..store.layout import ResultsLayout
from ..store.rows import read_samples
from . import plots
from . import tables as report
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


def pair_rows(rows: Sequence[Mapping[str, Any]]) -> Any:
    return _show(report.pair_table(pd.DataFrame(rows)), "no configuration ran")


def step_time_figures(results_dir: str, rows: Sequence[Mapping[str, Any]], figures_dir: str) -> None:
    figures = Path(figures_dir)
    for row in rows:
        if row.get("status") != "ok":
            continue
        _show_figure(plots.step_time_distribution(read_samples(Path(results_dir), row), row["run_id"], figures,
                                                  f"steps__{row['machine']}__{row['run_id']}"))


def layer_table(model: str, image_size: int, rows: Sequence[Mapping[str, Any]]) -> Any:
    """Per-layer MACs, FLOPs, params and activation bytes of the pair's model (batch 1)."""
    num_classes = next((r["num_classes"] for r in rows if r.get("num_classes")), None)
    if num_classes is None:
        return Markdown("*No configuration of this pair ran: no layer table.*")
    return _show(count_layers(build_model(model, int(num_classes)), image_size), "")


def profile_result(result: ProfileResult, out_dir: str) -> None:
    """A pair's profile: breakdown, top operators by self CPU and device time, per-step regions, files."""
    display(Markdown(f"```\n{format_breakdown(result.breakdown)}\n```"))
    display(_show(result.top_by_self_cpu, "no operators recorded"))
    display(_show(result.top_by_self_device, "no device time: CPU-only run"))
    display(_show(result.steps, "no profiled steps"))
    display(Markdown(f"Trace (Chrome/Perfetto): `{result.trace_path}`. TensorBoard: "
                     f"`tensorboard --logdir {result.tensorboard_dir}` (torch-tb-profiler plugin). "
                     + " ".join(result.notes)))


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
