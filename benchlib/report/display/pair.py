"""What the pair, profile and tune notebooks show: thin wrappers that turn tables and figures into output.

Every notebook cell calls one function here (the summary and sweep notebooks: ``summary``), so no
logic lives only in a notebook.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from IPython.display import Image, Markdown, display

from ...store.layout import ResultsLayout
from ..figures import charts
from ..readback.samples import SampleFiles
from ..tables import summaries
from . import show


def step_time_figures(results_dir: str, rows: Sequence[Mapping[str, Any]], figures_dir: str) -> None:
    figures, reader = Path(figures_dir), SampleFiles()
    for row in rows:
        if row.get("status") != "ok":
            continue
        show.figure(charts.step_time_distribution(reader({**row, "results_dir": results_dir}), row["run_id"], figures,
                                                  f"steps__{row['machine']}__{row['run_id']}"))


def tuning(results_dir: str, study_name: str, figures_dir: str) -> None:
    """A pair's tuning study: every trial, the best against the default trial, and Optuna's figures."""
    from ..readback.tuning import study_frame, tuning_figures

    frame = study_frame(results_dir, study_name)
    states = frame["state"].value_counts().to_dict() if not frame.empty else {}
    counts = ", ".join(f"{n} {state.lower()}" for state, n in states.items()) or "no trials"
    display(Markdown(f"Study `{study_name}` in `{ResultsLayout.of(results_dir).tuning_storage}`: {len(frame)} "
                     f"trial(s) ({counts}). Best exported to `{ResultsLayout.of(results_dir).tuning_dir}`."))
    display(Markdown("The best trial against the default trial: one short trial each, so the ratios have no "
                     "interval (a trial's figure is a single run). Measure the tuned variant (`cpu-tuned`/"
                     "`gpu-tuned` in `benchlib compare`) for the same comparison with its interval and verdict."))
    display(show.table(summaries.best_against_default(frame), "no completed default or best trial to compare"))
    display(show.table(frame.drop(columns=["params"], errors="ignore"), "no trials"))
    for path in tuning_figures(results_dir, study_name, Path(figures_dir)):
        display(Image(filename=str(path)))
