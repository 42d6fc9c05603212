"""Claims a study's rows support, in words: which device, model or batch size is faster (or more accurate) and
by how much, each with its interval and the evidence it rests on (runs, floor, steps or test set). A claim is
only made where the comparison's verdict makes it: every sentence of comparison is worded by
:func:`claim_sentence` from its verdict, and :func:`unsupported` is the rule a finished sentence is held to (the
key findings withhold one that breaks it). Variants and scaled settings: ``findings.variants``.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..evidence.samples import METRICS, SampleReader, compare_rows
from ..evidence.selection import BASELINE_VARIANTS, column_median, config_key, device_label
from ..evidence.stats import PRACTICAL_THRESHOLD, Comparison, within_threshold
from ..readback.samples import SampleFiles
from ..words import fmt
from ..words.sentences import ratio_interval
from .caveats import measured_rows


def throughput_text(value: float) -> str:
    return f"{fmt.significant(value)} samples/s"


def _where(rows: pd.DataFrame) -> str:
    """'cpu, bs64': where a configuration ran."""
    return f"{rows['device'].iloc[0]}, bs{int(rows['batch_size'].iloc[0])}"


def _baseline(good: pd.DataFrame) -> pd.DataFrame:
    """The rows of each device's default variant where the study has several variants (like with like)."""
    if good.empty or good["variant"].nunique() < 2:
        return good
    base = good[good["variant"].isin(BASELINE_VARIANTS)]
    return base if not base.empty else good


def _best_per(good: pd.DataFrame, key: str, metric: str = "train_samples_per_s",
              higher: bool = True) -> dict[Any, pd.DataFrame]:
    """Per value of ``key``: the rows of its best configuration (every seed of it) by ``metric``."""
    if metric not in good:
        return {}
    rows = good[pd.to_numeric(good[metric], errors="coerce").notna()]
    if rows.empty:
        return {}
    config = config_key(rows["run_id"])
    medians = pd.to_numeric(rows[metric], errors="coerce").groupby(config).median()
    rows = rows.assign(_config=config, _median=config.map(medians))
    out = {}
    for value, grp in rows.groupby(key, sort=True):
        pick = grp["_median"].idxmax() if higher else grp["_median"].idxmin()
        out[value] = grp[grp["_config"] == grp.loc[pick, "_config"]]
    return out


SPEED = ("fastest", "as fast")  # the words of a claim, and of its absence, about speed
ACCURACY = ("the most accurate", "as accurate")


def claim_sentence(best: str, other: str, verb: tuple[str, str], where: str, c: Comparison, mine: str, theirs: str,
           words: tuple[str, str] = SPEED) -> str:
    """One comparison as a sentence whose wording follows the verdict (``verb``: singular and plural forms;
    ``words``: the superlative a claim makes and the equal a ``same`` says). The one place a comparison
    becomes words: a claim only where the verdict is one.

    faster: 'resnet18 trains fastest on cpu: A, 2.00x [1.96, 2.04] faster (runs) than mobilenet_v2 (B) (with 3...).'
    inconclusive: 'resnet18 against mobilenet_v2 on cpu is inconclusive: A against B, 1.08x [0.80, 1.45] (floor); ...'
    """
    level = f" ({c.level})" if c.level else ""
    ratio = ratio_interval(c.ratio, c.ci_low, c.ci_high)
    if c.verdict in ("same", "inconclusive"):
        ratio += level
    reach = f" ({c.reach()})" if c.reach() else ""  # what its run count can tell, said beside every verdict
    if c.verdict == "same":
        return f"{best} and {other} {verb[1]} {words[1]}{where} within noise: {mine} against {theirs}, {ratio}{reach}."
    if c.verdict == "inconclusive":
        return f"{best} against {other}{where} is inconclusive: {mine} against {theirs}, {ratio}; {c.note}{reach}."
    if c.verdict == "unknown":
        why = c.note or "one sample a side, so no interval or verdict"
        return f"{best} against {other}{where}: {mine} against {theirs}, {ratio}; {why}."
    return f"{best} {verb[0]} {words[0]}{where}: {mine}, {ratio} {c.verdict}{level} than {other} ({theirs}){reach}."


_RATIO = re.compile(r"(\d+(?:\.\d+)?)x \[(\d+(?:\.\d+)?), (\d+(?:\.\d+)?)\]")
_CLAIM_WORDS = re.compile(r"\b(fastest|faster|slower|most accurate|more accurate|less accurate|better|worse)\b")
_EQUAL_WORDS = re.compile(r"\b(as fast|as accurate|the same within noise)\b")


def unsupported(sentence: str, threshold: float = PRACTICAL_THRESHOLD) -> str | None:
    """Why a finished sentence says more than its evidence, or None: the rule every comparison is held to.

    A claim (faster, slower, better, worse, fastest, most accurate...) needs a ratio with an interval that
    excludes 1 by at least the practical threshold; saying two things are the same (as fast, as accurate)
    needs one whose whole interval lies within it. A sentence without such words claims nothing.
    """
    intervals = [(float(r), float(lo), float(hi)) for r, lo, hi in _RATIO.findall(sentence)]
    claim, equal = _CLAIM_WORDS.search(sentence), _EQUAL_WORDS.search(sentence)
    if claim is not None:
        if not intervals:
            return f"it claims '{claim.group(0)}' without a ratio and its interval"
        r, lo, hi = intervals[0]
        if lo <= 1.0 <= hi or abs(r - 1.0) < threshold:
            return f"it claims '{claim.group(0)}' on {r:.2f}x [{lo:.2f}, {hi:.2f}]"
    if equal is not None and (not intervals or not within_threshold(intervals[0][1], intervals[0][2], threshold)):
        return f"it says '{equal.group(0)}' on an interval wider than {threshold:.0%}"
    return None


def _versus(a: pd.DataFrame, b: pd.DataFrame, metric: str, reader: SampleReader, name: Callable[[pd.DataFrame], str],
            verb: tuple[str, str], where: str, value: Callable[[pd.DataFrame], str],
            words: tuple[str, str] = SPEED, family: int = 1) -> str:
    """``a`` (ranked first by its rows' figures) against ``b``, as a sentence; ``family``: the comparisons of its
    section, corrected together (``key.key_findings`` counts them).

    The ratio comes from the raw samples; where their medians rank the two the other way (a noisy run), the
    samples win and the sides are swapped, so the sentence never calls the slower one fastest.
    """
    c = compare_rows(a, b, metric, reader, family=family)
    if np.isfinite(c.ratio) and c.ratio < 1:
        a, b = b, a
        c = compare_rows(a, b, metric, reader, family=family)
    if np.isfinite(c.figure_a) and np.isfinite(c.figure_b):  # show the figures the ratio is the quotient of
        a, b = a.assign(**{METRICS[metric].column: c.figure_a}), b.assign(**{METRICS[metric].column: c.figure_b})
    return claim_sentence(name(a), name(b), verb, where, c, value(a), value(b), words)


def _column(column: str, prefix: str = "") -> Callable[[pd.DataFrame], str]:
    return lambda rows: f"{prefix}{rows[column].iloc[0]}"


def _samples_per_s(rows: pd.DataFrame, batch: bool = False) -> str:
    text = throughput_text(column_median(rows, "train_samples_per_s"))
    return f"{text} at bs{int(rows['batch_size'].iloc[0])}" if batch else text


def _latency(rows: pd.DataFrame) -> str:
    return f"{fmt.ms_text(column_median(rows, 'latency_ms_p50'))} p50"


def _accuracy(rows: pd.DataFrame) -> str:
    return fmt.accuracy_text(*(column_median(rows, c) for c in ("test_accuracy", "test_accuracy_ci_low",
                                                                  "test_accuracy_ci_high")))


def devices(df: pd.DataFrame, reader: SampleReader | None = None, family: int = 1) -> list[str]:
    """Per model: the fastest device in training against the next, at the batch both ran with the most throughput."""
    good = _baseline(measured_rows(df))
    if good.empty or good["device"].nunique() < 2:
        return []
    reader = reader or SampleFiles()
    lines = []
    for model, rows in good.groupby("model", sort=True):
        shared = rows.groupby("batch_size")["device"].nunique()
        both = rows[rows["batch_size"].isin(shared[shared > 1].index)]
        if both.empty:
            continue
        ranked = sorted(_best_per(both, "device").values(), key=lambda r: -column_median(r, "train_samples_per_s"))
        best = ranked[0]
        batch = int(best["batch_size"].iloc[0])
        runner = rows[(rows["device"] == ranked[1]["device"].iloc[0]) & (rows["batch_size"] == batch)]
        if runner.empty:
            continue
        lines.append(_versus(best, runner, "train_samples_per_s", reader, _column("device"),
                             (f"trains {model}", f"train {model}"), f" (bs{batch})", _samples_per_s, family=family))
        lat = sorted(_best_per(rows, "device", "latency_ms_p50", higher=False).values(),
                     key=lambda r: column_median(r, "latency_ms_p50"))
        if len(lat) > 1:
            lines.append(_versus(lat[0], lat[1], "latency_ms_p50", reader, _column("device"),
                                 (f"answers one {model} image", f"answer one {model} image"), "", _latency,
                                 family=family))
    return lines


def models(df: pd.DataFrame, reader: SampleReader | None = None, family: int = 1) -> list[str]:
    """Per device: the model that trains fastest, the one with the lowest latency, the most accurate."""
    good = _baseline(measured_rows(df))
    if good.empty:
        return []
    reader = reader or SampleFiles()
    lines = []
    for device, rows in good.groupby("device", sort=True):
        ranked = sorted(_best_per(rows, "model").values(), key=lambda r: -column_median(r, "train_samples_per_s"))
        if len(ranked) == 1:
            r = ranked[0]
            latency = column_median(r, "latency_ms_p50")
            speed = throughput_text(column_median(r, "train_samples_per_s"))
            answers = f" and answers one image in {_latency(r)}." if np.isfinite(latency) else "."
            lines.append(f"{r['model'].iloc[0]} trains at {speed} on {_where(r)}{answers}")
            continue
        if ranked:
            top, second = ranked[0], ranked[1]
            lines.append(_versus(top, second, "train_samples_per_s", reader, _column("model"), ("trains", "train"),
                                 f" on {device}", lambda r: _samples_per_s(r, True), family=family))
        lat = sorted(_best_per(rows, "model", "latency_ms_p50", higher=False).values(),
                     key=lambda r: column_median(r, "latency_ms_p50"))
        if len(lat) > 1:
            lines.append(_versus(lat[0], lat[1], "latency_ms_p50", reader, _column("model"),
                                 ("answers one image", "answer one image"), f" on {device}", _latency, family=family))
        acc = sorted(_best_per(rows, "model", "test_accuracy").values(),
                     key=lambda r: -column_median(r, "test_accuracy"))
        if len(acc) > 1:  # the two most accurate, judged as every other comparison is: a claim only on evidence
            lines.append(_versus(acc[0], acc[1], "test_accuracy", reader, _column("model"), ("is", "are"),
                                 f" on {device}", _accuracy, ACCURACY, family=family))
    return lines


KNOBS = ("threads", "num_workers", "world_size", "precision")


def _like(rows: pd.DataFrame, like: pd.DataFrame, keys: Sequence[str] = KNOBS) -> pd.DataFrame:
    """The rows of ``rows`` run with the same ``keys`` as ``like`` (compare one setting at a time)."""
    first = like.iloc[0]
    for key in keys:
        if key in rows and key in like and pd.notna(first[key]):
            rows = rows[rows[key] == first[key]]
    return rows


def batch_sizes(df: pd.DataFrame, reader: SampleReader | None = None, family: int = 1) -> list[str]:
    """Per device, model and variant with several batch sizes: the best against the smallest; what failed."""
    good = measured_rows(df)
    if good.empty:
        return []
    reader = reader or SampleFiles()
    lines = []
    for (device, model, variant), rows in good.groupby(["device", "model", "variant"], sort=True):
        if rows["batch_size"].nunique() < 2:
            continue
        best = _best_per(rows, "model").get(model)
        if best is None:  # a variant that trains nothing (quantized): no training throughput to compare
            continue
        same = _like(rows, best)
        smallest = same[same["batch_size"] == same["batch_size"].min()]
        batch, low = int(best["batch_size"].iloc[0]), int(smallest["batch_size"].iloc[0])
        where = f" for {model} on {device} ({variant})"
        other = best
        if batch == low:  # the smallest batch has the best median: judged against the best of the others
            larger = same[same["batch_size"] != low]
            other = _best_per(larger, "model").get(model, larger.iloc[0:0])
        if other.empty:
            continue
        text = _versus(other, smallest, "train_samples_per_s", reader, lambda r: f"bs{int(r['batch_size'].iloc[0])}",
                       ("trains", "train"), where, _samples_per_s, family=family)[:-1]
        failed = df[(df["status"].isin(["oom", "unstable", "failed"])) & (df["model"] == model)
                    & (df["variant"] == variant)]
        failed = failed[device_label(failed) == device] if not failed.empty else failed
        if not failed.empty:
            text += "; " + ", ".join(f"bs{int(b)} {s}" for b, s in zip(failed["batch_size"], failed["status"]))
        lines.append(text + ".")
    return lines
