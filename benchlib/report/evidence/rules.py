"""The run rules of a study: how many repeats, which seeds, what warmup, and every run that did not count.

MLPerf's rule that every run is reported, not just the good ones: a reader of a speedup needs to know it
is the median of three seeds after five warmup steps, and that two other configurations ran out of
memory, one was set aside when its settings changed and one was measured under interference. Computed
from the rows (so a merged report has them too); ``benchlib study`` also writes them beside the rows as
``run_rules.json``.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from ...store.identity import settings_of
from ...store.rows import flag_mask
from .samples import NOISE_FLAGS, flagged
from .selection import config_key

TIMING_RULES = ("warmup_steps", "train_steps", "epochs", "max_train_batches", "infer_warmup_batches",
                "latency_repeats", "latency_budget_s", "threads", "interference_threshold_pct")


def _settings(rows: pd.DataFrame) -> pd.DataFrame:
    parsed = [settings_of(s) for s in rows.get("settings_json", [])]
    return pd.DataFrame(parsed, index=rows.index)


def _values(column: pd.Series) -> list[Any]:
    return sorted({v for v in column.dropna().tolist()}, key=str)


def run_rules(rows: pd.DataFrame, superseded: int = 0) -> dict[str, Any]:
    """Per study: repeats and seeds, the timing rules in force, and every run that did not count, with why."""
    out: dict[str, Any] = {"superseded_rows": superseded, "studies": {}}
    for study, grp in rows.groupby("study", sort=True):
        settings = _settings(grp)
        config = config_key(grp["run_id"])
        per_config = config.value_counts()
        ok = grp[grp["status"] == "ok"]
        not_counted = grp[grp["status"] != "ok"]
        out["studies"][str(study)] = {
            "configurations": int(config.nunique()),
            "rows": int(len(grp)),
            "repeats_per_configuration": sorted({int(n) for n in per_config}),
            "seeds": [int(s) for s in _values(pd.to_numeric(grp["seed"], errors="coerce"))],
            "rules": {k: _values(settings[k]) for k in TIMING_RULES if k in settings},
            "status_counts": {str(k): int(v) for k, v in grp["status"].value_counts().items()},
            "not_counted": [{"run_id": r["run_id"], "status": r["status"], "error": r.get("error")}
                            for r in not_counted.to_dict("records")],
            "noisy_rows": int(sum(flagged(ok.loc[[i]], NOISE_FLAGS) for i in ok.index)),
            "interfered_rows": int(flag_mask(ok["interfered"]).sum()) if "interfered" in ok else 0,
        }
    return out


def as_markdown(rules: dict[str, Any], interleave: dict[str, bool] | None = None,
                rounds: dict[str, dict[str, Any]] | None = None) -> str:
    """The rules as a few readable lines per study."""
    lines = []
    for study, r in rules["studies"].items():
        reps = "/".join(map(str, r["repeats_per_configuration"]))
        timing = "; ".join(f"{k} {', '.join(map(str, v))}" for k, v in r["rules"].items() if v)
        order = ""
        if interleave and study in interleave:
            order = " Configurations ran " + ("interleaved in rounds (seed, batch size)." if interleave[study]
                                              else "one after another (interleave: false).")
        counts = ", ".join(f"{n} {s}" for s, n in r["status_counts"].items())
        lines.append(f"- **{study}**: {r['configurations']} configuration(s) x {reps} repeat(s) (seeds "
                     f"{', '.join(map(str, r['seeds']))}): {r['rows']} run(s), {counts}; {r['noisy_rows']} "
                     f"noisy, {r['interfered_rows']} interfered.{order} Rules: {timing}.")
        if rounds and study in rounds:
            lines.append(f"  - {rounds_text(rounds[study])}")
        for miss in r["not_counted"]:
            lines.append(f"  - not counted: `{miss['run_id']}`: {miss['status']}: {miss['error'] or ''}")
    if rules["superseded_rows"]:
        lines.append(f"- {rules['superseded_rows']} row(s) measured with settings a study no longer has were set "
                     "aside under `superseded/` (kept, not shown).")
    return "\n".join(lines) or "*No runs.*"


def rounds_text(rounds: dict[str, Any]) -> str:
    """``repeats: auto ran 4 round(s) (each in fresh processes): ...; least precise ... ±6.1%``."""
    n = rounds.get("rounds_run")
    if rounds.get("mode") != "auto":
        return f"{n} round(s) of seeds, each in fresh processes (one kernel per pair)."
    pct = rounds.get("precision_pct")
    reached = (f"; the least precise figure, `{rounds.get('least_precise')}`, is known within ±{pct:g}% (95%)"
               if isinstance(pct, (int, float)) else "; too few runs for an interval")
    target = (f"until every comparison can tell a {rounds['target_change_pct']:g}% change"
              if isinstance(rounds.get("target_change_pct"), (int, float)) else f"target ±{rounds.get('until_pct')}%")
    return (f"repeats: auto ({target}, at most {rounds.get('max_runs')} runs or "
            f"{rounds.get('max_minutes')} min) ran {n} round(s), each in fresh processes, and stopped because "
            f"{rounds.get('stopped')}{reached}.")
