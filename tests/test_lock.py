"""The results folder's lock (issue 37): exactly one of many simultaneous takers wins, a dead holder's lock is
simply taken, a full disk leaves none behind, and a whole study and a SLURM pair task never share a folder."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from lock_holder import held_elsewhere

from benchlib.errors import ConfigError, FolderLocked
from benchlib.pipeline import study as study_pipeline
from benchlib.spec.study import parse_study
from benchlib.store.lock import folder_lock, lock_path

TRIALS = 200
TAKERS = 4
BARRIER_S = 30.0


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def _leave_stale_lock(folder: Path, pid: int) -> None:
    """The lock file a study killed mid-way leaves: its holder recorded, the holder gone."""
    path = lock_path(folder)
    path.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "started_utc": "2026-01-01T00:00:00Z",
                                "command": "benchlib study"}))


class Tally:
    """What the takers of every trial saw: the wins of each trial and the most holders at one moment."""

    def __init__(self, ctx) -> None:  # noqa: ANN001 (threading or a multiprocessing context)
        self.wins = ctx.Array("i", TRIALS)
        self.holding = ctx.Value("i", 0)
        self.most = ctx.Value("i", 0)
        self.errors = ctx.Value("i", 0)


def _taker(folder: Path, tally: Tally, start, tried, released) -> None:  # noqa: ANN001 (barriers)
    """One taker: each trial, take the lock once at the start signal; a winner holds it until every taker has
    tried, so two winners of one trial would be two holders at once."""
    warnings.simplefilter("ignore")  # "taking over a lock of process N": the stale trials' expected warning
    for trial in range(TRIALS):
        start.wait(BARRIER_S)
        try:
            with folder_lock(folder):
                with tally.holding.get_lock():
                    tally.holding.value += 1
                    tally.most.value = max(tally.most.value, tally.holding.value)
                with tally.wins.get_lock():
                    tally.wins[trial] += 1
                tried.wait(BARRIER_S)
                with tally.holding.get_lock():
                    tally.holding.value -= 1
        except FolderLocked:
            tried.wait(BARRIER_S)
        except Exception:  # anything else is a failure of the lock, counted, and the trials go on
            with tally.errors.get_lock():
                tally.errors.value += 1
            tried.wait(BARRIER_S)
        released.wait(BARRIER_S)


class _ThreadCtx:
    """The threading counterparts of multiprocessing's shared Array and Value (each with its lock)."""

    class _Shared(list):
        def __init__(self, items: list[int]) -> None:
            super().__init__(items)
            self._lock = threading.Lock()

        def get_lock(self) -> threading.Lock:
            return self._lock

        @property
        def value(self) -> int:
            return self[0]

        @value.setter
        def value(self, v: int) -> None:
            self[0] = v

    def Array(self, _code: str, n: int) -> _Shared:  # noqa: N802 (multiprocessing's name)
        return self._Shared([0] * n)

    def Value(self, _code: str, v: int) -> _Shared:  # noqa: N802
        return self._Shared([v])


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_of_simultaneous_takers_exactly_one_holds_the_lock(tmp_path, how):
    """200 trials of 4 takers at once, on a fresh folder and on a lock file a dead holder left (every other
    trial): each trial exactly one winner, never two holders at once, and no lock file left at the end."""
    folder = tmp_path / "r"
    folder.mkdir()
    dead = _dead_pid()
    if how == "threads":
        tally = Tally(_ThreadCtx())
        barriers = [threading.Barrier(TAKERS + 1) for _ in range(3)]
        takers = [threading.Thread(target=_taker, args=(folder, tally, *barriers), daemon=True)
                  for _ in range(TAKERS)]
    else:
        ctx = mp.get_context("fork")  # the takers only take locks: started in milliseconds
        tally = Tally(ctx)
        barriers = [ctx.Barrier(TAKERS + 1) for _ in range(3)]
        takers = [ctx.Process(target=_taker, args=(folder, tally, *barriers), daemon=True) for _ in range(TAKERS)]
    start, tried, released = barriers
    for taker in takers:
        taker.start()
    try:
        for trial in range(TRIALS):
            if trial % 2:
                _leave_stale_lock(folder, dead)
            start.wait(BARRIER_S)
            tried.wait(BARRIER_S)
            released.wait(BARRIER_S)
    finally:
        for taker in takers:
            taker.join(BARRIER_S)
    wins = list(tally.wins)
    assert tally.errors.value == 0
    assert tally.most.value == 1, "two takers held the lock at once"
    assert [t for t, n in enumerate(wins) if n != 1] == [], f"trials without exactly one winner: {wins}"
    assert list(folder.iterdir()) == [], "the last holder removes the lock file"


def test_a_lock_whose_holder_was_killed_is_taken_naming_it(tmp_path):
    folder = tmp_path / "r"
    ctx = mp.get_context("fork")
    ready = ctx.Event()

    def hold_then_wait() -> None:
        with folder_lock(folder):
            ready.set()
            threading.Event().wait(60)

    proc = ctx.Process(target=hold_then_wait, daemon=True)
    proc.start()
    assert ready.wait(30)
    with pytest.raises(FolderLocked, match=f"in use by process {proc.pid} on this host"):
        with folder_lock(folder):
            pass
    proc.kill()  # SIGKILL: no cleanup of its own; the kernel lets its lock go
    proc.join(30)
    with pytest.warns(UserWarning, match=f"taking over a lock of process {proc.pid} .*which no longer runs"):
        with folder_lock(folder) as path:
            assert json.loads(path.read_text())["pid"] == os.getpid()
    assert not path.exists()


# ---------------------------------------------------------------- a whole study and SLURM pair tasks

def test_pair_tasks_of_different_pairs_run_side_by_side_and_of_one_pair_refuse(tmp_path):
    folder = tmp_path / "r"
    with held_elsewhere(folder, pair=0) as task0:
        with folder_lock(folder, pair=1):
            with pytest.raises(FolderLocked, match=f"pair 0 of results folder .* is being run by process {task0} "
                                                   ".*allowed: one task per pair at a time"):
                with folder_lock(folder, pair=0):
                    pass
    assert list(folder.iterdir()) == [], "the last task out removes the study's lock file too"


def test_a_whole_study_refuses_a_folder_where_pair_tasks_run_naming_them(tmp_path):
    folder = tmp_path / "r"
    with held_elsewhere(folder, pair=0) as task0, held_elsewhere(folder, pair=2) as task2:
        with pytest.raises(FolderLocked) as refused:
            with folder_lock(folder):
                pass
    said = str(refused.value)
    assert "\n" not in said and "2 SLURM pair task(s)" in said, said
    assert f"pair-0 by process {task0}" in said and f"pair-2 by process {task2}" in said, said
    with folder_lock(folder):  # once they are done
        pass


def test_a_pair_task_refuses_a_folder_a_whole_study_holds_naming_it(tmp_path):
    folder = tmp_path / "r"
    with held_elsewhere(folder) as whole:
        with pytest.raises(FolderLocked, match=f"in use by process {whole} on this host .*allowed: one study per"):
            with folder_lock(folder, pair=0):
                pass
    assert list(folder.iterdir()) == []


TINY = {"dataset": "digits", "image_size": 32, "train_subset": 64, "test_subset": 32, "train_steps": 2,
        "warmup_steps": 1, "latency_repeats": 3, "latency_budget_s": 0, "infer_warmup_batches": 1}


@pytest.fixture
def two_pair_study(tmp_path, monkeypatch):
    """A study of two pairs whose run (past the lock) is recorded, not measured."""
    ran: list[int | None] = []

    def recorded(cfg, paths, *, only_pair, **_kwargs):
        ran.append(only_pair)
        return study_pipeline.StudyOutcome(1, 0, 0, 0)

    monkeypatch.setattr(study_pipeline, "_run_study", recorded)
    cfg = parse_study({"study": "s", "hardware": ["cpu"], "models": ["squeezenet1_1", "resnet18"],
                       "batch_sizes": [4], **TINY}, "s.yaml")
    return cfg, ran


def _run(cfg, tmp_path, **kwargs):
    return study_pipeline.run_study(cfg, results_root=tmp_path / "results", reports_root=tmp_path / "reports",
                                    **kwargs)


def test_a_whole_study_and_a_pair_task_of_it_never_run_on_one_folder(tmp_path, two_pair_study):
    """Both ways: a whole study meets a running pair task, a pair task meets a running whole study; neither
    measures. Two tasks of different pairs both run."""
    cfg, ran = two_pair_study
    folder = tmp_path / "results" / "s"
    with held_elsewhere(folder, pair=1) as task:
        with pytest.raises(FolderLocked, match=f"pair-1 by process {task}"):
            _run(cfg, tmp_path)
        _run(cfg, tmp_path, only_pair=0)
    with held_elsewhere(folder) as whole:
        with pytest.raises(FolderLocked, match=f"in use by process {whole}"):
            _run(cfg, tmp_path, only_pair=0)
    assert ran == [0]
    _run(cfg, tmp_path)
    assert ran == [0, None] and list(folder.iterdir()) == []


def test_fresh_with_a_pair_is_refused(tmp_path, two_pair_study):
    cfg, ran = two_pair_study
    with pytest.raises(ConfigError, match="--fresh with --pair"):
        _run(cfg, tmp_path, only_pair=0, fresh=True)
    assert ran == []
