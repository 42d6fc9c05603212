"""Variants in real configurations: skipped combinations, quantized rows on the same weights, comparisons."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchlib.cli import main
from benchlib.report.tables.comparisons import variant_speedups
from benchlib.run.admission import load_study
from benchlib.run.record import record
from benchlib.spec.settings import RunConfig, RunSettings
from benchlib.spec.variants import PRESETS, apply_variant
from benchlib.store.rows import read_results

TINY = dict(dataset="digits", image_size=32, train_subset=128, test_subset=64, epochs=1, warmup_steps=1,
            latency_repeats=3, latency_budget_s=0, infer_warmup_batches=1, lr=0.05)


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("variants")
    base = RunSettings(**TINY)
    made = {}
    for name in ("cpu-default", "cpu-quantized", "gpu-amp"):
        cfg = RunConfig("v", "cpu", "resnet18", 16, apply_variant(base, PRESETS[name]))
        made[name] = record(cfg, out, progress=None)
    return made, out


def test_unsupported_combination_is_a_skipped_row(rows):
    made, out = rows
    row = made["gpu-amp"]
    assert row["status"] == "skipped"
    assert "fp16 autocast training is not supported on CPU" in row["error"]
    assert read_results([out]).set_index("variant").loc["gpu-amp", "status"] == "skipped"


def test_static_int8_row_on_the_same_weights(rows):
    made, _ = rows
    q, d = made["cpu-quantized"], made["cpu-default"]
    assert q["status"] == "ok" and q["quantization"] == "static_int8"
    counts = json.loads(q["quantized_modules"])
    assert counts["quantized_conv"] == 20 and counts["float_conv"] == 0, "every resnet18 convolution is int8"
    assert q["accuracy_drop_pts"] == pytest.approx((q["fp32_test_accuracy"] - q["test_accuracy"]) * 100)
    assert q["model_size_bytes"] < 0.4 * q["fp32_model_size_bytes"]
    assert q["fp32_model_size_bytes"] == pytest.approx(d["model_size_bytes"], rel=0.01)
    assert q["infer_roof_fraction"] is None, "no int8 ceiling is measured: no made-up roof"


def test_variant_speedups_against_default(rows):
    _, out = rows
    table = variant_speedups(read_results([out])).set_index("variant")
    assert table.loc["cpu-default", "latency_speedup_bs1"] == pytest.approx(1.0)
    assert table.loc["cpu-default", "latency_bs1_verdict"] == "baseline", "the unit is not compared with itself"
    assert "x [" in table.loc["cpu-quantized", "infer_throughput"], "each ratio shows its interval"
    assert table.loc["cpu-quantized", "infer_throughput_verdict"] in ("faster", "slower", "same", "inconclusive")
    # 3 batch-1 repeats are too few for a p50 interval: each row refused its p50, so no ratio is made up
    assert np.isnan(table.loc["cpu-quantized", "latency_speedup_bs1"])
    assert table.loc["cpu-quantized", "latency_bs1_verdict"] == "unknown"
    assert "refused by its own row (too few samples" in table.loc["cpu-quantized", "latency_bs1_note"]
    assert table.loc["cpu-quantized", "baseline"] == "cpu-default"
    assert table.loc["cpu-quantized", "model_size_ratio"] < 0.4
    assert "gpu-amp" not in table.index, "skipped rows are not compared"


def test_variants_run_interleaved_in_rounds_with_each_evaluator_after_its_trainer(tmp_path):
    text = Path("params/compare-cpu.yaml").read_text() + "repeats: 2\nbatch_sizes: [32, 64]\n"
    path = tmp_path / "c.yaml"
    path.write_text(text.replace("batch_sizes: [64]\n", ""))
    order = [(c.settings.seed, c.batch_size, c.settings.variant) for c in load_study(path).configs("cpu", "resnet18")]
    trainers = ["cpu-default", "cpu-bf16", "cpu-channels-last"]
    assert order[:4] == [(0, 32, v) for v in trainers] + [(0, 32, "cpu-quantized")]
    assert order[4:8] == [(0, 64, v) for v in trainers] + [(0, 64, "cpu-quantized")]
    assert [seed for seed, _, _ in order] == [0] * 8 + [1] * 8, "rounds: every variant of a seed, then the next"
    path.write_text(path.read_text() + "interleave: false\n")
    grouped = [(c.settings.seed, c.batch_size, c.settings.variant) for c in load_study(path).configs("cpu", "resnet18")]
    # each round (seed) is a fresh process: within it, a variant's batch sizes together, in the study's order
    assert [v for _, _, v in grouped[:2]] == ["cpu-default"] * 2 and grouped[7][2] == "cpu-quantized"
    assert [seed for seed, _, _ in grouped] == [0] * 8 + [1] * 8 and sorted(grouped) == sorted(order)


def test_compare_params_expand_variants():
    cfg = load_study("params/compare-cpu.yaml")
    ids = [c.run_id for c in cfg.configs("cpu", "resnet18")]
    assert len(ids) == 4 and len(set(ids)) == 4
    names = {c.settings.variant: c.settings for c in cfg.configs("cpu", "resnet18")}
    assert names["cpu-quantized"].knobs.quantization == "static_int8"
    assert names["cpu-bf16"].knobs.precision == "amp_bf16"
    assert {s.seed for s in names.values()} == {0}, "same seed for every variant"


def test_compare_needs_two_variants(tmp_path, capsys):
    p = tmp_path / "p.yaml"
    p.write_text("study: c\nhardware: [cpu]\nmodels: [resnet18]\nbatch_sizes: [8]\nvariants: [cpu-default]\n")
    assert main(["compare", str(p)]) == 2
    assert "two or more" in capsys.readouterr().err


def test_tuned_variant_reads_the_exported_file(tmp_path):
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    (tuned / "cpu-tuned.yaml").write_text("batch_size: 32\nlr: 0.02\noptimizer: adam\nsource: {study_name: x}\n")
    p = tmp_path / "p.yaml"
    p.write_text(f"study: c\nhardware: [cpu]\nmodels: [resnet18]\nbatch_sizes: [8]\n"
                 f"variants: [cpu-default, cpu-tuned]\ntuned_params_dir: {tuned}\n")
    configs = {c.settings.variant: c for c in load_study(p).configs("cpu", "resnet18")}
    assert configs["cpu-tuned"].batch_size == 32 and configs["cpu-tuned"].settings.lr == 0.02
    assert configs["cpu-tuned"].settings.optimizer == "adam"
    assert configs["cpu-default"].batch_size == 8


def test_run_variant_flag(capsys, tmp_path):
    """One configuration its device cannot run is refused before any work (a grid records it as skipped)."""
    code = main(["run", "--model", "squeezenet1_1", "--batch-size", "8", "--steps", "1", "--variant", "gpu-amp",
                 "--set", "train_subset=64", "--results-dir", str(tmp_path), "--json"])
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and out.err.count("\n") == 1, out.err
    assert "--variant gpu-amp: fp16 autocast training is not supported on CPU; allowed: precision fp32" in out.err
    assert not any(tmp_path.iterdir()), "no row"
    assert main(["run", "--model", "squeezenet1_1", "--variant", "cpu-turbo"]) == 2
    assert "cpu-turbo" in capsys.readouterr().err


@pytest.mark.slow
def test_run_pair_expands_variants_like_the_study(tmp_path):
    from benchlib.run.record import run_pair
    from benchlib.spec.variants import variant_spec

    specs = [variant_spec(PRESETS["cpu-default"]), "gpu-amp"]
    out = run_pair("v", "cpu", "squeezenet1_1", [8], RunSettings(**{**TINY, "train_subset": 64, "train_steps": 1}),
                   tmp_path, variants=specs)
    assert [(r["variant"], r["status"]) for r in out] == [("cpu-default", "ok"), ("gpu-amp", "skipped")]


# ---------------------------------------------------------------- one training per training variant

def _pair_settings(**kw):
    return RunSettings.of(**{**TINY, "train_subset": 64, "test_subset": 48, **kw})


def test_training_key_ignores_only_inference_settings():
    def key(**kw):
        return RunConfig("v", "cpu", "resnet18", 8, _pair_settings().updated(**kw)).training_key
    base = key()
    assert key(quantization="static_int8", variant="cpu-quantized", latency_repeats=9) == base
    assert key(lr=0.01) != base and key(seed=1) != base and key(precision="amp_bf16") != base
    assert RunConfig("v", "cpu", "resnet18", 16, _pair_settings()).training_key != base


@pytest.mark.slow
def test_quantized_variants_evaluate_the_weights_their_baseline_trained(tmp_path, monkeypatch):
    from benchlib.run import measure as measuring
    from benchlib.run import record as runner
    from benchlib.spec.variants import variant_spec
    from benchlib.store.rows import read_samples

    calls = []
    real_train = measuring.train
    monkeypatch.setattr(measuring, "train", lambda *a, **k: calls.append(1) or real_train(*a, **k))
    specs = [variant_spec(PRESETS["cpu-quantized"]), {"name": "cpu-dynamic", "quantization": "dynamic"},
             variant_spec(PRESETS["cpu-default"])]
    out = runner.run_pair("v", "cpu", "squeezenet1_1", [8], _pair_settings(), tmp_path, variants=specs)
    assert [r["variant"] for r in out] == ["cpu-default", "cpu-quantized", "cpu-dynamic"], "training runs first"
    assert all(r["status"] == "ok" for r in out)
    assert len(calls) == 1, "one training for one training variant"
    default, static, dynamic = out
    for q in (static, dynamic):
        assert q["weights_trained_by"] == default["run_id"]
        assert q["fp32_test_accuracy"] == default["test_accuracy"], "the very weights the baseline trained"
        assert q["train_step_s_median"] is None and q.get("epoch_s") is None, "no training figures of its own"
        assert set(read_samples(tmp_path, q)["series"]) == {"latency_s", "batch_latency_s", "infer_repeat_s"}
    assert len(list((tmp_path / "weights").glob("*.pt"))) == 1


@pytest.mark.slow
def test_a_resumed_pair_reuses_saved_weights_and_ignores_foreign_ones(tmp_path, monkeypatch):
    from benchlib.run import measure as measuring
    from benchlib.run import record as runner
    from benchlib.spec.variants import variant_spec

    specs = [variant_spec(PRESETS["cpu-default"]), variant_spec(PRESETS["cpu-quantized"])]
    first = runner.run_pair("v", "cpu", "squeezenet1_1", [8], _pair_settings(), tmp_path, variants=specs[:1])
    assert not (tmp_path / "weights").exists(), "no inference variant asked: no weights written"
    runner.run_pair("v", "cpu", "squeezenet1_1", [8], _pair_settings(), tmp_path / "b", variants=specs)
    saved = next((tmp_path / "b" / "weights").glob("*.pt"))
    for row in (tmp_path / "b" / "rows").glob("*quantized*"):
        row.unlink()  # as if the study was killed before the quantized row
    calls = []
    real_train = measuring.train
    monkeypatch.setattr(measuring, "train", lambda *a, **k: calls.append(1) or real_train(*a, **k))
    again = runner.run_pair("v", "cpu", "squeezenet1_1", [8], _pair_settings(), tmp_path / "b", variants=specs)
    assert calls == [] and again[1]["weights_trained_by"] == first[0]["run_id"]
    saved.write_bytes(b"not a checkpoint")
    for row in (tmp_path / "b" / "rows").glob("*quantized*"):
        row.unlink()
    with pytest.warns(UserWarning, match="unreadable shared weights"):
        trained_itself = runner.run_pair("v", "cpu", "squeezenet1_1", [8], _pair_settings(), tmp_path / "b",
                                         variants=specs)
    assert calls == [1] and trained_itself[1]["status"] == "ok"
    assert trained_itself[1]["weights_trained_by"] is None


@pytest.mark.parametrize("interleave", [True, False])
def test_configurations_without_cudnn_autotuning_run_before_those_with_it(interleave):
    """The plans cuDNN's autotuner finds stay in the process (torch cannot clear them) and a later
    ``cudnn_benchmark: false`` configuration would run them: within the process a round runs in, every such
    configuration goes first, and the rounds stay interleaved."""
    from benchlib.spec.study import parse_study

    cfg = parse_study({"study": "c", "hardware": ["cuda"], "models": ["resnet18"], "batch_sizes": [32, 64],
                       "repeats": 2, "interleave": interleave, "sweep": {"cudnn_benchmark": [True, False]}},
                      "c.yaml")
    order = [(c.settings.knobs.cudnn_benchmark, c.settings.seed, c.batch_size) for c in cfg.configs("cuda", "resnet18")]
    # each round runs in a fresh process (repeats): without autotuning first within it, the rounds interleaved
    assert [b for b, _, _ in order] == [False] * 2 + [True] * 2 + [False] * 2 + [True] * 2
    assert [seed for _, seed, _ in order] == [0] * 4 + [1] * 4, "rounds stay interleaved: drift lands on both"
    if interleave:
        assert order[:4] == [(False, 0, 32), (False, 0, 64), (True, 0, 32), (True, 0, 64)]
    from benchlib.spec.study import schedule

    one_process = [c.settings.knobs.cudnn_benchmark for c in schedule(cfg.configs("cuda", "resnet18"), interleave)]
    assert one_process == [False] * 4 + [True] * 4, "one process running every round: no autotuned plan leaks"


def test_each_row_states_what_benchlibs_own_threads_took_from_its_timed_steps(rows):
    made, _ = rows
    share = made["cpu-default"]["harness_cpu_pct"]
    assert isinstance(share, float) and 0 < share < 100, share


def test_each_row_states_the_page_faults_of_its_timed_steps(rows):
    """Fresh pages a step's allocator maps: the row says how many a step took (Linux counts them)."""
    import sys

    from benchlib.instruments.cpu import minor_faults
    from benchlib.run.columns import fault_columns

    made, _ = rows
    per_step = made["cpu-default"]["train_minor_faults_per_step"]
    if sys.platform.startswith("linux"):
        assert isinstance(per_step, float) and per_step > 0, per_step
        before = minor_faults()
        fresh = bytearray(64 << 20)  # 64 MiB mapped fresh and zeroed: touched page by page below
        fresh[::4096] = b"\x01" * len(range(0, len(fresh), 4096))
        assert minor_faults() - before >= 16_000 * 0.9
    assert fault_columns(300, 3) == {"train_minor_faults_per_step": 100.0}
    assert fault_columns(None, 3) == fault_columns(300, 0) == {"train_minor_faults_per_step": None}


def test_a_row_whose_harness_took_over_one_percent_is_named_in_the_warnings():
    import pandas as pd

    from benchlib.report.findings.caveats import harness_warning, warnings

    rows = pd.DataFrame([{"status": "ok", "model": "resnet18", "hardware": "cpu", "device": "cpu", "machine": "vm",
                          "batch_size": 16,
                          "variant": v, "run_id": f"cpu__{v}", "harness_cpu_pct": pct, "train_samples_per_s": 10.0}
                         for v, pct in (("cpu-default", 0.3), ("cpu-bf16", 2.5))])
    said = harness_warning(rows)
    assert said is not None and "up to 2.5% of the CPUs" in said and "1 of 2 rows" in said
    assert any("benchlib's own threads" in w.lower() for w in warnings(rows))
    assert harness_warning(rows.assign(harness_cpu_pct=[0.3, 0.9])) is None
