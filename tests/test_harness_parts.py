"""benchmarks/harness_parts.py's plumbing: the three arms interleaved in one process, a sample fired each turn."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_arm_is_timed_and_every_sample_turn_takes_a_sample(tmp_path):
    out = tmp_path / "parts.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "harness_parts.py"), "--rounds", "2", "--steps",
                           "3", "--batch-size", "2", "--image-size", "16", "--threads", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert {arm: len(v) for arm, v in result["step_ms"].items()} == {"bare": 2, "train_step": 2, "sample": 2}
    for arm in ("train_step", "sample"):
        assert result[arm]["ci_low"] <= result[arm]["speed_vs_bare"] <= result[arm]["ci_high"], result[arm]
    assert result["samples_fired"] == 2 * 3 + 1, result  # one per sample turn, and the untimed first one
    assert result["sampler_interval_s"] >= 0.1
    assert "of the bare loop's speed" in proc.stderr and "of a run's step time" in proc.stderr
    share = result["sampler_share_of_run_pct"]
    assert share["low"] <= share["point"] <= share["high"], share


def test_bad_counts_are_refused_in_one_line():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "harness_parts.py"), "--rounds", "1"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "allowed: rounds >= 2" in proc.stderr
