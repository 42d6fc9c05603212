"""Any model, not only the five torchvision names: a module from Python, a timm name, an import path."""
from __future__ import annotations

import importlib.util
import math
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import quiet_check, seed_ceilings, what_benchlib_saw
from torch import nn

from benchlib.errors import ConfigError
from benchlib.nets.flops import complexity_for_run
from benchlib.nets.models import build_model
from benchlib.nets.user_models import register_model
from benchlib.report.display.glance import glance_html
from benchlib.spec.settings import RunConfig
from benchlib.spec.study import parse_study
from benchlib.spec.vocab import MODEL_FORMS, model_problem, model_token

PACKAGE = '''
from torch import nn


class TinyNet(nn.Module):
    def __init__(self, num_classes=10, width=8):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                  nn.Flatten())
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.head(self.body(x))


def make_net(num_classes=10):
    return TinyNet(num_classes)


def fixed_net():
    return TinyNet(3)


def not_a_model():
    return "a string"


instance = TinyNet(4)
'''


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    pkg = tmp_path / "usernets"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # for the processes a test starts
    yield "usernets"
    sys.modules.pop("usernets", None)


def test_model_references_are_told_apart_from_mistakes():
    for ok in ("resnet18", "timm:convnext_tiny", "timm:vit_base_patch16_224.augreg_in21k", "mypkg.nets:make_net",
               "mypkg:Net.build"):
        assert model_problem(ok) is None, ok
    for bad in ("resnet", "my net", "mypkg:", ":make", "timm:", "mypkg.nets:make-net", "a/b:c"):
        said = model_problem(bad)
        assert said is not None and said.endswith(f"allowed: {MODEL_FORMS}"), bad
    assert model_token("timm:convnext_tiny") == "timm-convnext_tiny"
    assert model_token("mypkg.nets:make__net") == "mypkg.nets-make_net", "'__' separates run id fields"
    assert "__timm-convnext_tiny__" in RunConfig("s", "cpu", "timm:convnext_tiny", 8).run_id


def test_a_study_names_import_paths_and_timm_models_and_refuses_the_rest():
    raw = {"study": "mine", "hardware": ["cpu"], "models": ["usernets:make_net", "timm:resnet18"],
           "batch_sizes": [8]}
    assert parse_study(raw, "s.yaml").models == ("usernets:make_net", "timm:resnet18")
    with pytest.raises(ConfigError, match=r"s.yaml: key 'models' has 'my net'; allowed: a torchvision name"):
        parse_study({**raw, "models": ["my net"]}, "s.yaml")


def test_an_import_path_builds_with_num_classes_when_the_factory_takes_it(user_package):
    assert build_model("usernets:make_net", 7)(torch.zeros(2, 3, 16, 16)).shape == (2, 7)
    assert build_model("usernets:TinyNet", 5)(torch.zeros(2, 3, 16, 16)).shape == (2, 5), "a class is a factory"
    assert build_model("usernets:fixed_net", 7)(torch.zeros(2, 3, 16, 16)).shape == (2, 3), "its own head"
    a, b = build_model("usernets:instance", 7), build_model("usernets:instance", 7)
    assert a is not b and torch.equal(a.head.weight, b.head.weight), "a module: a copy each time, same weights"


@pytest.mark.parametrize("ref, words", [
    ("usernets:not_a_model", "the factory returned str, not an nn.Module"),
    ("usernets:missing", "'usernets' has no 'missing'"),
    ("nosuchpackage.nets:make", "cannot import 'nosuchpackage.nets'"),
    ("unknown-name", "unknown model 'unknown-name'; allowed: a torchvision name"),
])
def test_a_model_that_cannot_be_built_is_one_line(user_package, ref, words):
    with pytest.raises(ConfigError) as exc:
        build_model(ref, 10)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_pretrained_weights_are_for_torchvision_models_only(user_package):
    with pytest.raises(ConfigError, match="pretrained and freeze_backbone are for the torchvision models"):
        build_model("usernets:make_net", 10, pretrained=True)


def test_a_module_registered_again_under_its_name_is_counted_again():
    register_model("Mine", nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)))
    narrow = complexity_for_run("Mine", 32, 8, 2).flops_per_sample
    register_model("Mine", nn.Sequential(nn.Conv2d(3, 64, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 2)))
    assert complexity_for_run("Mine", 32, 8, 2).flops_per_sample > 10 * narrow, "not the first model's cached count"


def test_timm_models_build_by_name_without_downloading():
    pytest.importorskip("timm", reason="timm is an extra (benchlib[timm]); make install includes it")
    net = build_model("timm:resnet18", 7)
    assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 7)
    with pytest.raises(ConfigError, match="timm has no such model"):
        build_model("timm:resnet_nonexistent", 7)


def test_timm_missing_names_the_extra(monkeypatch):
    from benchlib.errors import MissingExtra

    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    with pytest.raises(MissingExtra, match=r"needs timm, which is not installed; install it with pip install "
                                          r"'benchlib\[timm\]'"):
        build_model("timm:resnet18", 7)


def test_an_untraceable_model_skips_static_int8_with_the_reason():
    from benchlib.errors import SkippedConfiguration
    from benchlib.nets.quantize import quantize_static_int8

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            y = self.conv(x)
            return y.mean((2, 3)) if y.sum() > 0 else -y.mean((2, 3))  # data-dependent: fx cannot trace it

    with pytest.raises(SkippedConfiguration, match="static int8 needs a model torch.fx can trace; Branchy"):
        quantize_static_int8(Branchy(), [torch.zeros(1, 3, 8, 8)], torch.zeros(1, 3, 8, 8))


def test_benchmark_measures_a_users_module_and_records_its_rows(tmp_path):
    import benchlib
    from benchlib.store.rows import read_results, write_table

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.head = nn.Linear(8, 5)

        def forward(self, x):
            return self.head(self.body(x))

    df = benchlib.benchmark(SmallCNN(), hardware="cpu", batch_sizes=[8, 16], image_size=32, steps=3,
                            results_dir=tmp_path, settings={"latency_repeats": 5, "warmup_steps": 1},
                            progress=None)
    assert list(df["batch_size"]) == [8, 16] and set(df["model"]) == {"SmallCNN"}
    assert (df["status"] == "ok").all() and (df["num_classes"] == 5).all(), "the model's own class count"
    assert (df["train_samples_per_s"] > 0).all()
    with quiet_check(**what_benchlib_saw(df)):  # on a busy host a median's interval can be too wide to publish
        assert (df["latency_ms_p50"] > 0).all(), df["latency_ms_p50_status"].tolist()
    assert (df["flops_per_sample"] > 0).all() and df["roof_fraction"].notna().all()
    assert set(read_results([tmp_path])["run_id"]) == set(df["run_id"]), "recorded in the results folder"
    from benchlib.store.schema import key_first

    assert list(df.columns) == key_first(list(read_results([tmp_path]).columns)), "every column, the key ones first"
    shown = df._repr_html_()  # what Jupyter displays: a short table, its flags and how it was made, a figure
    assert "<b>SmallCNN</b> on <b>cpu</b>" in shown and shown.count("<tr>") == 1 + 2, "a header and 2 lines"
    for words in ("train (samples/s)", "step spread (IQR/median)", "latency p99 (ms)", "share of roof (train)",
                  "One run a side cannot tell", "data:image/png;base64,"):
        assert words in shown, words
    figure = Path(df.attrs["figure_path"])
    assert figure.parent == tmp_path / "figures" and figure.read_bytes()[:4] == b"\x89PNG", "saved as a file too"
    assert type(df[df["batch_size"] == 8]) is pd.DataFrame, "what is derived from it displays in full"
    if importlib.util.find_spec("pyarrow"):  # real rows, every column, through Parquet
        write_table(tmp_path)
        parquet = pd.read_parquet(tmp_path / "results.parquet")
        assert parquet["run_id"].tolist() == read_results([tmp_path])["run_id"].tolist()
    failed = pd.concat([df, df.iloc[:1].assign(status="oom", error="CUDA out of memory at batch 8")])
    assert f"{df['variant'][0]}, batch 8: oom: CUDA out of memory at batch 8" in glance_html(failed)


@pytest.mark.parametrize("model, words", [
    (nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten()), "did not take a batch of images [2, 3, 32, 32]"),
    (nn.Sequential(nn.Conv2d(3, 4, 3)), "returned (2, 4, 30, 30) for 2 images; allowed: logits of shape"),
])
def test_benchmark_refuses_what_it_cannot_train_in_one_line(tmp_path, model, words):
    import benchlib

    with pytest.raises(ConfigError) as exc:
        benchlib.benchmark(model, name="odd", hardware="cpu", image_size=32, results_dir=tmp_path, progress=None)
    assert words in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "rows").exists(), "nothing recorded"


def test_benchmark_names_and_refuses_names_it_cannot_use(tmp_path):
    import benchlib

    with pytest.raises(ConfigError, match="is torchvision's resnet18; pass name="):
        benchlib.benchmark(nn.Linear(2, 2), name="resnet18", results_dir=tmp_path)
    with pytest.raises(ConfigError, match="name '<lambda>' for the model"):
        benchlib.benchmark(lambda: nn.Linear(2, 2), results_dir=tmp_path)


def test_a_real_data_set_must_match_the_models_outputs(user_package, tmp_path):
    import benchlib

    with pytest.raises(ConfigError, match="returns 3 logits; data set 'digits' has 10 classes"):
        benchlib.benchmark("usernets:fixed_net", hardware="cpu", data="digits", results_dir=tmp_path, progress=None)


@pytest.mark.slow
def test_run_takes_an_import_path_from_the_command_line(user_package, tmp_path):
    import json
    import subprocess

    seed_ceilings(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "benchlib", "run", "--model", "usernets:make_net", "--data",
                           "synthetic", "--batch-size", "8", "--steps", "2", "--set", "warmup_steps=0", "--set",
                           "latency_repeats=3", "--set", "latency_budget_s=0", "--json", "--results-dir",
                           str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    assert row["model"] == "usernets:make_net" and row["status"] == "ok" and row["flops_per_sample"] > 0
    assert "__usernets-make_net__" in row["run_id"]



@pytest.mark.notebook
def test_a_study_of_an_import_path_and_a_timm_model_runs_through_papermill(user_package, tmp_path):
    import yaml

    from benchlib.cli import main
    from benchlib.store.rows import read_results

    pytest.importorskip("timm", reason="timm is an extra (benchlib[timm]); make install includes it")
    params = tmp_path / "mine.yaml"
    params.write_text(yaml.safe_dump({
        "study": "mine", "hardware": ["cpu"], "models": ["usernets:make_net", "timm:resnet18"], "batch_sizes": [8],
        "dataset": "digits", "image_size": 32, "train_subset": 64, "test_subset": 32, "train_steps": 2,
        "warmup_steps": 1, "latency_repeats": 3, "latency_budget_s": 0, "infer_warmup_batches": 1, "calibrate": False,
        "ceilings_at_end": False,
    }))
    results, reports = tmp_path / "results", tmp_path / "reports"
    seed_ceilings(results / "mine")
    assert main(["study", str(params), "--results-root", str(results), "--reports-root", str(reports)]) == 0
    df = read_results([results / "mine"])
    assert set(df["model"]) == {"usernets:make_net", "timm:resnet18"} and (df["status"] == "ok").all()
    assert (df["num_classes"] == 10).all(), "both built for the data set's classes"
    runs = reports / "mine" / "runs"
    assert {p.name for p in runs.glob("*.html")} == {"cpu__usernets-make_net.html", "cpu__timm-resnet18.html"}
    summary = (reports / "mine" / "summary.html").read_text()
    assert "usernets:make_net" in summary and "timm:resnet18" in summary
    index = (reports / "index.html").read_text()
    assert 'href="mine/runs/cpu__timm-resnet18.html"' in index, "links without a ':' a browser reads as a scheme"


def test_a_study_whose_model_cannot_be_built_here_is_refused_before_any_work(user_package, tmp_path):
    import yaml

    from benchlib.cli import main

    params = tmp_path / "bad.yaml"
    params.write_text(yaml.safe_dump({"study": "bad", "hardware": ["cpu"], "models": ["usernets:missing"],
                                      "batch_sizes": [8]}))
    assert main(["study", str(params), "--results-root", str(tmp_path / "r")]) == 2
    assert not (tmp_path / "r").exists()


def test_without_optuna_tuning_says_which_extra_and_the_rest_imports(monkeypatch):
    """A core install (no benchlib[tune]) runs studies and publishes; tuning is one line naming the extra."""
    import importlib

    from benchlib.errors import MissingExtra

    monkeypatch.setitem(sys.modules, "optuna", None)
    for name in ("benchlib.run.tune", "benchlib.store.tuning_storage", "benchlib.report.readback.tuning"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(MissingExtra, match=r"tuning \(benchlib tune, the tune notebook\) needs optuna, which is "
                                           r"not installed; install it with pip install 'benchlib\[tune\]'"):
        importlib.import_module("benchlib.run.tune")
    for name in ("benchlib.report.display.pair", "benchlib.report.display.summary", "benchlib.pipeline.study"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        importlib.import_module(name)  # what a study and its pages import


def test_compare_puts_models_side_by_side_with_verdicts_and_refuses_what_it_cannot(tmp_path):
    import benchlib

    def net(width: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(width, 4))

    table = benchlib.compare([net(4), net(64)], hardware="cpu", batch_sizes=[8], image_size=32, steps=4,
                             results_dir=tmp_path, settings={"latency_repeats": 5, "warmup_steps": 1},
                             metrics=["train_samples_per_s"], progress=None)
    (row,) = table.to_dict("records")
    assert row["baseline"] == "Sequential" and row["side"] == "Sequential-2", "two modules of one class, two names"
    assert row["level"] == "steps", "one process: judged on its steps, and it says so"
    assert row["ratio"] > 0 and row["ci_low"] <= row["ratio"] <= row["ci_high"]
    assert row["verdict"] in {"faster", "slower", "same", "inconclusive"}
    everything = benchlib.compare([net(4), net(64)], hardware="cpu", batch_sizes=[8], image_size=32, steps=4,
                                  results_dir=tmp_path, settings={"latency_repeats": 5, "warmup_steps": 1},
                                  progress=None)
    assert "train_samples_per_s" in set(everything["metric"])
    assert "peak_cuda_allocated_bytes" not in set(everything["metric"]), "not measured on a CPU: left out"
    with pytest.raises(ConfigError, match="allowed: two or more models, or one model with two or more variants"):
        benchlib.compare(net(4), results_dir=tmp_path)
    with pytest.raises(ConfigError, match="compare: metrics speed; allowed:"):
        benchlib.compare([net(4), net(8)], metrics=["speed"], results_dir=tmp_path)


def test_a_side_whose_own_row_refused_the_figure_gets_no_ratio_or_verdict():
    """A row that published no p50 (too few samples for its interval) is not compared on the samples behind it: the
    comparison row carries no ratio, interval or verdict, and says why (it once read 'same' beside NaN)."""
    import pandas as pd

    from benchlib.pipeline.compare import judged

    def row(variant: str, p50: float | None, status: str) -> dict:
        return {"hardware": "cpu", "batch_size": 8, "variant": variant, "model": "m", "status": "ok",
                "run_id": f"cpu__m__bs8__{variant}", "machine": "x", "process_uid": "x:1:0",
                "latency_ms_p50": p50, "latency_ms_p50_status": status, "train_samples_per_s": 10.0}

    rows = pd.DataFrame([row("a", 0.02, "ok"), row("b", None, "too few samples (n=4, p50 needs 6)")])
    (out,) = judged(rows, "variant", "a", ["latency_ms_p50"]).to_dict("records")
    assert out["verdict"] == "unknown" and math.isnan(out["ratio"]) and math.isnan(out["ci_low"]), out
    assert "side A's latency_ms_p50 was refused by its own row (too few samples" in out["note"], out


@pytest.mark.slow
def test_a_later_call_never_moves_an_earlier_calls_rows(tmp_path):
    """Issue 36: a compare() in the notebook moved the rows an earlier benchmark() recorded (a batch size it
    never ran included) into superseded/: both share results/adhoc and study "adhoc"."""
    import benchlib
    from benchlib.store.rows import read_results

    class TinyNet(nn.Module):
        def __init__(self, width: int = 4):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.head = nn.Linear(width, 3)

        def forward(self, x):
            return self.head(self.body(x))

    quick = {"latency_repeats": 3, "latency_budget_s": 0, "warmup_steps": 1, "infer_warmup_batches": 1,
             "telemetry": False}
    first = benchlib.benchmark(TinyNet(), hardware="cpu", batch_sizes=[4, 8], image_size=16, steps=2,
                               results_dir=tmp_path, settings=quick, progress=None)
    benchlib.compare([TinyNet(), TinyNet(8)], hardware="cpu", batch_sizes=[4], image_size=16, steps=3,
                     results_dir=tmp_path, settings=quick, metrics=["train_samples_per_s"], progress=None)
    kept = set(read_results([tmp_path])["run_id"])
    assert set(first["run_id"]) <= kept, "the earlier call's rows, batch 8 included, stay where they were"
    assert not (tmp_path / "superseded").exists()
