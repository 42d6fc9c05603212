"""Interference: rows measured while other work held the machine are flagged with the figure."""
from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from conftest import TINY, host_load, quiet_check

from benchlib.env.threads import usable_cpu_ids
from benchlib.instruments import interference
from benchlib.instruments.telemetry import TelemetrySampler
from benchlib.report.findings import caveats
from benchlib.run.columns import measured_row
from benchlib.run.measure import measure
from benchlib.spec.settings import RunConfig, RunSettings


def _frame(*samples: dict) -> pd.DataFrame:
    return pd.DataFrame([{"phase": "train", **s} for s in samples])


def test_other_processes_are_what_the_usable_cores_did_beyond_this_process():
    # two cores both busy, this process one core: one core's worth was someone else's -> 50%
    frame = _frame({"cpu0_util_pct": 100.0, "cpu1_util_pct": 100.0, "proc_cpu_util_pct": 100.0, "steal_pct": 0.0})
    got = interference.measure(frame, [0, 1])
    assert got.cpu_pct == pytest.approx(50.0) and got.interfered
    assert "50% of the 2 usable CPUs" in got.describe()


def test_stolen_time_is_reported_apart_from_other_processes():
    frame = _frame({"cpu0_util_pct": 100.0, "cpu1_util_pct": 100.0, "proc_cpu_util_pct": 140.0, "steal_pct": 30.0})
    got = interference.measure(frame, [0, 1])
    assert got.cpu_pct == pytest.approx(0.0) and got.steal_pct == pytest.approx(30.0)
    assert got.interfered and "hypervisor stole 30%" in got.describe()


def test_only_the_usable_cores_and_the_timed_phases_count():
    frame = pd.DataFrame([
        {"phase": "train", "cpu0_util_pct": 100.0, "cpu1_util_pct": 100.0, "proc_cpu_util_pct": 98.0},
        {"phase": "eval", "cpu0_util_pct": 100.0, "cpu1_util_pct": 100.0, "proc_cpu_util_pct": 0.0},
    ])
    got = interference.measure(frame, [0])  # core 1 is another job's (taskset, SLURM)
    assert got.cpu_pct == pytest.approx(2.0) and got.interfered is False and got.describe() is None


def test_a_quiet_row_is_not_flagged_and_unmeasured_is_none():
    quiet = _frame({"cpu0_util_pct": 99.0, "cpu1_util_pct": 97.0, "proc_cpu_util_pct": 190.0})
    assert interference.measure(quiet, [0, 1]).interfered is False
    assert interference.measure(pd.DataFrame(columns=["t_s", "phase"]), [0, 1]).interfered is None


def test_another_process_on_the_runs_gpu_interferes():
    frame = _frame({"gpu0_processes": 1}, {"gpu0_processes": 2})
    got = interference.measure(frame, [0])
    assert got.gpu_other_processes_max == 1 and got.interfered
    assert "1 other process(es) held the GPU" in got.describe()


def test_the_threshold_is_the_settings():
    frame = _frame({"cpu0_util_pct": 100.0, "proc_cpu_util_pct": 80.0})
    assert interference.measure(frame, [0], threshold_pct=10).interfered
    assert not interference.measure(frame, [0], threshold_pct=25).interfered


def test_the_end_of_run_warning_counts_rows_and_names_the_figure():
    rows = pd.DataFrame({"interfered": [True, False, True, None], "interference_cpu_pct": [60.0, 1.0, 35.0, None],
                         "steal_pct": [0.5, 0.1, 0.2, None], "interference_threshold_pct": [10.0] * 4})
    assert caveats.interference_warning(rows) == (
        "2 of 4 rows were measured while other processes used up to 60% of the CPUs: their numbers are not "
        "trustworthy (column interfered; rerun them on a quiet machine)")
    assert caveats.interference_warning(rows.assign(interfered=False)) is None


def _row() -> dict:
    s = RunSettings.of(**{**TINY, "train_steps": 25, "latency_repeats": 10, "threads": 1})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core for the run, one for the hog: contention without oversubscription
    try:
        measured = measure(RunConfig("t", "cpu", "squeezenet1_1", 16, s), machine="m")
    finally:
        torch.set_num_threads(threads)
    assert measured is not None
    return measured_row(measured)


def test_a_run_beside_a_cpu_hog_is_flagged():
    loop = "import time\nend = time.time() + 120\nwhile time.time() < end: pass\n"
    hog = subprocess.Popen([sys.executable, "-c", loop])  # a child, but not a DataLoader worker: another process
    try:
        time.sleep(0.5)
        loaded = _row()
    finally:
        hog.kill()
        hog.wait()
    assert loaded["interfered"] is True
    share = 100.0 / len(usable_cpu_ids())  # one busy core's share of the usable ones
    assert loaded["interference_cpu_pct"] > 0.5 * share, loaded["interference"]
    assert "other processes used" in loaded["interference"]
    assert loaded["interference_cpu_pct"] is not None and loaded["loadavg_1m_before"] is not None
    # the machine's own drift is read from the same run's steps (whether it drifted depends on the host)
    assert loaded["train_step_drift_pct"] >= 0 and 0 <= loaded["train_step_drift_p"] <= 1
    assert loaded["machine_drifted"] in (True, False) and -1 <= loaded["train_step_autocorr"] <= 1
    assert (loaded["machine_drift"] is None) == (not loaded["machine_drifted"])


@pytest.mark.quiet
def test_a_quiet_run_is_not_flagged():
    """The other half of the hog's test: only a quiet host can show it, so a busy one skips with the load."""
    with host_load() as window:
        quiet = _row()
    with quiet_check(window, interfered=quiet["interfered"], said=quiet["interference"]):
        assert quiet["interfered"] is False, quiet["interference"]
    assert quiet["interference_cpu_pct"] is not None and quiet["loadavg_1m_before"] is not None


def _spin(seconds: float) -> None:
    end = time.time() + seconds
    while time.time() < end:
        pass


@pytest.mark.quiet
def test_dataloader_style_workers_count_as_this_process():
    """A multiprocessing child (how DataLoader workers start) is the run's own CPU, not interference."""
    ctx = multiprocessing.get_context("fork")
    with host_load() as window, TelemetrySampler(0.1, gpus=False) as sampler:
        sampler.set_phase("train")
        worker = ctx.Process(target=_spin, args=(1.5,))
        worker.start()
        worker.join()
    frame = sampler.result.frame
    got = interference.measure(frame, [0] if len(usable_cpu_ids()) == 1 else usable_cpu_ids())
    own = pd.to_numeric(frame["proc_cpu_util_pct"], errors="coerce").dropna()
    with quiet_check(window, interfered=got.interfered, said=got.describe()):
        assert got.interfered is False, got.describe()
    with quiet_check(window):  # a busy host starves the worker of its core
        assert own.mean() > 60.0 * 1.5 / (1.5 + 0.2), own.tolist()  # the worker's busy core is ours


def _busy_peer(seconds: float) -> subprocess.Popen:
    """A process that is not this one's child worker: as a data-parallel peer rank is to each rank."""
    return subprocess.Popen([sys.executable, "-c", f"import time\nend = time.time() + {seconds}\n"
                             "while time.time() < end:\n    pass\n"])


def _interference_beside_a_busy_peer(peer_is_ours: bool) -> float:
    peer = _busy_peer(5.0)  # busy through the whole window; reaped only after it, as a sibling rank never is
    try:
        time.sleep(0.1)  # running before sampling starts, as ranks are after their first collective
        with TelemetrySampler(0.1, gpus=False, peer_pids=[peer.pid] if peer_is_ours else []) as sampler:
            sampler.set_phase("train")
            time.sleep(1.5)
    finally:
        peer.kill()
        peer.wait()
    got = interference.measure(sampler.result.frame, usable_cpu_ids())
    assert got.cpu_pct is not None
    return got.cpu_pct


@pytest.mark.quiet
def test_a_data_parallel_peer_rank_counts_as_the_runs_own_cpu():
    """The other ranks of a data-parallel run on this machine are the run, not interference; any other
    process is. Compared side by side, so steady load from elsewhere lands on both figures; load that comes
    and goes lands on one, and a busy host starves the peer of the core it should show."""
    with host_load() as window:
        ours = _interference_beside_a_busy_peer(peer_is_ours=True)
        theirs = _interference_beside_a_busy_peer(peer_is_ours=False)
    one_core_pct = 100 / len(usable_cpu_ids())
    with quiet_check(window):
        assert theirs - ours > one_core_pct * 0.5, (ours, theirs)
