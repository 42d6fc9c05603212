"""The machine's own speed changing under a run: serially correlated identical steps (instruments.drift)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from benchlib.instruments import drift
from benchlib.report.findings import caveats
from benchlib.run.columns import drift_columns


def _jitter(n: int, seed: int, scale: float = 0.03) -> np.ndarray:
    return 0.1 * (1 + scale * np.random.default_rng(seed).standard_normal(n))


def test_independent_jitter_is_not_drift():
    found = drift.measure(_jitter(40, seed=1))
    assert found.p_value is not None and found.p_value > drift.ALPHA
    assert found.drifted is False and found.describe() is None


def test_a_machine_that_slows_down_mid_run_drifts():
    steps = _jitter(40, seed=2)
    steps[20:] *= 1.25  # the host got busier after 20 steps: every later step slower
    found = drift.measure(steps)
    assert found.drifted is True and found.autocorr is not None and found.autocorr > 0.3
    assert 15 < (found.drift_pct or 0) < 35 and f"moved by {found.drift_pct:.0f}%" in (found.describe() or "")
    assert drift_columns(found)["machine_drifted"] is True


def test_a_small_drift_is_under_the_threshold_however_sure():
    steps = _jitter(40, seed=3, scale=0.001)
    steps[20:] *= 1.02
    found = drift.measure(steps)
    assert found.p_value is not None and found.p_value < drift.ALPHA and found.drifted is False


def test_too_few_or_identical_steps_say_nothing():
    assert drift.measure([0.1] * 5).drifted is None
    same = drift.measure([0.1] * 30)
    assert same.drifted is None and same.drift_pct == 0.0 and same.autocorr is None


def test_the_test_is_seeded_and_the_warning_counts_uninterfered_rows():
    steps = _jitter(30, seed=4)
    assert drift.measure(steps) == drift.measure(steps)
    rows = pd.DataFrame({"machine_drifted": [True, True, False, None], "interfered": [False, True, False, False],
                         "train_step_drift_pct": [12.0, 40.0, 1.0, None]})
    text = caveats.drift_warning(rows) or ""
    assert text.startswith("1 of 4 rows") and "12%" in text and "40%" not in text
    assert caveats.drift_warning(rows.assign(machine_drifted=False)) is None
