"""What a reader must know before trusting a figure: rows that were interfered with or noisy, failures
with their reason, what was not run, and how precise the accuracy is.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ...instruments.interference import DEFAULT_THRESHOLD_PCT
from ...instruments.samples import NOISY_IQR_OVER_MEDIAN
from ...store.rows import flag_mask
from ...store.schema import finite_float
from ..evidence.samples import NOISE_FLAGS
from ..evidence.selection import config_key, device_label, ok_rows
from ..evidence.stats import SETTLE_REPEATS

MAX_NAMED = 6  # failures and flagged rows named one by one before "and N more"
MAX_REASON = 160  # characters of a failure's error kept in its sentence (the failures table has all of it)


def measured_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The successful rows, each with the report's ``device`` label (machine:hardware across machines)."""
    good = ok_rows(df) if not df.empty else df.copy()
    if not good.empty:
        good["device"] = device_label(good)
    return good


def _named(rows: pd.DataFrame) -> str:
    names = [f"{r['model']} on {r['device']} (bs{int(r['batch_size'])}, {r['variant']})"
             for r in rows.head(MAX_NAMED).to_dict("records")]
    more = len(rows) - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def interference_warning(rows: pd.DataFrame) -> str | None:
    """The end-of-run warning over a results table ("3 of 8 rows were measured while ..."); None if clean."""
    if "interfered" not in rows or rows.empty:
        return None
    flagged = rows[flag_mask(rows["interfered"])]
    if flagged.empty:
        return None
    cpu, steal = (_column_max(flagged, c) for c in ("interference_cpu_pct", "steal_pct"))
    what = []
    if cpu is not None and cpu > _flagged_threshold(flagged):
        what.append(f"other processes used up to {cpu:.0f}% of the CPUs")
    if steal is not None and steal > _flagged_threshold(flagged):
        what.append(f"the hypervisor stole up to {steal:.0f}%")
    if not what:
        what.append("other processes held the GPU")
    return (f"{len(flagged)} of {len(rows)} rows were measured while {' and '.join(what)}: "
            "their numbers are not trustworthy (column interfered; rerun them on a quiet machine)")


def _column_max(rows: pd.DataFrame, column: str) -> float | None:
    if column not in rows:
        return None
    return finite_float(pd.to_numeric(rows[column], errors="coerce").max())


def _flagged_threshold(rows: pd.DataFrame) -> float:
    """The smallest threshold the rows were judged by (the default where the rows do not say)."""
    if "interference_threshold_pct" not in rows:
        return DEFAULT_THRESHOLD_PCT
    low = finite_float(pd.to_numeric(rows["interference_threshold_pct"], errors="coerce").min())
    return DEFAULT_THRESHOLD_PCT if low is None else low


def drift_warning(rows: pd.DataFrame) -> str | None:
    """The end-of-run warning over a results table ("2 of 8 rows ran while ..."); None if no row drifted."""
    if "machine_drifted" not in rows or rows.empty:
        return None
    flag = flag_mask(rows["machine_drifted"])
    if "interfered" in rows:  # other processes explain those rows' drift, and their own warning says so
        flag &= ~flag_mask(rows["interfered"])
    drifted = rows[flag]
    if drifted.empty:
        return None
    pct = pd.to_numeric(drifted.get("train_step_drift_pct"), errors="coerce").max()
    size = f"by up to {pct:.0f}% " if isinstance(pct, float) and math.isfinite(pct) else ""
    return (f"{len(drifted)} of {len(rows)} rows ran while the machine's own speed changed (identical steps "
            f"drifted {size}with no other process to blame): expect run-to-run spread of that order here, and "
            "compare repeats (seeds), not single runs (column machine_drifted)")


HARNESS_LIMIT_PCT = 1.0  # what benchlib's own threads may take of the CPUs before a page says so


def harness_warning(rows: pd.DataFrame) -> str | None:
    """Rows whose timed steps lost over ``HARNESS_LIMIT_PCT`` of the CPUs to benchlib's own threads."""
    share = pd.to_numeric(rows["harness_cpu_pct"], errors="coerce") if "harness_cpu_pct" in rows else None
    if share is None or not (share > HARNESS_LIMIT_PCT).any():
        return None
    over = rows[share > HARNESS_LIMIT_PCT]
    return (f"benchlib's own threads (telemetry, samplers) took up to {float(share.max()):.1f}% of the CPUs during "
            f"the timed steps of {len(over)} of {len(rows)} rows (over {HARNESS_LIMIT_PCT:g}%): {_named(over)}; "
            "their step times include that cost (column harness_cpu_pct; telemetry_interval_s widens it less)")


def warnings(df: pd.DataFrame) -> list[str]:
    """Rows whose figures should not be trusted: interfered, drifting machine, noisy, above their roof."""
    good = measured_rows(df)
    if good.empty:
        return []
    out = []
    interfered = interference_warning(good)
    if interfered:
        out.append(interfered[0].upper() + interfered[1:] + ".")
    drifted = drift_warning(good)
    if drifted:
        out.append(drifted[0].upper() + drifted[1:] + ".")
    harness = harness_warning(good)
    if harness:
        out.append(harness[0].upper() + harness[1:] + ".")
    noisy_mask = np.zeros(len(good), dtype=bool)
    for column in NOISE_FLAGS:
        if column in good:
            noisy_mask |= flag_mask(good[column]).to_numpy()
    if noisy_mask.any():
        n = int(noisy_mask.sum())
        configs = config_key(good["run_id"])
        runs = int(configs.value_counts()[configs[noisy_mask].unique()].min())  # the fewest a noisy one's had
        more = (f"`repeats: {SETTLE_REPEATS}`" if runs < SETTLE_REPEATS else f"more repeats than {runs} (an interval "
                "narrows as the square root of the runs)")
        out.append(f"{n} of {len(good)} rows {'is' if n == 1 else 'are'} noisy (IQR/median over "
                   f"{NOISY_IQR_OVER_MEDIAN:.0%} in their step "
                   f"times, latencies or throughput repeats): {_named(good[noisy_mask])}. Their intervals are wide; "
                   f"measure them again on a quiet machine or with {more}.")
    if "above_roof" in good:
        above = good[flag_mask(good["above_roof"])]
        if not above.empty:
            out.append(f"{len(above)} row(s) lie above their measured roof, a measurement error rather than a "
                       f"finding: {_named(above)}.")
    return out


def failures(df: pd.DataFrame) -> list[str]:
    """What produced no measurement, with why (one sentence, the first few named)."""
    bad = df[df["status"] != "ok"] if not df.empty else df
    invalid = df.attrs.get("invalid_rows")
    lines = []
    if not bad.empty:
        bad = bad.assign(device=device_label(bad))
        words = {"oom": "ran out of memory", "skipped": "was skipped", "unstable": "diverged (NaN or infinite loss)",
                 "failed": "failed"}
        named = []
        for r in bad.head(MAX_NAMED).to_dict("records"):
            why = str(r.get("error") or "").strip()
            why = why if len(why) <= MAX_REASON else why[:MAX_REASON - 1].rstrip() + "\u2026"
            why = f" ({why})" if why and why.lower() != "nan" else ""
            named.append(f"{r['model']} on {r['device']} (bs{int(r['batch_size'])}, {r['variant']}) "
                         f"{words.get(str(r['status']), str(r['status']))}{why}")
        more = len(bad) - len(named)
        lines.append(f"{len(bad)} of {len(df)} configurations produced no measurement: " + "; ".join(named)
                     + (f"; and {more} more (see the failures table)." if more > 0 else "."))
    if invalid is not None and not invalid.empty:
        lines.append(f"{len(invalid)} row file(s) could not be read and are not drawn (see the failures table).")
    return lines


def not_run(df: pd.DataFrame, profiles: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """The questions this study did not ask: no second device, no variants, one batch size, ..."""
    good = measured_rows(df)
    if good.empty:
        return ["no configuration was measured"]
    missing = []
    if good["device"].nunique() < 2:
        missing.append("a second device")
    if good["variant"].nunique() < 2:
        missing.append("optimization variants")
    if good.groupby(["device", "model", "variant"])["batch_size"].nunique().max() < 2:
        missing.append("several batch sizes")
    configs = config_key(good["run_id"])
    if configs.value_counts().max() < 2:
        missing.append("repeats (one seed per configuration)")
    if not any(k in good and good[k].nunique() > 1 for k in ("threads", "num_workers", "world_size")):
        missing.append("thread, worker or process scaling")
    if not profiles:
        missing.append("profiles")
    return missing


def accuracy_sentence(df: pd.DataFrame) -> str:
    """How far the test accuracies can be compared: over seeds where configurations repeat; else each is one
    training, whose interval covers the test set's sampling and not the spread between trainings."""
    good = measured_rows(df)
    if good.empty or "test_accuracy" not in good or good["test_accuracy"].isna().all():
        return ""
    with_acc = good[good["test_accuracy"].notna()]
    seeds = (with_acc.groupby(config_key(with_acc["run_id"].astype(str)))["seed"].nunique()
             if {"run_id", "seed"} <= set(with_acc) else pd.Series(dtype=int))
    images = pd.to_numeric(with_acc.get("test_samples"), errors="coerce").dropna()
    size = f" over {int(images.median()):,} test images" if not images.empty else ""
    if not seeds.empty and int(seeds.max()) > 1:
        return (f"Test accuracy is the median over each configuration's seeds (up to {int(seeds.max())}); the "
                "Repeats table gives its interval across them.")
    seed = with_acc["seed"].dropna().unique() if "seed" in with_acc else []
    which = f" (seed {', '.join(str(int(s)) for s in seed)})" if len(seed) else ""
    return (f"Test accuracy is one training per configuration{which}: its 95% interval (Wilson){size} covers the "
            "test set's sampling, not the spread between trainings, which on a small data set trained for a few "
            "epochs is several points; accuracy differences are claimed only with repeats (`repeats: 5` with "
            "seeds).")
