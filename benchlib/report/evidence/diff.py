"""``benchlib diff A B``: two results folders compared configuration by configuration, with intervals.

A is the reference (the last commit, the old machine, the old library), B the candidate. Configurations
are matched on the settings that identify them: hardware, processes and every run setting but the seed,
as recorded in each row's ``settings_json`` (settings only one side knows, e.g. one a newer benchlib
added, are left out of the match). Rows of several seeds of one configuration pool their samples. Each
metric is compared from the raw samples where the rows keep them and across rows where a row holds one
figure. ``ratio`` > 1 means B is better than A (faster, smaller, more accurate). A configuration found on
one side only is listed, not dropped.

The unit is the run (a fresh process): with two or more runs a side the runs are compared (level
``runs``); with one run a side a difference is claimed only beyond the machine's measured noise floor
(level ``floor``, ``benchlib calibrate``), else the verdict is ``inconclusive`` with what would settle it.
A regression gate (``regressions``) trusts only the runs and floor levels.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ...spec.settings import DIGEST_AND_SEED
from ...store.identity import settings_of
from ..readback.folders import folder_floors, folder_rows
from ..readback.samples import SampleFiles
from ..words.sentences import ratio_interval
from .floors import floor_sentence
from .samples import METRICS, NOISE_FLAGS, compare_rows, flagged
from .selection import column_median
from .stats import ALPHA, PRACTICAL_THRESHOLD, WORSE, verdict_rule

DEFAULT_METRICS = ("train_samples_per_s", "train_step_s", "infer_samples_per_s", "latency_ms_p50",
                   "batch_latency_ms_p50", "peak_rss_bytes", "peak_cuda_allocated_bytes",
                   "train_energy_j_per_sample", "test_accuracy")
COLUMNS = ("configuration", "metric", "a", "b", "ratio", "ci_low", "ci_high", "p_value", "verdict", "n_a", "n_b",
           "runs_a", "runs_b", "level", "test", "note", "mdc", "family", "reach", "a_noisy", "b_noisy",
           "a_interfered", "b_interfered", "a_drifted", "b_drifted")
GATED_LEVELS = frozenset({"runs", "floor"})  # what a regression gate trusts: never steps alone


def _settings(row: pd.Series) -> dict[str, Any]:
    return settings_of(row.get("settings_json"))


def _keys(rows: pd.DataFrame, shared: Iterable[str], ignored: Iterable[str] = ()) -> pd.Series:
    names = sorted(set(shared) - {"seed"})

    def key(row: pd.Series) -> str:
        settings = _settings(row)
        ident = {"hardware": row["hardware"], "world_size": row.get("world_size"), "model": row["model"],
                 "batch_size": row["batch_size"], **{n: settings.get(n) for n in names}}
        for name in set(ident) & set(ignored):
            del ident[name]
        return json.dumps(ident, sort_keys=True, default=str)

    return rows.apply(key, axis=1) if not rows.empty else pd.Series(dtype=str)


def digest_of(key: str) -> str:
    """Six hex digits telling apart configurations whose labels coincide (they differ in another setting)."""
    return hashlib.sha256(key.encode()).hexdigest()[:6]


def _label(run_id: str) -> str:
    """The run id less its settings digest and seed: readable, and the same on both sides."""
    return DIGEST_AND_SEED.sub(r"\1", run_id)


def _ok(folder: Path) -> pd.DataFrame:
    rows = folder_rows(folder)
    return rows[rows["status"] == "ok"].reset_index(drop=True)


def diff(a: Path, b: Path, metrics: Sequence[str] = DEFAULT_METRICS,
         threshold: float = PRACTICAL_THRESHOLD, ignore: Sequence[str] = ()) -> pd.DataFrame:
    """One row per configuration and metric: A's and B's figures and B against A with an interval and a verdict.

    ``ignore``: settings left out of the match, to compare what differs in them (``threads``: one thread
    in A against two in B). A metric neither side measured for a configuration (a CPU run has no CUDA
    memory) is left out.
    """
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; allowed: {', '.join(METRICS)}")
    reader = SampleFiles()
    planned: list[tuple[str, str, pd.DataFrame, pd.DataFrame, float, float]] = []
    for label, side_a, side_b in paired(a, b, ignore):
        for name in metrics:
            va, vb = column_median(side_a, METRICS[name].column), column_median(side_b, METRICS[name].column)
            if side_a.empty or side_b.empty or not (math.isnan(va) and math.isnan(vb)):
                planned.append((label, name, side_a, side_b, va, vb))
    family = sum(1 for _, _, side_a, side_b, _, _ in planned if not side_a.empty and not side_b.empty)
    out: list[dict[str, Any]] = []
    for label, name, side_a, side_b, va, vb in planned:
        record: dict[str, Any] = {"configuration": label, "metric": name, "a": va, "b": vb, "n_a": len(side_a),
                                  "n_b": len(side_b), "runs_a": len(side_a), "runs_b": len(side_b)}
        if side_a.empty or side_b.empty:
            record["verdict"] = "only in B" if side_a.empty else "only in A"
        else:
            c = compare_rows(side_b, side_a, METRICS[name], reader, threshold=threshold, family=family)
            record.update(c.as_dict())
            record.update(reach=c.reach())
            if math.isfinite(c.figure_a) and math.isfinite(c.figure_b):  # the figures its ratio is made of
                record.update(a=c.figure_b, b=c.figure_a)
        record.update(a_noisy=flagged(side_a, NOISE_FLAGS), b_noisy=flagged(side_b, NOISE_FLAGS),
                      a_interfered=flagged(side_a, ("interfered",)), b_interfered=flagged(side_b, ("interfered",)),
                      a_drifted=flagged(side_a, ("machine_drifted",)), b_drifted=flagged(side_b, ("machine_drifted",)))
        out.append(record)
    return pd.DataFrame(out, columns=list(COLUMNS))


def paired(a: Path, b: Path, ignore: Sequence[str] = ()) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """Each configuration's label with A's and B's rows (one side may be empty), matched as ``diff`` matches."""
    rows_a, rows_b = _ok(a), _ok(b)
    settings_a = [set(_settings(r)) for _, r in rows_a.iterrows()]
    settings_b = [set(_settings(r)) for _, r in rows_b.iterrows()]
    shared = set.intersection(*settings_a, *settings_b) if settings_a and settings_b else set()
    shared -= set(ignore)
    rows_a = rows_a.assign(_key=_keys(rows_a, shared, ignore), _label=rows_a["run_id"].astype(str).map(_label))
    rows_b = rows_b.assign(_key=_keys(rows_b, shared, ignore), _label=rows_b["run_id"].astype(str).map(_label))
    keys = sorted(set(rows_a["_key"]) | set(rows_b["_key"]))
    labels = {k: pd.concat([rows_a, rows_b]).loc[lambda d, k=k: d["_key"] == k, "_label"].iloc[0] for k in keys}
    ambiguous = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    return [(labels[key] + (f"#{digest_of(key)}" if labels[key] in ambiguous else ""),
             rows_a[rows_a["_key"] == key], rows_b[rows_b["_key"] == key]) for key in keys]


def settings_apart(a: Path, b: Path, ignore: Sequence[str] = ()) -> str | None:
    """Where A and B share no configuration, the settings that keep them apart and the ``--ignore`` that pairs
    them: "threads differ (1 against 2): --ignore threads pairs them"; None where some pair, or nothing tells
    them apart (other models, other batch sizes: nothing to ignore)."""
    pairs = paired(a, b, ignore)
    if not pairs or any(not side_a.empty and not side_b.empty for _, side_a, side_b in pairs):
        return None
    rows_a, rows_b = _ok(a), _ok(b)

    def values(rows: pd.DataFrame, name: str) -> set[str]:
        found = rows[name] if name in ("hardware", "world_size") else rows.apply(lambda r: _settings(r).get(name),
                                                                                  axis=1)
        return {json.dumps(v, default=str) for v in found}

    names = sorted(({k for _, r in rows_a.iterrows() for k in _settings(r)}
                    & {k for _, r in rows_b.iterrows() for k in _settings(r)}) - {"seed"} - set(ignore))
    apart = [(n, values(rows_a, n), values(rows_b, n)) for n in ("hardware", "world_size", *names)
             if n not in ignore]
    apart = [(n, va, vb) for n, va, vb in apart if va and vb and not va & vb]
    if not apart:
        return None
    said = ", ".join(f"{n} {'differ' if n.endswith('s') else 'differs'} ({'/'.join(sorted(va))} against "
                     f"{'/'.join(sorted(vb))})" for n, va, vb in apart)
    return f"{said.replace(chr(34), '')}: {' '.join(f'--ignore {n}' for n, _, _ in apart)} pairs them"


def regressions(table: pd.DataFrame, percent: float) -> pd.DataFrame:
    """B worse than A by more than ``percent`` with an interval that excludes 1, at a level that covers the
    machine's run-to-run noise (runs or floor): what CI gates on."""
    ratio = pd.to_numeric(table["ratio"], errors="coerce")
    high = pd.to_numeric(table["ci_high"], errors="coerce")
    bad = (table["verdict"].isin(sorted(WORSE)) & (ratio < 1 - percent / 100) & (high < 1)
           & table["level"].isin(sorted(GATED_LEVELS)))
    return table[bad].reset_index(drop=True)


def table_family(table: pd.DataFrame) -> int:
    """The comparisons a table's intervals were corrected for (its ``family`` column; 1 without one): what an
    explanation of its rows is corrected for too."""
    if "family" not in table or not table["family"].notna().any():
        return 1
    return max(1, int(pd.to_numeric(table["family"], errors="coerce").max()))


def legend(table: pd.DataFrame, threshold: float = PRACTICAL_THRESHOLD) -> str:
    """How to read a diff table, with the procedure and the table's own family size."""
    family = table_family(table)
    return (f"ratio > 1 means B is better (faster, smaller, more accurate). Each interval is Student's t on the "
            f"logs of the runs' figures (a run: one fresh process; the spread pooled with the machine's noise floor "
            f"where one is measured), at {1 - ALPHA / family:.2%} confidence: {family} comparison(s) in this table, "
            f"Bonferroni, so identical sides make any claim in at most {ALPHA:.0%} of tables. Its p is the same t "
            f"(adjusted). {verdict_rule(threshold)}. can tell = the smallest change each comparison catches 80% "
            "of the time. "
            "level = what the verdict rests on: runs (two or more a side), floor (one run a side, with the noise "
            "floor's spread), steps (one process's steps), test set (accuracy of one training a side)")


def floor_lines(a: Path, b: Path, table: pd.DataFrame | None = None) -> list[str]:
    """What each side's noise floor lets a single-run comparison claim, one line per machine and device; a side
    without one is named only where the table has a comparison of one run a side."""
    single = table is None or table.empty or bool(
        (pd.to_numeric(table["runs_a"], errors="coerce").lt(2) | pd.to_numeric(table["runs_b"], errors="coerce").lt(2))
        .any())
    lines = []
    for side, folder in (("A", a), ("B", b)):
        floors = folder_floors(folder)
        if not floors and not single:
            continue
        if not floors:
            lines.append(f"{side}: no noise floor measured, so comparisons of one run a side are inconclusive "
                         f"(`benchlib calibrate --results-dir {folder}` measures it, about two minutes)")
        lines += [f"{side}: {floor_sentence(f)}" for f in floors]
    return lines


def notes(table: pd.DataFrame) -> list[str]:
    """The distinct reasons behind inconclusive verdicts, each once."""
    if "note" not in table:
        return []
    picked = table.loc[table["verdict"] == "inconclusive", "note"].dropna().astype(str)
    return list(dict.fromkeys(n for n in picked if n))


def as_text(table: pd.DataFrame) -> str:
    """The table for a terminal: figures rounded, the comparison as ``ratio [low, high]``."""
    if table.empty:
        return "no configurations in either folder"
    return str(_shown(table).to_string(index=False))


def as_markdown(table: pd.DataFrame) -> str:
    """The same table as GitHub Markdown, to paste in a pull request (pipes in cells escaped)."""
    if table.empty:
        return "*No configurations in either folder.*"
    shown = _shown(table).astype(str).map(lambda cell: cell.replace("|", "\\|") or " ")
    lines = ["| " + " | ".join(shown.columns) + " |", "|" + "---|" * len(shown.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in shown.itertuples(index=False, name=None)]
    return "\n".join(lines)


def _shown(table: pd.DataFrame) -> pd.DataFrame:
    """The columns a reader compares, formatted: what both the terminal and the Markdown table show."""
    return pd.DataFrame({
        "configuration": table["configuration"], "metric": table["metric"],
        "a": table["a"].map(_short), "b": table["b"].map(_short),
        "B vs A": [_interval(r) for r in table.to_dict("records")], "p": table["p_value"].map(_p),
        "verdict": table["verdict"], "can tell": table.get("mdc", pd.Series(math.nan, index=table.index)).map(_mdc),
        "runs": [f"{a}/{b}" for a, b in zip(table["runs_a"], table["runs_b"])],
        "level": table["level"].astype(object).fillna(""),
        "flags": [_flags(r) for r in table.to_dict("records")],
    })


def _short(value: Any) -> str:
    v = float(value) if value is not None else math.nan
    if math.isnan(v):
        return "–"
    return f"{v:.4g}"


def _p(value: Any) -> str:
    v = float(value) if value is not None else math.nan
    return "–" if math.isnan(v) else f"{v:.3g}"


def _mdc(value: Any) -> str:
    v = float(value) if value is not None else math.nan
    return "–" if math.isnan(v) else f"≥{v:.0%}"


def _interval(r: dict[str, Any]) -> str:
    value = r.get("ratio")
    ratio = math.nan if value is None else float(value)
    if math.isnan(ratio):
        return "–"
    low, high = float(r["ci_low"]), float(r["ci_high"])
    return ratio_interval(ratio, low, high, 3) if not math.isnan(low) else f"{ratio:.3f}x [no interval]"


def _flags(r: dict[str, Any]) -> str:
    marks = [f"{side} {what}" for side in ("a", "b") for what in ("noisy", "interfered", "drifted")
             if r.get(f"{side}_{what}")]
    return ", ".join(marks)
