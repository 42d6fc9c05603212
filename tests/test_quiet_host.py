"""The suite's own judge of a busy host (conftest.py): what it counts as load from elsewhere, and that a check
needing a quiet machine skips only where the host was measured busy, and fails otherwise."""
from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from conftest import HostLoad, _own_tree_cpu_s, quiet_check, what_benchlib_saw


def _window(other_pct: float) -> HostLoad:
    window = HostLoad()
    window.other_pct, window.seconds = other_pct, 2.0
    return window


def test_what_this_process_starts_is_its_own_cpu_not_load_from_elsewhere():
    before = _own_tree_cpu_s()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)  # reaped child
    assert _own_tree_cpu_s() - before > 0.05


def test_the_words_name_the_load_and_the_threshold():
    cpus = len(HostLoad().usable)
    assert _window(73.4).busy() == f"other processes used 73% of the {cpus} usable CPUs over 2.0 s (threshold 10%)"
    assert _window(4.0).busy() is None and _window(6.0).busy(5.0) is not None


def test_a_failed_check_skips_in_benchlibs_words_where_it_saw_a_busy_host():
    said = "other processes used 60% of the 2 usable CPUs (threshold 10%)"
    with pytest.raises(pytest.skip.Exception, match="host not quiet: benchlib measured that other processes used 60%"):
        with quiet_check(interfered=True, said=said):
            raise AssertionError("percentiles refused")
    with pytest.raises(pytest.skip.Exception, match=r"this test's own window: other processes used 40%"):
        with quiet_check(_window(40.0), interfered=True, said=said):
            raise AssertionError("flagged")


def test_a_failed_check_on_a_quiet_host_fails():
    with pytest.raises(AssertionError, match="false alarm"):  # benchlib flagged a host the window found quiet
        with quiet_check(_window(1.0), interfered=True, said="other processes used 60%"):
            raise AssertionError("false alarm")
    with pytest.raises(AssertionError, match="not flagged"):
        with quiet_check(_window(80.0), interfered=False, said=None):
            raise AssertionError("not flagged")
    with pytest.raises(AssertionError, match="quiet window"):
        with quiet_check(_window(2.0)):
            raise AssertionError("quiet window")
    with pytest.raises(pytest.skip.Exception, match="host busy during the test: other processes used 30%"):
        with quiet_check(_window(30.0)):
            raise AssertionError("busy window")
    with pytest.raises(TypeError):  # only a check that does not hold is excused, never an error
        with quiet_check(interfered=True, said="busy"):
            raise TypeError("a bug")


def test_benchlibs_flags_are_read_from_a_row_or_a_table():
    quiet = {"interfered": False, "interference": None, "machine_drifted": False, "machine_drift": None}
    assert what_benchlib_saw(quiet) == {"interfered": False, "said": None}
    rows = pd.DataFrame([quiet, {**quiet, "interfered": True, "interference": "other processes used 50%"},
                         {**quiet, "machine_drifted": True, "machine_drift": "the step time moved by 30%"}])
    assert what_benchlib_saw(rows) == {"interfered": True,
                                       "said": "other processes used 50%; the step time moved by 30%"}
