"""The soak script (``benchmarks/soak.py``, issue 37) runs and judges: its plumbing on a study of one
configuration, two scenarios, so that it cannot rot between the times it is run in full."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchlib.roofline.cache import ensure_ceilings

SOAK = Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"
SOAK_TIMEOUT_S = 300


@pytest.mark.slow
def test_the_soak_kills_terminates_resumes_and_judges_a_tiny_study(tmp_path, monkeypatch):
    cache = tmp_path / "machine-cache"
    monkeypatch.setenv("BENCHLIB_CACHE", str(cache))
    monkeypatch.setenv("BENCHLIB_MACHINE", "soak")  # the soak's machine: these ceilings are the ones it reads
    ensure_ceilings(tmp_path / "seed", "cpu")  # this session's (measured once), not measured again by the soak
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, str(SOAK), "--quick", "--size", "tiny", "--scenarios", "kill,term",
                           "--kills", "1", "--cache", str(cache), "--work", str(tmp_path / "work"), "--json",
                           str(out)], capture_output=True, text=True, timeout=SOAK_TIMEOUT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    scenarios = {s["scenario"]: s for s in record["scenarios"]}
    assert list(scenarios) == ["kill -9 x1", "SIGTERM"]
    for s in scenarios.values():
        assert s["verdict"] == "pass" and s["expected"] == s["rows_found"] == 1, s
        assert (s["duplicates"], s["torn_files"], s["leftover_processes"], s["failures"]) == (0, 0, 0, []), s
    term = scenarios["SIGTERM"]["details"]["terms"]
    assert [(t["exit"], t["last_line"]) for t in term] == [(143, "benchlib: terminated")]
    assert "kill -9 x1" in done.stdout and "verdict" in done.stdout, "the table is printed"
