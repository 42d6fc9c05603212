"""Tuning shared by parallel workers: one journal file, every trial once, the default trial once, a study
that stays resumable (SQLite studies copied into the journal; trials a dead worker left running failed).

Workers here are local processes; tests/test_slurm_cluster.py runs them as SLURM array tasks.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

optuna = pytest.importorskip("optuna", reason="needs the tune extra (optuna): pip install 'benchlib[tune]'")
import yaml
from optuna.trial import TrialState

from benchlib.run import tune as tuning
from benchlib.spec import tune as tuning_spec
from benchlib.spec.settings import RunConfig, RunSettings
from benchlib.store.layout import ResultsLayout
from benchlib.store.tuning_storage import SQLITE_SET_ASIDE_SUFFIX, move_to_journal, open_storage

TINY = {"dataset": "digits", "image_size": 32, "train_subset": 64, "test_subset": 32, "warmup_steps": 1,
        "threads": 1}
SPACE = {"batch_size": [8, 16], "lr": {"low": 1e-3, "high": 3e-2}}  # no rate that diverges
FINISHED = re.compile(r"trial \d+ (complete|fail|pruned) \(")  # a worker's line per trial it ran


def _base() -> RunConfig:
    return RunConfig("s", "cpu", "squeezenet1_1", 8, RunSettings.of(epochs=1, **TINY))


def _study(results) -> optuna.Study:
    names = optuna.get_all_study_names(open_storage(results))
    assert len(names) == 1
    return optuna.load_study(study_name=names[0], storage=open_storage(results))


@pytest.mark.parametrize("n_trials", range(1, 8))
def test_workers_split_the_trials_exactly(n_trials):
    for workers in range(1, n_trials + 1):
        shares = [tuning.trial_share(n_trials, workers, w) for w in range(workers)]
        assert sum(shares) == n_trials and max(shares) - min(shares) <= 1 and min(shares) >= 1


@pytest.mark.slow
def test_two_worker_processes_share_one_study_without_a_lock_error_or_a_duplicate(tmp_path):
    params = tmp_path / "s.yaml"
    params.write_text(yaml.safe_dump({"study": "s", "hardware": ["cpu"], "models": ["squeezenet1_1"],
                                      "batch_sizes": [8], "epochs": 1, **TINY,
                                      "tune": {"n_trials": 5, "pruning": False, "search_space": SPACE}}))
    procs = [subprocess.Popen([sys.executable, "-m", "benchlib", "tune", str(params), "--worker", str(w), "--slurm",
                               "2", "--results-root", str(tmp_path / "results")], stderr=subprocess.PIPE, text=True)
             for w in (0, 1)]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert not any("database is locked" in e for e in errs)
    assert [len(FINISHED.findall(e)) for e in errs] == [3, 2], "worker 0 runs 3 of the 5 trials, worker 1 the rest"
    results = tmp_path / "results" / "s"
    layout = ResultsLayout.of(results)
    assert layout.tuning_journal.is_file() and not layout.tuning_sqlite.exists()
    assert not list(layout.tuning_dir.glob("*-tuned.yaml")), "workers export nothing: the run after them does"
    trials = _study(results).get_trials()
    assert len(trials) == 5 and all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
    assert sum(bool(t.user_attrs.get("default")) for t in trials) == 1
    assert len({json.dumps(t.params, sort_keys=True) for t in trials}) == 5, "no trial repeats another's settings"

    # the run after them adds none, exports the best once
    space = tuning_spec.parse_search_space(SPACE, "test")
    after = tuning.tune_pair(_base(), space, n_trials=0, objective="accuracy", results_dir=results)
    assert after.n_trials_total == 5 and after.storage_path == layout.tuning_journal
    assert after.exported_path == layout.tuned_export("cpu") and after.exported_path.is_file()
    assert len(_study(results).get_trials()) == 5, "finishing adds no trial (and queues none)"


def test_a_sqlite_study_moves_to_the_journal_and_continues_there(tmp_path):
    results = tmp_path / "s"
    space = tuning_spec.parse_search_space(SPACE, "test")
    first = tuning.tune_pair(_base(), space, n_trials=1, objective="accuracy", results_dir=results)
    layout = ResultsLayout.of(results)
    assert first.storage_path == layout.tuning_sqlite
    assert move_to_journal(results) == [first.study_name]
    assert not layout.tuning_sqlite.exists()
    assert layout.tuning_sqlite.with_name(layout.tuning_sqlite.name + SQLITE_SET_ASIDE_SUFFIX).is_file(), "kept aside"
    assert move_to_journal(results) == [], "once only"
    again = tuning.tune_pair(_base(), space, n_trials=1, objective="accuracy", results_dir=results)
    assert again.storage_path == layout.tuning_journal and again.n_trials_total == 2
    assert sum(bool(t.user_attrs.get("default")) for t in _study(results).get_trials()) == 1


def test_a_trial_a_dead_worker_left_running_is_failed_by_the_next_single_run(tmp_path):
    results = tmp_path / "s"
    space = tuning_spec.parse_search_space(SPACE, "test")
    name = tuning.study_name_for(_base())
    study = optuna.create_study(storage=open_storage(results, parallel=True), study_name=name,
                                directions=["maximize"])
    study.set_user_attr("objective", "accuracy")
    study.ask()  # a worker started this trial, then was killed
    out = tuning.tune_pair(_base(), space, n_trials=0, objective="accuracy", results_dir=results)
    assert out.n_failed == 1 and out.exported_path is None
    assert [t.state for t in _study(results).get_trials()] == [TrialState.FAIL]
