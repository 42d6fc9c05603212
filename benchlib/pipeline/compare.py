"""``benchlib.compare``: models or variants side by side, each against a baseline, with diff's verdicts.

Every side is measured by :func:`benchlib.benchmark` into one results folder; each side's rows are then
compared with the baseline's at the same hardware and batch size (and variant, when models are compared)
by the same judgement ``benchlib diff`` and the summary use (``report.evidence.samples.compare_rows``): a ratio
with its interval, a verdict and the level it rests on. Sides measured in this one process are compared
on their steps, which the verdict says (level ``steps``); a claim that survives a second run needs fresh
processes: a study with ``repeats`` (``benchlib compare PARAMS.yaml``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..env.manifest import machine_name
from ..errors import ConfigError
from ..nets.user_models import ModelSource
from ..report.evidence.diff import DEFAULT_METRICS
from ..report.evidence.samples import METRICS, compare_rows
from ..report.evidence.selection import column_median
from ..report.findings.explain import explanation_lines
from ..report.readback.samples import SampleFiles
from ..report.tables.explain import PART_COLUMNS
from ..report.tables.explain_rows import explain_sides
from ..run.record import pair_configs
from ..store.layout import ResultsLayout
from .own_model import BenchmarkPlan, model_reference, plan_benchmark, run_benchmark

RUN_ARGUMENTS = ("resume", "progress")  # benchmark()'s arguments about measuring, not about what is measured
# the verdict and its interval first, then the figures it is made of, then how it was judged
COLUMNS = ("side", "baseline", "metric", "ratio", "ci_low", "ci_high", "verdict", "hardware", "batch_size",
           "side_value", "baseline_value", "level", "note", "reach", "family")


def compare(models: ModelSource | str | Sequence[ModelSource | str], *, variants: Sequence[str] = (),
            metrics: Sequence[str] = DEFAULT_METRICS, results_dir: str | Path = "results/adhoc",
            explain: bool = False, layer_steps: int = 20, **benchmark_args: Any) -> pd.DataFrame:
    """Several models (the first is the baseline), or one model under several ``variants`` (the first is the
    baseline), each measured by ``benchmark`` with ``benchmark_args``; one row per side, hardware, batch size
    and metric: ``ratio`` > 1 means the side is better than the baseline (a metric neither side measured, such
    as CUDA memory on a CPU, is left out). Every side is admitted before the first is measured.

    ``explain``: also measure each configuration layer by layer (``benchlib layers``, ``layer_steps`` profiled
    steps) and return instead each side's difference from the baseline split into parts (``explained``), the
    table above under ``.attrs["comparison"]``."""
    listed: list[ModelSource | str] = list(models) if isinstance(models, (list, tuple)) else [models]  # type: ignore[list-item]
    if bad := [m for m in metrics if m not in METRICS]:
        raise ConfigError(f"compare: metrics {', '.join(bad)}; allowed: {', '.join(METRICS)}")
    if len(listed) < 2 and len(variants) < 2:
        raise ConfigError("compare: one model and fewer than two variants; allowed: two or more models, or one "
                          "model with two or more variants (the first is the baseline)")
    if explain and layer_steps < 1:
        raise ConfigError(f"compare: layer_steps {layer_steps}; allowed: an integer >= 1")
    if len(listed) > 1 and variants:
        raise ConfigError("compare: several models and variants at once; allowed: models side by side, or one "
                          "model's variants side by side")
    refs: list[str] = []
    for i, m in enumerate(listed):  # two modules of one class get two names, not one registration
        ref = model_reference(m)
        refs.append(ref if ref not in refs else model_reference(m, f"{ref}-{i + 1}"))
    run_args = {k: benchmark_args.pop(k) for k in RUN_ARGUMENTS if k in benchmark_args}
    plans = [plan_benchmark(ref, variants=variants, **benchmark_args) for ref in refs]  # every side admitted first
    frames = [run_benchmark(plan, results_dir, **run_args) for plan in plans]
    rows = pd.concat(frames, ignore_index=True)
    by = "model" if len(refs) > 1 else "variant"
    baseline = refs[0] if by == "model" else plans[0].variants[0].name  # as listed: the rows come back unordered
    table = judged(rows, by, baseline, metrics)
    if not explain:
        return table
    for plan in plans:
        _measure_layers(plan, rows, results_dir, layer_steps, run_args.get("progress"))
    parts = explained(rows, by, baseline)
    parts.attrs["comparison"] = table
    return parts


def _measure_layers(plan: BenchmarkPlan, rows: pd.DataFrame, results_dir: str | Path, steps: int,
                    progress: Any) -> None:
    """Each measured configuration of ``plan`` that trains, layer by layer (kept where already measured)."""
    from ..run.layers import record_layers

    done = set(rows.loc[rows["status"] == "ok", "run_id"].astype(str))
    layout = ResultsLayout.of(results_dir)
    for cfg in pair_configs(plan.study, plan.device, plan.model, list(plan.batch_sizes), plan.settings,
                            variants=list(plan.variants)):
        if cfg.run_id in done and not cfg.evaluates_only and cfg.settings.knobs.compile == "off" \
                and not layout.layers_path(machine_name(), cfg.run_id).exists():
            record_layers(cfg, results_dir, steps=steps, block=min(5, steps), progress=progress)


def explained(rows: pd.DataFrame, by: str, baseline: str) -> pd.DataFrame:
    """Each value of ``by`` against ``baseline`` at the same hardware and batch size, split into parts: one row
    per side, metric (training step, batch-1 forward) and part (``tables.explain.PART_COLUMNS``), with the
    whole's ``delta_s``, ``coverage`` with its interval, ``explained`` and ``why``; the causes in words under
    ``.attrs["causes"]``."""
    good = rows[rows["status"] == "ok"]
    frames: list[pd.DataFrame] = []
    causes: dict[str, list[str]] = {}
    groups = [(hardware, batch, grp) for (hardware, batch), grp in good.groupby(["hardware", "batch_size"], sort=False)
              if (grp[by] == baseline).any()]
    # each side's training step and batch-1 forward: the comparisons its splits rest on, corrected together
    family = max(1, 2 * sum(grp.loc[grp[by] != baseline, by].nunique() for _, _, grp in groups))
    for hardware, batch, grp in groups:
        base = grp[grp[by] == baseline]
        for side, side_rows in grp[grp[by] != baseline].groupby(by, sort=False):
            label = f"{side} against {baseline} ({hardware}, bs{batch})"
            x = explain_sides(label, base, side_rows, family=family)
            causes[label] = list(x.missing)
            for e in (x.training, x.inference):
                if e is None:
                    continue
                causes[label] += explanation_lines(e)
                whole = {"side": side, "baseline": baseline, "hardware": hardware, "batch_size": batch,
                         "metric": e.metric, "whole_delta_s": e.delta_s, "coverage": e.coverage,
                         "coverage_ci_low": e.coverage_low, "coverage_ci_high": e.coverage_high,
                         "explained": e.explained, "why": e.why}
                frames.append(e.parts.assign(**whole) if not e.parts.empty else pd.DataFrame([whole]))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(PART_COLUMNS))
    for column in PART_COLUMNS:  # a whole that is not explained (its ``why`` says so) has no parts, but the columns
        if column not in out:
            out[column] = None
    front = ["side", "baseline", "hardware", "batch_size", "metric"]
    out = out[[c for c in front if c in out] + [c for c in out.columns if c not in front]]
    out.attrs["causes"] = causes
    return out


def judged(rows: pd.DataFrame, by: str, baseline: str, metrics: Sequence[str]) -> pd.DataFrame:
    """Each value of ``by`` against ``baseline`` at the same hardware and batch size (pure: rows in, table out)."""
    reader = SampleFiles()
    good = rows[rows["status"] == "ok"]
    planned = []
    for (hardware, batch), grp in good.groupby(["hardware", "batch_size"], sort=False):
        base = grp[grp[by] == baseline]
        if base.empty:
            continue
        for side, side_rows in grp[grp[by] != baseline].groupby(by, sort=False):
            for metric in metrics:
                column = METRICS[metric].column
                if math.isnan(column_median(side_rows, column)) and math.isnan(column_median(base, column)):
                    continue  # not measured here (CUDA memory on a CPU)
                planned.append((hardware, batch, side, side_rows, base, metric))
    out: list[Mapping[str, Any]] = []
    for hardware, batch, side, side_rows, base, metric in planned:  # the table's comparisons, corrected together
        c = compare_rows(side_rows, base, metric, reader, family=len(planned))
        known = math.isfinite(c.figure_a) and math.isfinite(c.figure_b)  # the figures its ratio is the quotient of
        out.append({"hardware": hardware, "batch_size": batch, "side": side, "baseline": baseline, "metric": metric,
                    "side_value": c.figure_a if known else column_median(side_rows, METRICS[metric].column),
                    "baseline_value": c.figure_b if known else column_median(base, METRICS[metric].column),
                    "ratio": c.ratio, "ci_low": c.ci_low, "ci_high": c.ci_high, "verdict": c.verdict,
                    "level": c.level, "note": c.note, "reach": c.reach(), "family": len(planned)})
    return pd.DataFrame(out, columns=list(COLUMNS))
