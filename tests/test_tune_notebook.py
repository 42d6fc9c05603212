"""`benchlib tune`: one Optuna study per pair through the tune notebook, default trial first."""
from __future__ import annotations

import pytest
import yaml
from conftest import NEEDS_OPTUNA

from benchlib.cli import main


def _params(tmp_path, tune):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({
        "study": "tn", "hardware": ["cpu"], "models": ["squeezenet1_1"], "batch_sizes": [8], "dataset": "digits",
        "image_size": 32, "train_subset": 64, "test_subset": 32, "epochs": 1, "warmup_steps": 1, "threads": 1,
        "tune": tune}))
    return path


@pytest.mark.notebook
def test_tune_command_runs_the_notebook_and_exports(tmp_path):
    params = _params(
        tmp_path, {"n_trials": 2, "seed": 1, "search_space": {"batch_size": [8, 16], "lr": {"low": 0.001, "high": 0.1}}}
    )
    code = main(["tune", str(params), "--results-root", str(tmp_path / "r"), "--reports-root", str(tmp_path / "rep")])
    assert code == 0
    exported = yaml.safe_load((tmp_path / "r" / "tn" / "tuning" / "cpu-tuned.yaml").read_text())
    import optuna

    from benchlib.store.layout import ResultsLayout

    storage = f"sqlite:///{ResultsLayout.of(tmp_path / 'r' / 'tn').tuning_sqlite}"
    (name,) = optuna.study.get_all_study_names(storage)
    best = optuna.load_study(study_name=name, storage=storage).best_trial.params
    assert {k: exported[k] for k in best} == best, "the export is the best trial's parameters"
    assert exported["batch_size"] in (8, 16) and 0.001 <= exported["lr"] <= 0.1
    html = (tmp_path / "rep" / "tn" / "tune" / "cpu__squeezenet1_1.html").read_text()
    assert "test_accuracy_vs_default" in html, "the best trial is shown against the default trial"
    assert 'tn/tune/cpu__squeezenet1_1.html' in (tmp_path / "rep" / "index.html").read_text()


@NEEDS_OPTUNA
@pytest.mark.parametrize("tune,message", [
    ({"n_trials": 0, "search_space": {"lr": {"low": 0.01, "high": 0.1}}}, "key 'tune.n_trials' is 0"),
    ({"search_space": {"lr": {"low": 0.01, "high": 0.1}}, "objective": "speed"}, "key 'tune.objective' is 'speed'"),
    ({"n_trials": 2}, "key 'tune.search_space' is missing"),
    ({"search_space": {"colour": [1]}}, "search_space.colour"),
    ({"search_space": {"lr": {"low": 0.1, "high": 0.01}}}, "search_space.lr"),
    ({"trials": 3, "search_space": {}}, "unknown key 'tune.trials'"),
])
def test_bad_tune_sections(tmp_path, capsys, tune, message):
    assert main(["tune", str(_params(tmp_path, tune))]) == 2
    assert message in capsys.readouterr().err


@NEEDS_OPTUNA
def test_tune_needs_a_tune_section(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text("study: x\nhardware: [cpu]\nmodels: [resnet18]\nbatch_sizes: [8]\n")
    assert main(["tune", str(path)]) == 2
    assert "key 'tune' is missing" in capsys.readouterr().err
