"""SLURM job arrays: valid bash with the array size and resources asked for."""
from __future__ import annotations

import subprocess

import pytest

from benchlib.cli import main


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
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    params = tmp_path / "p.yaml"
    params.write_text("study: cl\nhardware: [cpu]\nmodels: [resnet18]\nbatch_sizes: [64]\n")
    assert main(["slurm", str(params), *args]) == 2
    assert message in capsys.readouterr().err


def test_study_pair_out_of_range(tmp_path, capsys):
    params = tmp_path / "p.yaml"
    params.write_text("study: cl\nhardware: [cpu]\nmodels: [resnet18]\nbatch_sizes: [64]\n")
    assert main(["study", str(params), "--pair", "3", "--results-root", str(tmp_path / "r")]) == 2
    assert "--pair 3; allowed: 0..0" in capsys.readouterr().err
