"""SLURM scripts (arrays, tuning workers, data-parallel jobs), their options, and watching jobs, without a
cluster: tests/test_slurm_cluster.py runs them on a real one."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest
import yaml
from conftest import NEEDS_OPTUNA

from benchlib.cli import main
from benchlib.pipeline import progress, publish, slurm_jobs, study

BASH = shutil.which("bash") or "/bin/bash"  # found before a test empties PATH


def test_slurm_script_is_valid_bash_with_array_and_resources(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = tmp_path / "p.yaml"
    params.write_text("study: cl\nhardware: [cuda, cpu]\nmodels: [resnet18, mobilenet_v2]\nbatch_sizes: [64]\n")
    assert main(["slurm", str(params), "--time", "01:30:00", "--cpus-per-task", "8", "--mem", "32G",
                 "--gpus-per-task", "1", "--partition", "gpu"]) == 0
    script = tmp_path / "slurm" / "cl.sbatch"
    assert capsys.readouterr().out.strip() == "slurm/cl.sbatch"
    text = script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    for line in ("#SBATCH --array=0-3", "#SBATCH --time=01:30:00", "#SBATCH --cpus-per-task=8",
                 "#SBATCH --mem=32G", "#SBATCH --gpus-per-task=1", "#SBATCH --partition=gpu"):
        assert line in text.splitlines()
    assert '--pair "${SLURM_ARRAY_TASK_ID}" --no-summary' in text
    assert 'export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"' in text
    assert "task 3: cpu / mobilenet_v2" in text


@pytest.mark.parametrize("args,message", [
    (["--time", "2h"], "--time '2h'; allowed: [D-]HH:MM[:SS]"),
    (["--cpus-per-task", "0"], "--cpus-per-task 0; allowed: integers >= 1"),
    (["--mem", "lots"], "--mem 'lots'"),
    (["--partition", "gpu; rm -rf /"], "--partition 'gpu; rm -rf /'"),
    (["--submit"], "sbatch is not on PATH"),
])
def test_slurm_bad_options(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "no-slurm").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm"))  # a cluster's login node has sbatch in /usr/bin
    params = tmp_path / "p.yaml"
    params.write_text("study: cl\nhardware: [cpu]\nmodels: [resnet18]\nbatch_sizes: [64]\n")
    assert main(["slurm", str(params), *args]) == 2
    assert message in capsys.readouterr().err


def test_study_pair_out_of_range(tmp_path, capsys):
    params = tmp_path / "p.yaml"
    params.write_text("study: cl\nhardware: [cpu]\nmodels: [resnet18]\nbatch_sizes: [64]\n")
    assert main(["study", str(params), "--pair", "3", "--results-root", str(tmp_path / "r")]) == 2
    assert "--pair 3; allowed: 0..0" in capsys.readouterr().err


def _write(tmp_path, text: str):
    params = tmp_path / "p.yaml"
    params.write_text(text)
    return params


def test_array_tasks_write_their_exit_status_and_pass_the_roots_on(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = _write(tmp_path, "study: cl\nhardware: [cpu]\nmodels: [resnet18, mobilenet_v2]\nbatch_sizes: [8]\n")
    assert main(["slurm", str(params), "--out-dir", "jobs", "--results-root", "out/r", "--cell-timeout", "60"]) == 0
    text = (tmp_path / "jobs" / "cl.sbatch").read_text()
    assert f"#SBATCH --output={tmp_path}/jobs/cl-%A_%a.out" in text
    assert "--results-root out/r --reports-root reports --cell-timeout 60 || status=$?" in text
    assert f'echo "$status" > {tmp_path}/jobs/cl-"${{SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}}_' in text
    assert f"{sys.executable} -m benchlib study" in text, "the tasks run the python that wrote the script"


def test_a_data_parallel_job_over_nodes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = _write(tmp_path, "study: cl\nhardware: [cuda]\nmodels: [resnet50]\nbatch_sizes: [256, 512]\n"
                              "precision: amp_bf16\n")
    assert main(["slurm", str(params), "--nodes", "4", "--gpus-per-node", "8", "--cpus-per-task", "32"]) == 0
    script = tmp_path / "slurm" / "cl-ddp4x8.sbatch"
    assert capsys.readouterr().out.strip() == "slurm/cl-ddp4x8.sbatch"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --cpus-per-task=32", 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'):
        assert line in text.splitlines()
    assert "srun --ntasks-per-node=1 --cpus-per-task=32" in text, "srun is told the CPUs again (SLURM >= 22.05)"
    assert '--nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node=8 --rdzv-backend=c10d' in text
    assert '--rdzv-endpoint="$head:$((port + i))"' in text
    runs = [ln for ln in text.splitlines() if ln.startswith("i=")]
    assert len(runs) == 2 and "--batch-size 256" in runs[0] and "--batch-size 512" in runs[1]
    assert "--device cuda" in runs[0] and "--set precision=amp_bf16" in runs[0]
    assert "32 rank(s)" in text


@pytest.mark.parametrize("text,args,message", [
    ("hardware: ['cuda:1']", ["--nodes", "2"], "hardware cuda:1 with --nodes"),
    ("hardware: [cpu]", ["--nodes", "2", "--pair", "0"], "--pair with --nodes"),
    ("hardware: [cpu]", ["--nproc-per-node", "2"], "without --nodes"),
    ("hardware: [cpu]", ["--nodes", "0"], "--nodes 0; allowed: integers >= 1"),
    ("hardware: [cpu]", ["--pair", "5", "--submit"], "--pair 5; allowed: 0..0"),
    ("hardware: [cpu]", ["--submit", "--job", "12"], "--submit with --job"),
])
def test_slurm_bad_cluster_options(tmp_path, capsys, monkeypatch, text, args, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    params = _write(tmp_path, f"study: cl\n{text}\nmodels: [resnet18]\nbatch_sizes: [8]\n")
    assert main(["slurm", str(params), *args]) == 2
    assert message in capsys.readouterr().err


def _tune_params(tmp_path, **tune):
    return _write(tmp_path, yaml.safe_dump({
        "study": "tu", "hardware": ["cpu"], "models": ["squeezenet1_1"], "batch_sizes": [8],
        "tune": {"n_trials": 4, "search_space": {"lr": {"low": 0.001, "high": 0.1}}, **tune}}))


@NEEDS_OPTUNA
def test_tuning_workers_and_the_job_after_them(tmp_path, capsys, monkeypatch):
    """Scripts are written, then submission stops at the missing sbatch before anything else changes."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    params = _tune_params(tmp_path, workers=3)
    assert main(["tune", str(params), "--cpus-per-task", "2"]) == 2
    assert "sbatch is not on PATH" in capsys.readouterr().err
    workers = (tmp_path / "slurm" / "tu-tune.sbatch").read_text()
    finish = (tmp_path / "slurm" / "tu-tune-finish.sbatch").read_text()
    assert "#SBATCH --array=0-2" in workers.splitlines()
    assert '--worker "${SLURM_ARRAY_TASK_ID}" --slurm 3' in workers
    assert "--finish" in finish and "#SBATCH --array" not in finish
    for text in (workers, finish):  # every task opens the same studies: one machine name for the partition
        assert 'export BENCHLIB_MACHINE="${BENCHLIB_MACHINE:-${SLURM_CLUSTER_NAME:-slurm}-' in text
        assert subprocess.run([BASH, "-n"], input=text, text=True).returncode == 0
    assert not (tmp_path / "results" / "tu" / "tuning").exists()


@NEEDS_OPTUNA
@pytest.mark.parametrize("args,tune,message", [
    (["--slurm", "5"], {}, "--slurm 5; allowed: 1..4"),
    (["--slurm", "0"], {}, "--slurm 0; allowed: integers >= 1"),
    ([], {"workers": 0}, "key 'tune.workers' is 0"),
    (["--worker", "3", "--slurm", "2"], {}, "--worker 3; allowed: 0..1"),
])
def test_bad_tuning_worker_counts(tmp_path, capsys, monkeypatch, args, tune, message):
    monkeypatch.chdir(tmp_path)
    assert main(["tune", str(_tune_params(tmp_path, **tune)), *args]) == 2
    assert message in capsys.readouterr().err


def _fake_squeue(tmp_path, monkeypatch, answers: list[str]) -> None:
    """An squeue on PATH that gives one answer per call, then nothing (every task ended)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for i, answer in enumerate(answers):
        (bin_dir / f"answer{i}").write_text(answer)
    (bin_dir / "squeue").write_text(f"""#!/usr/bin/env bash
n=$(cat {bin_dir}/count 2>/dev/null || echo 0); echo $((n + 1)) > {bin_dir}/count
cat {bin_dir}/answer$n 2>/dev/null || true
""")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_wait_polls_squeue_until_no_task_is_left_and_judges_tasks_by_their_exit_files(tmp_path, monkeypatch):
    _fake_squeue(tmp_path, monkeypatch, ["7_0 RUNNING\n7_1 PENDING\n", "7_0 RUNNING\n7_1 PENDING\n", "7_1 RUNNING\n"])
    job = slurm_jobs.Job("7", "cl", tmp_path, (0, 1, 2))
    said: list[str] = []
    slurm_jobs.wait([job], say=said.append, poll_s=0.01)
    assert said[0].startswith("job 7: 1 pending, 1 running; 1 of 3 task(s) ended")
    assert said[-1].startswith("job 7: none queued; 3 of 3 task(s) ended")
    assert len(said) == 3, "a line when the counts change, not one per poll"
    (tmp_path / "cl-7_0.exit").write_text("0\n")
    (tmp_path / "cl-7_1.exit").write_text("1\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no scontrol: no SLURM state for the killed task
    failed = {f.task: f.reason for f in slurm_jobs.failures(job)}
    assert failed == {1: "exit status 1", 2: "no exit status: killed before its end (time limit, preemption, "
                                              "memory or node failure)"}


def test_without_a_terminal_progress_is_plain_lines(tmp_path, monkeypatch):
    """No papermill bar (its \\r updates would fill a SLURM .out), a line a minute instead."""
    seen = {}
    monkeypatch.setattr(publish, "execute", lambda *a, **kw: seen.update(kw))
    study.execute(tmp_path / "n.ipynb", tmp_path / "o.ipynb", {}, cwd=tmp_path, cell_timeout_s=1, label="pair 1/1")
    assert seen["progress"] is False
    said: list[str] = []
    with progress.heartbeat("pair 1/2 (cpu / resnet18)", every_s=0.02, say=said.append):
        time.sleep(0.1)
    assert said and all(s.startswith("pair 1/2 (cpu / resnet18): still running after") for s in said)


@pytest.mark.parametrize("command,args,message", [
    ("slurm", ["--wait"], "--wait without --submit"),
    ("slurm", ["--job", "abc"], "--job 'abc'; allowed: a SLURM job id"),
    pytest.param("tune", ["--wait"], "--wait without SLURM workers", marks=NEEDS_OPTUNA),
    pytest.param("tune", ["--worker", "0", "--finish"], "--worker with --finish", marks=NEEDS_OPTUNA),
])
def test_options_that_do_not_go_together(tmp_path, capsys, monkeypatch, command, args, message):
    monkeypatch.chdir(tmp_path)
    assert main([command, str(_tune_params(tmp_path)), *args]) == 2
    assert message in capsys.readouterr().err
