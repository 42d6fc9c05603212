"""Run rules: repeats, seeds, warmup, and every run that did not count."""
from __future__ import annotations

import json

import pandas as pd

from benchlib.report.evidence.rules import as_markdown, run_rules


def _row(seed: int, status: str = "ok", **extra) -> dict:
    settings = {"warmup_steps": 5, "train_steps": 30, "latency_repeats": 50, "seed": seed}
    return {"study": "s", "run_id": f"cpu__resnet18__bs64__default__fp32__abcdef01__seed{seed}", "seed": seed,
            "status": status, "error": None if status == "ok" else "CUDA out of memory", "machine": "m",
            "settings_json": json.dumps(settings), "train_step_noisy": False, "interfered": False, **extra}


def test_rules_count_every_run_and_name_the_ones_that_did_not_count():
    rows = pd.DataFrame([_row(0), _row(1, train_step_noisy=True), _row(2, interfered=True), _row(3, "oom")])
    rules = run_rules(rows, superseded=2)
    s = rules["studies"]["s"]
    assert s["configurations"] == 1 and s["repeats_per_configuration"] == [4] and s["seeds"] == [0, 1, 2, 3]
    assert s["rules"]["warmup_steps"] == [5] and s["status_counts"] == {"ok": 3, "oom": 1}
    assert s["noisy_rows"] == 1 and s["interfered_rows"] == 1
    assert s["not_counted"] == [{"run_id": _row(3)["run_id"], "status": "oom", "error": "CUDA out of memory"}]
    text = as_markdown(rules, {"s": True})
    assert "1 configuration(s) x 4 repeat(s)" in text and "interleaved in rounds" in text
    assert "not counted" in text and "2 row(s) measured with settings a study no longer has" in text
