"""Tuning studies: persistence and continuation, pruning, export of the tuned variant, Pareto fronts, figures.

Trials are tiny (64 digits images at 32 px, squeezenet, 2 epochs) and run on one torch thread: two
threads on a busy 2-core machine are many times slower than one.
"""
from __future__ import annotations

import math

import pytest

optuna = pytest.importorskip("optuna", reason="needs the tune extra (optuna): pip install 'benchlib[tune]'")
import torch
import yaml
from optuna.trial import TrialState

from benchlib.engine.train import EvalResult
from benchlib.errors import ConfigError, NonFiniteLossError
from benchlib.report.readback import tuning as tuning_report
from benchlib.run import tune as tuning
from benchlib.spec import tune as tuning_spec
from benchlib.spec.settings import RunConfig, RunSettings
from benchlib.spec.variants import parse_variant

SPACE_RAW = {"batch_size": [8, 16], "lr": {"low": 1e-3, "high": 1e-1}}


def tiny_base() -> RunConfig:
    return RunConfig("t", "cpu", "squeezenet1_1", 8, RunSettings(
        dataset="digits", image_size=32, train_subset=64, test_subset=32, epochs=2, warmup_steps=1,
        latency_repeats=3, infer_warmup_batches=1))


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def space() -> tuning_spec.SearchSpace:
    return tuning_spec.parse_search_space(SPACE_RAW, "test")


@pytest.fixture(scope="module")
def accuracy_study(tmp_path_factory, space):
    """One study tuned twice: 3 trials, then 3 more in a second invocation."""
    results = tmp_path_factory.mktemp("acc")
    first = tuning.tune_pair(tiny_base(), space, n_trials=3, objective="accuracy", results_dir=results, seed=0)
    second = tuning.tune_pair(tiny_base(), space, n_trials=3, objective="accuracy", results_dir=results, seed=0)
    return results, first, second


def _load(results, name) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tuning.storage_path(results)}")


def test_study_persists_to_sqlite_and_a_second_run_continues_it(accuracy_study):
    results, first, second = accuracy_study
    db = results / "tuning" / "optuna.sqlite3"
    assert first.storage_path == db and db.is_file()
    assert first.study_name == second.study_name == "t__testmachine__cpu__squeezenet1_1"
    assert (first.n_trials_total, second.n_trials_total) == (3, 6)
    study = _load(results, first.study_name)
    assert [t.number for t in study.trials] == list(range(6))
    assert tuning_report.list_studies(results) == [first.study_name]
    assert second.n_complete + second.n_pruned + second.n_failed == 6
    # the continued study does not replay the first run's suggestions
    params = [tuple(sorted(t.params.items())) for t in study.trials]
    assert params[3:] != params[:3]


def test_median_pruner_prunes_a_trial_below_the_completed_ones():
    study = optuna.create_study(direction="maximize", pruner=tuning.median_pruner())
    for _ in range(2):
        trial = study.ask()
        trial.report(0.90, 0)
        trial.report(0.95, 1)
        study.tell(trial, 0.95)
    good = study.ask()
    good.report(0.97, 0)
    assert not good.should_prune()
    bad = study.ask()
    bad.report(0.01, 0)
    assert bad.should_prune()


@pytest.mark.slow
def test_tune_pair_prunes_a_trial_whose_accuracy_collapses(tmp_path, space, monkeypatch):
    calls = []

    def fake_evaluate(model, loader, device, knobs=None):
        calls.append(1)
        return EvalResult(0.9 if len(calls) <= 4 else 0.0, 0.01, 32)  # trials 0 and 1: 2 epochs each at 0.9

    monkeypatch.setattr(tuning, "evaluate", fake_evaluate)
    out = tuning.tune_pair(tiny_base(), space, n_trials=3, objective="accuracy", results_dir=tmp_path)
    trials = _load(tmp_path, out.study_name).trials
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    assert trials[2].intermediate_values == {0: 0.0}  # stopped after its first epoch
    assert (out.n_complete, out.n_pruned) == (2, 1)


@pytest.mark.slow
def test_without_pruning_a_collapsing_trial_completes(tmp_path, space, monkeypatch):
    monkeypatch.setattr(tuning, "evaluate", lambda model, loader, device, knobs=None: EvalResult(0.0, 0.01, 32))
    out = tuning.tune_pair(tiny_base(), space, n_trials=3, objective="accuracy", results_dir=tmp_path,
                           pruning=False, epochs_per_trial=1)
    assert (out.n_complete, out.n_pruned) == (3, 0)


def test_a_trial_with_non_finite_loss_fails_and_the_study_goes_on(tmp_path, space, monkeypatch):
    from benchlib.engine import train as engine_train

    real_check = engine_train.check_step
    steps = []

    def check(loss, step, limit):
        steps.append(step)
        if len(steps) == 1:  # the first step of the first trial
            raise NonFiniteLossError(f"non-finite training loss (nan) at step {step}")
        real_check(loss, step, limit)

    monkeypatch.setattr(engine_train, "check_step", check)
    out = tuning.tune_pair(tiny_base(), space, n_trials=2, objective="accuracy", results_dir=tmp_path,
                           epochs_per_trial=1)
    trials = _load(tmp_path, out.study_name).trials
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]
    assert trials[0].user_attrs["status"] == "unstable"
    assert "non-finite" in trials[0].user_attrs["error"]
    assert out.best[0]["number"] == 1 and out.exported_path is not None


def test_exported_params_hold_the_searched_settings_within_the_space(accuracy_study):
    results, _, outcome = accuracy_study
    assert outcome.exported_path == results / "tuning" / "cpu-tuned.yaml"
    exported = yaml.safe_load(outcome.exported_path.read_text(encoding="utf-8"))
    assert set(exported) == {"batch_size", "lr", "source"}
    assert exported["batch_size"] in (8, 16)
    assert 1e-3 <= exported["lr"] <= 1e-1
    source = exported["source"]
    assert source["study_name"] == outcome.study_name
    study = _load(results, outcome.study_name)
    best = study.best_trial
    assert source["trial_number"] == best.number == outcome.best[0]["number"]
    assert source["values"] == [best.value]
    assert {k: exported[k] for k in best.params} == best.params
    # the run-setting keys are ones a tuned variant accepts
    variant = parse_variant({"name": "x", **{k: v for k, v in exported.items() if k != "source"}}, "test")
    assert variant.overrides == {"batch_size": exported["batch_size"], "lr": exported["lr"]}


@pytest.mark.slow
def test_both_objectives_give_a_pareto_front_and_export_its_most_accurate_trial(tmp_path, space):
    out = tuning.tune_pair(tiny_base(), space, n_trials=3, objective="both", results_dir=tmp_path)
    assert out.best and all(len(b["values"]) == 2 for b in out.best)
    complete = [t for t in _load(tmp_path, out.study_name).trials if t.state == TrialState.COMPLETE]
    for b in out.best:  # no completed trial dominates a member of the front
        a, s = b["values"]
        assert not any(t.values[0] >= a and t.values[1] >= s and t.values != [a, s] for t in complete)
    assert all(v[1] > 0 and math.isfinite(v[1]) for v in (b["values"] for b in out.best))
    exported = yaml.safe_load(out.exported_path.read_text(encoding="utf-8"))
    top = max(out.best, key=lambda b: b["values"][0])
    assert exported["source"]["trial_number"] == out.best[0]["number"]
    assert exported["source"]["values"][0] == top["values"][0]
    figures = tuning_report.tuning_figures(tmp_path, out.study_name, tmp_path / "figures")
    assert tmp_path / "figures" / f"tune__{out.study_name}__pareto.png" in figures


def test_a_study_keeps_its_objective(accuracy_study, space):
    results, first, _ = accuracy_study
    with pytest.raises(ConfigError, match="optimizes 'accuracy'"):
        tuning.tune_pair(tiny_base(), space, n_trials=1, objective="both", results_dir=results)


def test_study_frame_lists_every_trial(accuracy_study):
    results, first, _ = accuracy_study
    df = tuning_report.study_frame(results, first.study_name)
    assert list(df["number"]) == list(range(6))
    assert set(df["state"]) <= {"COMPLETE", "PRUNED", "FAIL"}
    complete = df[df["state"] == "COMPLETE"]
    assert (complete["test_accuracy"].between(0, 1)).all()
    assert (df["duration_s"] > 0).all()
    assert set(df["params_batch_size"]) <= {8, 16}


def test_search_space_parses_yaml_and_refuses_bad_keys():
    raw = yaml.safe_load("batch_size: [16, 32, 64]\nlr: {low: 1e-4, high: 1e-1}\noptimizer: [sgd, adam]\n"
                         "weight_decay: {low: 1e-6, high: 1e-3}\nmomentum: {low: 0.8, high: 0.99}\n")
    space = tuning_spec.parse_search_space(raw, "p.yaml")
    assert space == tuning_spec.SearchSpace((16, 32, 64), (1e-4, 0.1), ("sgd", "adam"), (1e-6, 1e-3), (0.8, 0.99))
    with pytest.raises(ConfigError, match=r"p.yaml: unknown key 'search_space.learning_rate'.*allowed keys"):
        tuning_spec.parse_search_space({"learning_rate": {"low": 0.1, "high": 0.2}}, "p.yaml")
    with pytest.raises(ConfigError, match=r"key 'search_space.lr' .*allowed: \{low: A, high: B\}"):
        tuning_spec.parse_search_space({"lr": {"low": 0.1, "high": 0.01}}, "p.yaml")
    with pytest.raises(ConfigError, match=r"key 'search_space.weight_decay'"):
        tuning_spec.parse_search_space({"weight_decay": {"low": 0.0, "high": 0.01}}, "p.yaml")
    with pytest.raises(ConfigError, match=r"key 'search_space.optimizer' has 'rmsprop'"):
        tuning_spec.parse_search_space({"optimizer": ["sgd", "rmsprop"]}, "p.yaml")
    with pytest.raises(ConfigError, match=r"search_space.batch_size' has 4096, larger than the 64"):
        tuning.tune_pair(tiny_base(), tuning_spec.SearchSpace(batch_size=(8, 4096)), n_trials=1, objective="accuracy",
                         results_dir=".")


def test_figures_from_a_small_study(accuracy_study, tmp_path):
    results, first, _ = accuracy_study
    reasons: list[str] = []
    figures = tuning_report.tuning_figures(results, first.study_name, tmp_path, progress=reasons.append)
    history = tmp_path / f"tune__{first.study_name}__history.png"
    assert figures[0] == history
    assert history.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    importances = tmp_path / f"tune__{first.study_name}__importances.png"
    assert importances in figures or any("importances" in r for r in reasons)
    assert all(p.is_file() for p in figures)
