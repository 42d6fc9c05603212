"""Row identity: every setting that changes a measurement changes the run id, and nothing is silently reused."""
from __future__ import annotations

import json

import pytest

from benchlib.cli import main
from benchlib.run.record import run_pair
from benchlib.spec.settings import SETTING_RULES, RunConfig, RunSettings, settings_digest
from benchlib.store.rows import read_results

TINY = dict(dataset="digits", image_size=32, train_subset=64, test_subset=32, train_steps=2, warmup_steps=1,
            infer_warmup_batches=1, latency_repeats=3, epochs=1)


def _another_value(name: str, value):
    """A valid value of setting ``name`` other than ``value``."""
    rule = SETTING_RULES[name]
    if rule.choices is not None:
        return next(c for c in rule.choices if c != value)
    if rule.type is bool:
        return not value
    if rule.type is str:
        return "elsewhere" if name != "variant" else "other-variant"
    low = rule.min if rule.min is not None else (rule.min_exclusive or 0)
    if rule.type is int:
        return int(low) + 3 if value != int(low) + 3 else int(low) + 4
    return (low or 0.0) + 0.125 if value != (low or 0.0) + 0.125 else (low or 0.0) + 0.25


@pytest.mark.parametrize("name", [n for n in SETTING_RULES if n != "seed"])
def test_every_setting_changes_the_run_id(name):
    base = RunSettings.of(**TINY)
    changed = base.updated(**{name: _another_value(name, base.get(name))})
    a, b = RunConfig("s", "cpu", "resnet18", 8, base), RunConfig("s", "cpu", "resnet18", 8, changed)
    assert a.run_id != b.run_id, name


def test_the_seed_changes_the_id_but_not_the_settings_digest():
    s0, s1 = RunSettings.of(**TINY), RunSettings.of(**TINY).updated(seed=1)
    a, b = RunConfig("s", "cpu", "resnet18", 8, s0), RunConfig("s", "cpu", "resnet18", 8, s1)
    assert a.run_id != b.run_id and settings_digest(s0) == settings_digest(s1)
    assert a.run_id.replace("__seed0", "") == b.run_id.replace("__seed1", ""), "repeats share all but the seed"


def test_the_id_stays_readable_and_stable():
    cfg = RunConfig("s", "cpu", "resnet18", 64, RunSettings.of(**TINY))
    assert cfg.run_id.startswith("cpu__resnet18__bs64__default__fp32__") and cfg.run_id.endswith("__seed0")
    assert cfg.run_id == RunConfig("s", "cpu", "resnet18", 64, RunSettings.of(**TINY)).run_id


@pytest.mark.slow
def test_run_into_one_folder_never_overwrites_a_row_of_other_settings(tmp_path, capsys):
    common = ["run", "--model", "squeezenet1_1", "--batch-size", "8", "--steps", "2", "--results-dir", str(tmp_path),
              "--set", "test_subset=32", "--set", "latency_repeats=3", "--set", "latency_budget_s=0",
              "--set", "infer_warmup_batches=1", "--json"]
    assert main([*common, "--data", "digits", "--set", "train_subset=64"]) == 0
    assert main([*common, "--data", "synthetic", "--set", "synthetic_samples=64"]) == 0
    df = read_results([tmp_path])
    assert sorted(df["dataset"]) == ["digits", "synthetic"] and df["run_id"].is_unique
    assert {json.loads(s)["dataset"] for s in df["settings_json"]} == {"digits", "synthetic"}


@pytest.mark.slow
def test_a_pair_rerun_with_changed_settings_measures_anew_and_keeps_the_old_row_aside(tmp_path, capsys):
    first = run_pair("s", "cpu", "squeezenet1_1", [8], RunSettings.of(**TINY), tmp_path)
    second = run_pair("s", "cpu", "squeezenet1_1", [8], RunSettings.of(**{**TINY, "image_size": 40}), tmp_path)
    err = capsys.readouterr().err
    assert first[0]["run_id"] != second[0]["run_id"]
    assert "row exists" not in err, "a row of other settings is never reused"
    assert "1 row(s) measured with other settings (image_size 32 -> 40) kept aside" in err
    df = read_results([tmp_path])
    assert list(df["image_size"]) == [40], "the report sees only rows of the current settings"
    kept = list((tmp_path / "superseded").glob("*/rows/*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["image_size"] == 32
    assert list((tmp_path / "superseded").glob("*/samples/*.csv")), "its samples go with it"


@pytest.mark.notebook
def test_a_study_rerun_after_changing_its_image_size(tmp_path, capsys):
    params = tmp_path / "s.yaml"
    base = ("study: s\nhardware: [cpu]\nmodels: [squeezenet1_1]\nbatch_sizes: [8]\ndataset: digits\n"
            "train_subset: 64\ntest_subset: 32\ntrain_steps: 2\nwarmup_steps: 1\nlatency_repeats: 3\n"
            "latency_budget_s: 0\ninfer_warmup_batches: 1\ncalibrate: false\nceilings_at_end: false\n")
    argv = ["study", str(params), "--results-root", str(tmp_path / "results"), "--reports-root",
            str(tmp_path / "reports"), "--no-summary"]
    params.write_text(base + "image_size: 32\n")
    assert main(argv) == 0
    params.write_text(base + "image_size: 48\n")
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "have rows measured with these settings: skipped" not in err
    assert "(image_size 32 -> 48) kept aside" in err
    results = tmp_path / "results" / "s"
    assert list(read_results([results])["image_size"]) == [48]
    assert len(list((results / "superseded").glob("*/rows/*.json"))) == 1
    assert main(argv) == 0 and "have rows measured with these settings: skipped" in capsys.readouterr().err
