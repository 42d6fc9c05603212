"""The first answer comes fast (issue 36): a complete study measures nothing and starts no kernel, a page made
from unchanged files is kept, and a name that is not a model is refused in one line with the nearest one."""
from __future__ import annotations

import os
import time

import pytest
import yaml
from conftest import seed_ceilings

from benchlib.cli import main
from benchlib.errors import ConfigError
from benchlib.pipeline import calibrate, publish
from benchlib.pipeline import study as study_pipeline
from benchlib.pipeline.own_model import plan_benchmark
from benchlib.run.outcome import unmeasured_row
from benchlib.spec.study import parse_study
from benchlib.store.layout import ReportLayout, ResultsLayout
from benchlib.store.rows import write_row

TINY = {"dataset": "digits", "image_size": 32, "train_subset": 64, "test_subset": 32, "train_steps": 2,
        "warmup_steps": 1, "latency_repeats": 3, "latency_budget_s": 0, "infer_warmup_batches": 1}


def _never(what: str):
    def fail(*args, **kwargs):
        raise AssertionError(f"{what} in a study whose every row is complete")
    return fail


@pytest.fixture
def nothing_heavy(monkeypatch):
    """Every measurer and every kernel made to fail the test that reaches it."""
    monkeypatch.setattr(study_pipeline, "ensure_ceilings", _never("ceilings made ready"))
    monkeypatch.setattr(study_pipeline, "remeasure_ceilings", _never("ceilings measured"))
    monkeypatch.setattr(calibrate, "measure_noise_floor", _never("a calibration"))
    monkeypatch.setattr(study_pipeline, "execute", _never("a kernel started"))


def test_a_complete_study_measures_nothing_and_starts_no_kernel(tmp_path, monkeypatch, nothing_heavy, capsys):
    monkeypatch.setenv("BENCHLIB_CACHE", str(tmp_path / "machine-cache"))  # an empty one: no floor to copy in
    cfg = parse_study({"study": "s", "hardware": ["cpu"], "models": ["squeezenet1_1", "resnet18"],
                       "batch_sizes": [4, 8], "calibrate": True, "profile": False, **TINY}, "s.yaml")
    assert cfg.floor_needed() == "calibrate: true" and cfg.ceilings_at_end
    results = tmp_path / "results" / "s"
    for c in cfg.all_configs():
        write_row(results, unmeasured_row(c, "skipped", "recorded by the test", os.environ["BENCHLIB_MACHINE"]))
    outcome = study_pipeline.run_study(cfg, results_root=tmp_path / "results", reports_root=tmp_path / "reports",
                                       summary=False)
    assert (outcome.pairs_run, outcome.pairs_skipped, outcome.pairs_failed) == (0, 2, 0)
    said = capsys.readouterr().err
    assert "noise floor of cpu: none measured (calibrate: true, but this run measured no row)" in said
    assert not (results / "ceilings").exists() and not (results / "noise_floor").exists()


@pytest.mark.notebook
def test_a_study_run_again_when_complete_measures_nothing_and_keeps_its_summary(tmp_path, monkeypatch, capsys):
    """Through the notebooks: the summary a study made is not made again when nothing it shows changed (the
    summary notebook itself writes no input of its own)."""
    params = tmp_path / "s.yaml"
    params.write_text(yaml.safe_dump({"study": "s", "hardware": ["cpu"], "models": ["squeezenet1_1"],
                                      "batch_sizes": [4], "ceilings_at_end": False, **TINY}))
    seed_ceilings(tmp_path / "results" / "s")
    argv = ["study", str(params), "--results-root", str(tmp_path / "results"), "--reports-root",
            str(tmp_path / "reports")]
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    summary = tmp_path / "reports" / "s" / "summary.html"
    made = summary.stat().st_mtime_ns
    capsys.readouterr()
    for what, attr in (("ensure_ceilings", "ensure_ceilings"), ("remeasure_ceilings", "remeasure_ceilings"),
                       ("a kernel", "execute")):
        monkeypatch.setattr(study_pipeline, attr, _never(what))
    monkeypatch.setattr(calibrate, "measure_noise_floor", _never("a calibration"))
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "summary: up to date" in err and "1 already complete" in err, err
    assert summary.stat().st_mtime_ns == made


def test_a_page_made_from_the_same_files_is_kept(tmp_path, monkeypatch):
    cfg = parse_study({"study": "s", "hardware": ["cpu"], "models": ["squeezenet1_1"], "batch_sizes": [4],
                       **TINY}, "s.yaml")
    results = tmp_path / "results" / "s"
    (row,) = cfg.all_configs()
    write_row(results, unmeasured_row(row, "skipped", "recorded by the test", "m"))
    report = ReportLayout(tmp_path / "reports" / "s")
    kernels: list[object] = []
    monkeypatch.setattr(study_pipeline, "execute", lambda *args, **kwargs: kernels.append(args[0]))

    def summary() -> None:
        html = study_pipeline.summarize([results], report.root, title="t", reuse=True)
        html.write_text("<html></html>")  # what render_html writes from the executed notebook the fake leaves out

    summary()
    assert len(kernels) == 1 and report.inputs_stamp("summary").is_file()
    summary()
    assert len(kernels) == 1, "the same rows, rules, ceilings and floors: the page is kept, no kernel starts"
    (results / "results.csv").write_text("rewritten")  # what the page itself writes is no input of it
    summary()
    assert len(kernels) == 1
    path = ResultsLayout.of(results).row_files()[0]
    later = time.time_ns() + 10**9
    os.utime(path, ns=(later, later))  # a row written again
    summary()
    assert len(kernels) == 2, "a row changed: the page is made again"
    assert publish.page_inputs([results], "summary", "t", "") != publish.page_inputs([results], "summary", "u", ""), \
        "another title, another page"


@pytest.mark.parametrize("argv,words", [
    (["run", "--model", "resnet81", "--data", "synthetic"],
     "command line: --model 'resnet81' is unknown (did you mean 'resnet18'?); allowed: a torchvision name"),
    (["profile", "--model", "mobilenetv2"], "(did you mean 'mobilenet_v2'?)"),
    (["flops", "--model", "densenet"], "(did you mean 'densenet121'?)"),
    (["study", "nope.yaml"], "nope.yaml: params file not found"),
])
def test_refusals_are_one_line_with_the_nearest_name(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("benchlib: error: ") and words in err, err


def test_a_study_file_and_benchmark_suggest_the_nearest_model(tmp_path, capsys):
    params = tmp_path / "s.yaml"
    params.write_text(yaml.safe_dump({"study": "s", "hardware": ["cpu"], "models": ["resnet81"],
                                      "batch_sizes": [8]}))
    for command in ("study", "compare", "sweep"):
        assert main([command, str(params)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "key 'models' has 'resnet81' (did you mean 'resnet18'?)" in err, err
    with pytest.raises(ConfigError, match=r"^benchmark: model 'resnet81' is not a model reference \(did you mean "
                                          r"'resnet18'\?\); allowed: "):
        plan_benchmark("resnet81")
