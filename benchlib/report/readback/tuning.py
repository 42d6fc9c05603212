"""Tuning studies read back for reports: every trial as a table, and Optuna's figures saved as PNG."""
from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from ...errors import missing, one_line
from ...log import ProgressFn, progress_of

try:
    import optuna
    from optuna.trial import TrialState
except ImportError as _exc:
    raise missing("optuna", "tuning (benchlib tune, the tune notebook)") from _exc

from ...store.atomic import atomic_write_bytes, safe_name
from ...store.layout import ResultsLayout
from ...store.tuning_storage import has_studies, open_storage


def _open_study(results_dir: str | Path, study_name: str) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not has_studies(results_dir):
        raise FileNotFoundError(f"no tuning studies in '{results_dir}': "
                                f"{ResultsLayout.of(results_dir).tuning_storage} does not exist")
    return optuna.load_study(study_name=study_name, storage=open_storage(results_dir))


def list_studies(results_dir: str | Path) -> list[str]:
    """Names of the studies stored under ``results_dir`` (none when nothing was tuned there)."""
    if not has_studies(results_dir):
        return []
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return sorted(optuna.get_all_study_names(open_storage(results_dir)))


def _metric_names(study: optuna.Study) -> list[str]:
    names = study.metric_names
    return list(names) if names else [f"value_{i}" for i in range(len(study.directions))]


def study_frame(results_dir: str | Path, study_name: str) -> pd.DataFrame:
    """Every trial of a study as a row: number, state, values, one column per metric, params, duration_s.

    Params come both as a ``params`` dict and flattened to ``params_<name>`` columns; ``status`` and
    ``error`` say why a trial failed.
    """
    study = _open_study(results_dir, study_name)
    metrics = _metric_names(study)
    rows = []
    for t in study.get_trials(deepcopy=False):
        done = t.state == TrialState.COMPLETE and t.values is not None
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "is_default": bool(t.user_attrs.get("default")),
            "values": list(t.values) if done else None,
        }
        for i, m in enumerate(metrics):
            row[m] = t.values[i] if done else None
        last = max(t.intermediate_values) if t.intermediate_values else None
        row["last_reported"] = t.intermediate_values[last] if last is not None else None  # where a pruned trial stopped
        row["params"] = dict(t.params)
        row.update({f"params_{k}": v for k, v in t.params.items()})
        row["epochs_reported"] = len(t.intermediate_values)
        row["duration_s"] = t.duration.total_seconds() if t.duration is not None else None
        row["status"] = t.user_attrs.get("status")
        row["error"] = t.user_attrs.get("error")
        rows.append(row)
    return pd.DataFrame(rows, columns=None if rows else ["number", "state", "values", *metrics, "params", "duration_s"])


def _save_axes(ax: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig = ax.figure if not hasattr(ax, "shape") else ax.flat[0].figure  # some plots return an array of axes
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        buffer = io.BytesIO()  # drawn whole first, then written atomically: a full disk tears no figure
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        atomic_write_bytes(path, buffer.getvalue())
    finally:
        plt.close(fig)
    return path


def tuning_figures(results_dir: str | Path, study_name: str, figures_dir: Path,
                   progress: ProgressFn | None = None) -> list[Path]:
    """Optimization history, parameter importances and (two objectives) the Pareto front, as PNG files.

    A figure the study cannot support yet (too few complete trials, a single parameter) is skipped with
    a reason sent to ``progress``; this never raises for a small study.
    """
    from optuna.visualization import matplotlib as ovm

    say = progress_of(progress)
    study = _open_study(results_dir, study_name)
    metrics = _metric_names(study)
    multi = len(metrics) > 1
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    stem = f"tune__{safe_name(study_name)}"
    out: list[Path] = []
    # Two objectives: history and importances follow the first (accuracy). PED-ANOVA, Optuna's importance
    # evaluator, ranks parameters by how they reach *low* target values, so the maximized target is negated.
    history_kw: dict[str, Any] = {"target_name": metrics[0]}
    importance_kw: dict[str, Any] = {"target_name": metrics[0]}
    if multi:
        history_kw["target"] = lambda t: t.values[0]
        importance_kw.update(target=lambda t: -t.values[0], target_name=f"-{metrics[0]}")

    def attempt(kind: str, draw: Callable[[], Any]) -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                warnings.filterwarnings("ignore", message="PedAnovaImportanceEvaluator computes the importances")
                ax = draw()
            out.append(_save_axes(ax, Path(figures_dir) / f"{stem}__{kind}.png"))
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            say(f"{study_name}: {kind} figure skipped: {one_line(exc)}")

    if not complete:
        say(f"{study_name}: no complete trial yet: no figures")
        return out
    attempt("history", lambda: ovm.plot_optimization_history(study, **history_kw))
    varied = {k for k in {k for t in complete for k in t.params}
              if len({repr(t.params.get(k)) for t in complete}) > 1}
    if len(complete) < 2 or len(varied) < 2:
        say(f"{study_name}: importances figure skipped: needs >= 2 complete trials varying >= 2 parameters "
            f"(has {len(complete)} trial(s), {len(varied)} varied parameter(s))")
    else:
        attempt("importances", lambda: ovm.plot_param_importances(study, **importance_kw))
    if multi:
        attempt("pareto", lambda: ovm.plot_pareto_front(study, target_names=metrics[:2]))
    return out


# ---------------------------------------------------------------- the `tune:` section of a study file
