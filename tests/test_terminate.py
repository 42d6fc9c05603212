"""SIGTERM takes Ctrl-C's way out (issue 37): the kernel a study runs is stopped, the results folder's lock is
released, and benchlib's own line is the last one printed, with exit code 143."""
from __future__ import annotations

import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import seed_ceilings

from benchlib.cli import EXIT_TERMINATED, main
from benchlib.pipeline import study as study_pipeline
from benchlib.store.lock import folder_lock

TINY = {"dataset": "digits", "image_size": 32, "train_subset": 64, "test_subset": 32, "train_steps": 2,
        "warmup_steps": 1, "latency_repeats": 3, "latency_budget_s": 0, "infer_warmup_batches": 1}
KERNEL_WAIT_S = 180
EXIT_WAIT_S = 60


def _params(tmp_path: Path, **extra) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"study": "s", "hardware": ["cpu"], "models": ["squeezenet1_1"],
                                    "batch_sizes": [4], "calibrate": False, "ceilings_at_end": False, **TINY,
                                    **extra}))
    return path


def _argv(tmp_path: Path, params: Path) -> list[str]:
    return ["study", str(params), "--results-root", str(tmp_path / "results"), "--reports-root",
            str(tmp_path / "reports"), "--no-summary"]


def test_sigterm_leaves_as_ctrl_c_does_lock_released_one_line_last(tmp_path, monkeypatch, capsys):
    """In this process: a study holding its lock gets SIGTERM; the lock is let go, the command says so in one
    line, exits 143, and the SIGTERM handler of before the command is back."""
    seen = {}

    def terminated_mid_study(cfg, *, results_root, **_kwargs):
        with folder_lock(Path(results_root) / cfg.study) as path:
            seen["lock"] = path
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the handler raises long before
        raise AssertionError("SIGTERM did not end the study")

    def unhandled(_signum, _frame):
        raise AssertionError("SIGTERM reached the handler before the command's")

    monkeypatch.setattr(study_pipeline, "run_study", terminated_mid_study)
    before = signal.signal(signal.SIGTERM, unhandled)  # this process's own, not the default that ends it
    try:
        code = main(_argv(tmp_path, _params(tmp_path)))
        assert signal.getsignal(signal.SIGTERM) is unhandled
    finally:
        signal.signal(signal.SIGTERM, before)
    err = capsys.readouterr().err
    assert code == EXIT_TERMINATED == 143
    assert err.strip().splitlines()[-1] == "benchlib: terminated", err
    assert not seen["lock"].exists() and list(seen["lock"].parent.iterdir()) == []


def test_a_child_the_command_started_but_never_handed_to_its_clean_up_is_stopped(tmp_path, monkeypatch, capsys):
    """SIGTERM while a kernel is still starting: papermill's clean-up does not hold it yet, and it would
    outlive the command and print "Parent appears to have exited" after benchlib's last line. The command
    stops every process it started before it says its last line."""
    started = {}

    def terminated_while_a_child_starts(cfg, **_kwargs):
        started["child"] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        raise AssertionError("SIGTERM did not end the study")

    monkeypatch.setattr(study_pipeline, "run_study", terminated_while_a_child_starts)
    code = main(_argv(tmp_path, _params(tmp_path)))
    assert code == EXIT_TERMINATED
    assert started["child"].poll() is not None, "the child was stopped before the command returned"
    assert capsys.readouterr().err.strip().splitlines()[-1] == "benchlib: terminated"


def _kernels(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if "ipykernel" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


@pytest.mark.notebook
def test_sigterm_to_a_running_study_stops_its_kernel_and_releases_the_lock(tmp_path):
    """``benchlib study`` as a process of its own, SIGTERM while its pair's kernel runs: the kernel is stopped (not
    left to find its parent gone), no lock file and no temporary notebook is left, and the last line is
    benchlib's."""
    params = _params(tmp_path, batch_sizes=[4, 8, 16])
    seed_ceilings(tmp_path / "results" / "s")
    proc = subprocess.Popen([sys.executable, "-m", "benchlib", *_argv(tmp_path, params)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    out: dict[str, str] = {}
    reader = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), proc.communicate())), daemon=True)
    reader.start()  # the pipes read as they fill, so the study never blocks on them
    try:
        deadline = time.monotonic() + KERNEL_WAIT_S
        while not (kernels := _kernels(proc.pid)) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert kernels, "no kernel started"
        time.sleep(1.0)  # into the notebook's cells
        proc.send_signal(signal.SIGTERM)
        reader.join(EXIT_WAIT_S)  # to the end of its output: a kernel left running would hold the pipe open
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert not reader.is_alive(), "the output never ended: a process of the study outlived it"
    err = out["stderr"]
    assert proc.returncode == EXIT_TERMINATED, err[-3000:]
    assert err.strip().splitlines()[-1] == "benchlib: terminated", err[-3000:]
    assert "Parent appears to have exited" not in err
    assert not any(k.is_running() and k.status() != psutil.STATUS_ZOMBIE for k in kernels), "a kernel was left"
    results = tmp_path / "results" / "s"
    assert sorted(results.glob(".benchlib-*.lock")) == [], "a lock was left behind"
    assert [p.name for p in (tmp_path / "reports").rglob("*") if ".tmp" in p.name] == []


def test_a_cell_task_failed_by_the_stopped_kernel_is_not_reported_after_the_last_line(tmp_path, caplog, capsys):
    """SIGTERM while a cell runs: papermill's clean-up stops the kernel, nbclient's task for the cell ends in
    DeadKernelError, and asyncio reported it ("Task exception was never retrieved", a traceback) as the task was
    freed, after ``benchlib: terminated`` (the soak met it: benchmarks/soak.py --size tiny)."""
    from nbclient.exceptions import DeadKernelError

    from benchlib.cli import studies
    from benchlib.errors import Terminated

    def terminated_while_a_cell_waits(_args):
        loop = asyncio.new_event_loop()

        async def cell():
            raise DeadKernelError("Kernel died")

        task = loop.create_task(cell())
        loop.run_until_complete(asyncio.sleep(0))  # the cell's task fails; nobody looks at its exception
        loop.close()
        assert task.done()
        raise Terminated()  # the task is held by this frame, the frame by the traceback the command handles

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(studies, "cmd_study", terminated_while_a_cell_waits)
        assert main(_argv(tmp_path, _params(tmp_path))) == EXIT_TERMINATED
    gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()], caplog.text
    assert capsys.readouterr().err.strip().splitlines()[-1] == "benchlib: terminated"
