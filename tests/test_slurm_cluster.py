"""benchlib on a real one-node SLURM: a study array submitted and waited for, a failed task re-submitted,
tuning workers sharing one study, and a data-parallel run through srun.

Skipped with the reason where SLURM is not installed or the user is not root (``.ci/run`` installs
``slurm-wlm`` and ``munge`` where it may). The cluster's daemons are stopped when the module ends, also
after a failure. Timings are printed (run with ``-s``), never asserted.
"""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

optuna = pytest.importorskip("optuna", reason="needs the tune extra (optuna): pip install 'benchlib[tune]'")
import yaml
from conftest import seed_ceilings
from optuna.trial import TrialState
from slurm_cluster import missing_reason, one_node_cluster

from benchlib.cli import main
from benchlib.pipeline import slurm_jobs
from benchlib.store.layout import ResultsLayout
from benchlib.store.rows import read_results
from benchlib.store.tuning_storage import open_storage

pytestmark = pytest.mark.slurm

TINY = {"dataset": "digits", "image_size": 32, "train_subset": 64, "test_subset": 32, "train_steps": 2,
        "warmup_steps": 1, "latency_repeats": 3, "latency_budget_s": 0,
        "infer_warmup_batches": 1}
FINISHED = re.compile(r"trial \d+ (complete|fail|pruned) \(")  # a worker's line per trial it ran
WAIT_S = 600  # a generous bound on one submit-and-wait: a test fails instead of hanging


@pytest.fixture(scope="module")
def cluster():
    if reason := missing_reason():
        pytest.skip(reason)
    with one_node_cluster() as c, pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(c.conf))
        print(f"\n[slurm] one-node SLURM ({c.node}, {c.cpus} CPUs) idle after {c.started_in_s:.1f} s")
        yield c


def _benchlib(capfd, cwd: Path, *args: str, **env: str) -> SimpleNamespace:
    """The command run in this process, in ``cwd`` with ``env`` added (sbatch hands the environment to the
    tasks): a process of its own cost about 4 s here, and what is tested is the cluster's side."""
    t0 = time.monotonic()
    capfd.readouterr()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        for key, value in env.items():
            mp.setenv(key, value)
        code = main(list(args))
    out, err = capfd.readouterr()
    print(f"[slurm] benchlib {' '.join(args)}: exit {code} after {time.monotonic() - t0:.0f} s")
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def _params(tmp_path: Path, **extra) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"study": "s", "hardware": ["cpu"], "models": ["squeezenet1_1", "resnet18"],
                                    "batch_sizes": [8], "calibrate": False, "ceilings_at_end": False, **TINY, **extra}))
    seed_ceilings(tmp_path / "results" / "s")
    return path


def _job_id(stdout: str) -> str:
    return stdout.split("Submitted batch job ")[1].split()[0]


def test_a_study_array_waits_reports_names_a_failed_task_and_resumes_it(cluster, tmp_path, capfd):
    params = _params(tmp_path)
    common = ("--cpus-per-task", "1", "--mem", "1G", "--time", "00:15:00")
    # the resnet18 pair's notebook raises: its task exits 1 and --wait names it
    first = _benchlib(capfd, tmp_path, "slurm", str(params), *common, "--submit", "--wait",
                      BENCHLIB_FAULT="raise@resnet18")
    assert first.returncode == 1, first.stderr[-3000:]
    job = _job_id(first.stdout)
    assert f"task 1 of job {job}: exit status 1" in first.stderr
    assert "--submit --wait --pair 1" in first.stderr
    assert f"task 0 of job {job}" not in first.stderr
    assert (tmp_path / "reports" / "s" / "summary.html").is_file(), "the report is built from the rows there are"
    before = read_results([tmp_path / "results" / "s"]).set_index("model")["status"].to_dict()
    assert before == {"squeezenet1_1": "ok", "resnet18": "failed"}

    # re-submitted alone, the task resumes its pair: the complete row stays, the failed one is measured again
    again = _benchlib(capfd, tmp_path, "slurm", str(params), *common, "--submit", "--wait", "--pair", "1")
    assert again.returncode == 0, again.stderr[-3000:]
    df = read_results([tmp_path / "results" / "s"])
    assert sorted(df["model"]) == ["resnet18", "squeezenet1_1"], "one row per pair"
    assert (df["status"] == "ok").all()
    assert (df["threads"] == 1).all(), "a row's threads are the CPUs SLURM gave the task (--cpus-per-task 1)"
    assert (df["threads_source"] == "slurm").all()
    logs = sorted((tmp_path / "slurm").glob("s-*.out"))
    assert len(logs) == 3 and not any("\r" in p.read_text() for p in logs), "plain lines in the tasks' logs"
    assert "job " in again.stderr and "task(s) ended" in again.stderr, "--wait says how the tasks stand"


def test_without_wait_the_commands_to_wait_and_report_are_printed(cluster, tmp_path, capfd):
    params = _params(tmp_path, models=["squeezenet1_1"])
    done = _benchlib(capfd, tmp_path, "slurm", str(params), "--cpus-per-task", "1", "--mem", "1G", "--submit")
    assert done.returncode == 0, done.stderr[-3000:]
    job = _job_id(done.stdout)
    assert f"slurm {params} --job {job}" in done.stdout
    assert "report results/s" in done.stdout
    subprocess.run(["scancel", job], timeout=30, check=True)  # what the printed commands do is the test above


def test_two_tuning_workers_share_one_study_without_locks_or_duplicates(cluster, tmp_path, capfd):
    params = _params(tmp_path, models=["squeezenet1_1"], tune={
        "n_trials": 4, "epochs_per_trial": 1, "pruning": False, "seed": 3,
        "search_space": {"lr": {"low": 0.001, "high": 0.03}, "batch_size": [8, 16]}})  # no rate that diverges
    done = _benchlib(capfd, tmp_path, "tune", str(params), "--slurm", "2", "--wait", "--cpus-per-task", "1",
                     "--mem", "1G")
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    results = tmp_path / "results" / "s"
    layout = ResultsLayout.of(results)
    assert layout.tuning_journal.is_file() and not layout.tuning_sqlite.exists()
    logs = {p.name: p.read_text() for p in (tmp_path / "slurm").glob("*.out")}
    assert len(logs) == 3, sorted(logs)  # two workers and the job after them
    assert not any("database is locked" in text for text in logs.values())
    for worker in (0, 1):
        text = next(t for n, t in logs.items() if n.endswith(f"_{worker}.out") and "-tune-" in n)
        assert f"worker {worker} of 2" in text and len(FINISHED.findall(text)) == 2, text[-2000:]
    names = optuna.get_all_study_names(open_storage(results))
    assert len(names) == 1
    trials = optuna.load_study(study_name=names[0], storage=open_storage(results)).get_trials()
    assert len(trials) == 4 and len({t.number for t in trials}) == 4, "4 trials in all, not 4 per worker"
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials), "none left running or waiting"
    assert sum(bool(t.user_attrs.get("default")) for t in trials) == 1, "the default trial runs once"
    params_seen = [json.dumps(t.params, sort_keys=True) for t in trials]
    assert len(set(params_seen)) == 4, f"no trial repeats another's settings: {params_seen}"
    exported = yaml.safe_load((tmp_path / "results" / "tuned" / "cpu-tuned.yaml").read_text())
    assert exported["source"]["study_name"] == names[0] and exported["source"]["storage"].endswith("optuna.journal")
    assert (tmp_path / "reports" / "s" / "tune" / "cpu__squeezenet1_1.html").is_file(), "reported once, at the end"


def test_data_parallel_job_runs_torchrun_under_srun(cluster, tmp_path, capfd):
    cpus = min(2, cluster.cpus)
    params = _params(tmp_path, models=["squeezenet1_1"])
    done = _benchlib(capfd, tmp_path, "slurm", str(params), "--nodes", "1", "--nproc-per-node", "2", "--cpus-per-task",
                     str(cpus), "--mem", "2G", "--submit")
    assert done.returncode == 0, done.stderr[-3000:]
    job = slurm_jobs.Job(_job_id(done.stdout), "s-ddp1x2", tmp_path / "slurm", (0,), array=False)
    slurm_jobs.wait([job], say=print)
    assert slurm_jobs.failures(job) == [], job.out_file(0).read_text()[-3000:]
    row = read_results([tmp_path / "results" / "s"]).iloc[0]
    assert row["status"] == "ok" and row["world_size"] == 2 and row["distributed_backend"] == "gloo"
    assert row["run_id"].endswith("__ddp2__seed0")
    assert (row["threads"], row["threads_source"]) == (max(1, cpus // 2), "slurm"), "SLURM's CPUs shared by 2 ranks"
