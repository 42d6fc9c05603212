"""Key findings from hand-made rows: the fastest, by how much, the verdict, the roof, warnings, what is left out."""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from benchlib.report.findings import caveats, claims, key
from benchlib.report.findings import variants as variant_claims
from benchlib.report.findings.work import bound, roofline_sentences, time_sentences
from benchlib.report.readback.samples import SampleFiles

RNG = np.random.default_rng(0)


def _row(run_id: str, **kw) -> dict:
    base = {"study": "s", "machine": "m", "hardware": "cpu", "model": "resnet18", "batch_size": 64,
            "variant": "default", "status": "ok", "seed": 0, "threads": 2, "num_workers": 0, "world_size": 1,
            "error": None, "interfered": False, "train_step_noisy": False, "test_accuracy": 0.9,
            "process_uid": "host:1:0"}  # one process, as benchlib compare interleaves variants
    return {**base, "run_id": run_id, **kw}


def _steps(step_s: float, n: int = 40) -> np.ndarray:
    return step_s * (1 + 0.01 * RNG.standard_normal(n))


class Reader(SampleFiles):
    """Raw samples per run id, as the samples files hold them (seconds per timed step and latency repeat)."""

    def __init__(self, steps: dict[str, float], latency_s: dict[str, float] | None = None) -> None:
        super().__init__()
        self.frames = {}
        for run_id, step in steps.items():
            parts = [pd.DataFrame({"series": "train_step_s", "value": _steps(step)})]
            if latency_s and run_id in latency_s:
                parts.append(pd.DataFrame({"series": "latency_s", "value": _steps(latency_s[run_id])}))
            self.frames[run_id] = pd.concat(parts, ignore_index=True)

    def __call__(self, row) -> pd.DataFrame:
        return self.frames.get(str(row["run_id"]), pd.DataFrame(columns=["series", "value"]))

    def floors(self, folder):  # no noise floor measured
        return []


def _frame(rows: list[dict], steps: dict[str, float], latency_s: dict[str, float] | None = None):
    df = pd.DataFrame(rows)
    for r in rows:  # the row's headline figures, consistent with its samples
        step = steps.get(r["run_id"])
        if step:
            df.loc[df["run_id"] == r["run_id"], "train_samples_per_s"] = r["batch_size"] / step
        if latency_s and r["run_id"] in latency_s:
            df.loc[df["run_id"] == r["run_id"], "latency_ms_p50"] = latency_s[r["run_id"]] * 1e3
    return df, Reader(steps, latency_s)


def _ratio(sentence: str) -> float:
    return float(re.search(r"(\d+\.\d+)x \[", sentence).group(1))


def _divides_out(sentence: str) -> None:
    """The ratio printed is the quotient of the two throughputs beside it, to the digits shown."""
    a, b = (float(x.replace(",", "")) for x in re.findall(r"([\d,]+(?:\.\d+)?) samples/s", sentence)[:2])
    ratio = _ratio(sentence)
    shown = 3  # significant digits of a throughput: each may be off by half its last digit
    slack = ratio * sum(0.5 * 10 ** (math.floor(math.log10(x)) - shown + 1) / x for x in (a, b)) + 0.005
    assert abs(a / b - ratio) <= slack, (sentence, a / b, ratio)


def test_the_faster_device_is_named_with_its_ratio_interval_and_verdict():
    df, reader = _frame([_row("cpu", hardware="cpu"), _row("gpu", hardware="cuda")], {"cpu": 0.10, "gpu": 0.01},
                        {"cpu": 0.004, "gpu": 0.002})
    lines = claims.devices(df, reader)
    train = next(line for line in lines if "samples/s" in line)
    assert re.match(r"cuda trains resnet18 fastest \(bs64\): 6,[34]\d0 samples/s", train), train
    assert _ratio(train) == pytest.approx(10.0, rel=0.05)
    assert re.search(r"faster \(steps\) than cpu \(6[34]\d samples/s\)", train), train
    assert re.search(r"\[\d+\.\d+, \d+\.\d+\]", train)
    _divides_out(train)
    latency = next(line for line in lines if "image" in line)
    assert latency.startswith("cuda answers one resnet18 image fastest: 2.00 ms p50")
    assert _ratio(latency) == pytest.approx(2.0, rel=0.05) and re.search(r"faster \(steps\) than cpu \(4\.0\d ms p50\)",
                                                                        latency), latency


def test_one_device_has_no_device_section_and_says_so():
    df, reader = _frame([_row("a"), _row("b", model="mobilenet_v2")], {"a": 0.05, "b": 0.1})
    out = key.key_findings(df, reader=reader)
    assert claims.devices(df, reader) == []
    assert "Devices" not in [t for t, _ in out.sections]
    assert "a second device" in out.not_run and "optimization variants" in out.not_run
    assert "several batch sizes" in out.not_run and "profiles" in out.not_run
    assert "Optimization variants" not in [t for t, _ in out.sections]
    assert "Batch size" not in [t for t, _ in out.sections]


def test_the_fastest_model_and_the_most_accurate_are_named():
    df, reader = _frame([_row("a", test_accuracy=0.91), _row("b", model="mobilenet_v2", test_accuracy=0.95)],
                        {"a": 0.05, "b": 0.1}, {"a": 0.004, "b": 0.002})
    lines = claims.models(df, reader)
    train = next(line for line in lines if "trains fastest" in line)
    assert train.startswith("resnet18 trains fastest on cpu: 1,280 samples/s at bs64")
    assert "faster (steps) than mobilenet_v2 (640 samples/s at bs64)" in train
    assert _ratio(train) == pytest.approx(2.0, rel=0.05)
    assert any(line.startswith("mobilenet_v2 answers one image fastest on cpu") for line in lines)
    accuracy = next(line for line in lines if "95.0%" in line)
    assert "most accurate" not in accuracy and "no interval or verdict" in accuracy, "no test set size: no claim"


def test_the_most_accurate_is_claimed_only_where_the_evidence_tells_the_models_apart():
    """The default study's summary once said 'mobilenet_v2 is the most accurate: 95.6% (resnet18 94.4%)' beside
    intervals [92.9, 97.2] and [91.6, 96.4]: one training a side on 360 images tells nothing apart."""
    one = [_row("a", test_accuracy=0.944, test_samples=360, test_accuracy_ci_low=0.916, test_accuracy_ci_high=0.964),
           _row("b", model="mobilenet_v2", test_accuracy=0.956, test_samples=360, test_accuracy_ci_low=0.929,
                test_accuracy_ci_high=0.972)]
    df, reader = _frame(one, {"a": 0.05, "b": 0.05})
    (line,) = [x for x in claims.models(df, reader) if "95.6%" in x]
    assert line.startswith("mobilenet_v2 against resnet18 on cpu is inconclusive: 95.6% [92.9, 97.2] against 94.4% "
                           "[91.6, 96.4], 1.01x ["), line
    assert "most accurate" not in line and claims.unsupported(line) is None
    seeds = [_row(f"cpu__resnet18__bs64__default__fp32__abc__seed{s}", seed=s, test_accuracy=0.80 + s / 1000,
                  test_samples=360) for s in range(3)] + [
        _row(f"cpu__mobilenet_v2__bs64__default__fp32__abc__seed{s}", seed=s, model="mobilenet_v2",
             test_accuracy=0.95 + s / 1000, test_samples=360) for s in range(3)]
    df, reader = _frame(seeds, {r["run_id"]: 0.05 for r in seeds})
    (line,) = [x for x in claims.models(df, reader) if "%" in x and "samples/s" not in x]
    assert line.startswith("mobilenet_v2 is the most accurate on cpu: 95.1%") and "better (runs) than resnet18" in line


@pytest.mark.parametrize("sentence", [
    "On cpu, mobilenet_v2 is the most accurate: 95.6% test accuracy (resnet18 94.4%).",
    "resnet18 on cpu (bs8): train as fast within noise: 1.68x [0.66, 2.94] (steps).",
    "cuda trains resnet18 fastest (bs64): 6,400 samples/s, 1.01x [0.97, 1.05] faster (steps) than cpu.",
    "a and b train as fast on cpu within noise: 1.00x [0.96, 1.04] (runs).",
    "resnet18 on cpu (bs64) trains slower than default with: channels-last, fp16.",
])
def test_the_rule_refuses_words_the_evidence_does_not_hold(sentence):
    assert claims.unsupported(sentence) is not None


def test_every_finding_of_many_studies_holds_to_the_rule():
    """Random studies (speeds, accuracies, seeds, threads, variants, batches): no sentence is withheld, so every
    one the findings make is worded within its evidence."""
    rng = np.random.default_rng(3)
    for trial in range(8):
        rows, steps = [], {}
        for model in ("resnet18", "mobilenet_v2"):
            for variant in ("default", "channels-last"):
                for batch in (16, 64):
                    for seed in range(int(rng.integers(1, 3))):
                        run_id = f"{trial}-{model}-{variant}-{batch}-{seed}"
                        steps[run_id] = float(rng.uniform(0.04, 0.06)) * batch / 64
                        rows.append(_row(run_id, model=model, variant=variant, batch_size=batch, seed=seed,
                                         test_accuracy=float(rng.uniform(0.9, 0.96)), test_samples=360,
                                         threads=int(rng.integers(1, 3)), process_uid=f"h:{seed}:0"))
        df, reader = _frame(rows, steps)
        out = key.key_findings(df, reader=reader)
        assert not [w for w in out.warnings if "withheld" in w], out.warnings
        for _, lines in out.sections:
            assert all(claims.unsupported(line) is None for line in lines), lines


def test_where_the_samples_rank_two_models_the_other_way_the_samples_win():
    df, reader = _frame([_row("a"), _row("b", model="mobilenet_v2")], {"a": 0.10, "b": 0.05})
    df.loc[df["run_id"] == "a", "train_samples_per_s"] = 5000.0  # a row figure the samples do not bear out
    (train,) = [line for line in claims.models(df, reader) if "samples/s" in line]
    assert train.startswith("mobilenet_v2 trains fastest on cpu") and "faster (steps) than resnet18" in train
    assert _ratio(train) == pytest.approx(2.0, rel=0.05)


def test_two_models_with_the_same_speed_are_the_same():
    df, reader = _frame([_row("a"), _row("b", model="mobilenet_v2")], {"a": 0.05, "b": 0.0501})
    (train,) = [line for line in claims.models(df, reader) if "samples/s" in line]
    assert train.startswith(("resnet18 and mobilenet_v2 train as fast on cpu within noise",
                             "mobilenet_v2 and resnet18 train as fast on cpu within noise"))
    assert "fastest" not in train and "faster" not in train


def test_the_best_variant_against_the_default_with_accuracy():
    rows = [_row("d"), _row("amp", variant="gpu-amp", test_accuracy=0.88), _row("cl", variant="channels-last")]
    df, reader = _frame(rows, {"d": 0.10, "amp": 0.05, "cl": 0.12})
    out = key.key_findings(df, reader=reader)
    lines = out.section("Optimization variants")
    best = next(line for line in lines if "trains fastest" in line)
    assert best.startswith("resnet18 on cpu (bs64): gpu-amp trains fastest") and "faster (steps) than default" in best
    assert _ratio(best) == pytest.approx(2.0, rel=0.05) and "accuracy -2.0 points" in best
    assert any(line.startswith("resnet18 on cpu (bs64) trains slower than default with: channels-last 0.8")
               and "slower (steps)" in line for line in lines), lines


def test_no_variant_faster_than_the_default_is_said_so():
    rows = [_row("d"), _row("cl", variant="channels-last"), _row("t1", variant="one-thread")]
    df, reader = _frame(rows, {"d": 0.10, "cl": 0.1001, "t1": 0.1002})
    (line,) = [x for x in variant_claims.variants(df, reader) if "train" in x]
    assert "no variant trains faster than default" in line and "the same within noise" in line
    (alone,) = [x for x in variant_claims.variants(df[df["run_id"] != "t1"], reader) if "train" in x]
    assert alone.startswith("resnet18 on cpu (bs64): channels-last trains as fast as default, the same within "
                            "noise (1.00x"), alone


def test_a_single_slower_variant_is_named_once_not_ranked_among_others():
    """One variant slower than the default read 'every variant trains slower ...; the closest, X', then again
    'trains slower than default with: X'."""
    df, reader = _frame([_row("d"), _row("cl", variant="channels-last")], {"d": 0.10, "cl": 0.125})
    lines = [x for x in variant_claims.variants(df, reader) if "train" in x]
    assert len(lines) == 1 and lines[0].startswith("resnet18 on cpu (bs64): channels-last trains slower (steps) "
                                                   "than default, 0.8"), lines
    assert "every variant" not in lines[0] and "closest" not in lines[0]
    assert claims.unsupported(lines[0]) is None
    df, reader = _frame([_row("d"), _row("cl", variant="channels-last")], {"d": 0.10, "cl": 0.08})
    (faster,) = [x for x in variant_claims.variants(df, reader) if "train" in x]
    assert faster.startswith("resnet18 on cpu (bs64): channels-last trains faster, 1.2"), faster


def test_the_best_batch_size_against_the_smallest_and_what_ran_out_of_memory():
    rows = [_row("b16", batch_size=16), _row("b64", batch_size=64),
            _row("b256", batch_size=256, status="oom", error="CUDA out of memory")]
    df, reader = _frame(rows, {"b16": 0.02, "b64": 0.04})
    lines = key.key_findings(df, reader=reader).section("Batch size")
    assert len(lines) == 1
    assert lines[0].startswith("bs64 trains fastest for resnet18 on cpu (default): 1,600 samples/s")
    assert re.search(r"faster \(steps\) than bs16 \((79\d|80\d) samples/s\)", lines[0]), lines[0]
    _divides_out(lines[0])
    assert _ratio(lines[0]) == pytest.approx(2.0, rel=0.05) and "faster" in lines[0]
    assert "bs256 oom" in lines[0]


def test_a_variant_that_trains_nothing_has_no_batch_size_finding():
    rows = [_row("q16", batch_size=16, variant="cpu-quantized"), _row("q64", batch_size=64, variant="cpu-quantized")]
    df, reader = _frame(rows, {})
    assert claims.batch_sizes(df, reader) == []


def test_roofline_placement_compute_or_memory_bound_and_fraction():
    assert bound(50.0, 100e9, 10e9) == "compute" and bound(5.0, 100e9, 10e9) == "memory"
    assert bound(5.0, None, 10e9) is None
    roof = {"roof_peak_flops_per_s": 100e9, "roof_bandwidth_bytes_per_s": 10e9, "roof_dtype": "fp32",
            "train_samples_per_s": 100.0}
    good = pd.DataFrame([
        _row("a", **roof, train_arithmetic_intensity=50.0, roof_fraction=0.31, achieved_train_flops_per_s=31e9,
             train_roof_flops_per_s=100e9),
        _row("b", model="mobilenet_v2", **roof, train_arithmetic_intensity=2.0, roof_fraction=0.5,
             achieved_train_flops_per_s=10e9, train_roof_flops_per_s=20e9),
    ]).assign(device="cpu")
    lines = roofline_sentences(good)
    resnet = next(line for line in lines if line.startswith("resnet18"))
    mobile = next(line for line in lines if line.startswith("mobilenet_v2"))
    assert "compute-bound" in resnet and "31.0% of its fp32 roof" in resnet and "ridge at 10.0" in resnet
    assert "memory-bound" in mobile and "50.0%" in mobile
    far = roofline_sentences(good.assign(roof_fraction=0.00765, model=["resnet18", "mobilenet_v2"]))
    assert all("far under both roofs" in line and "-bound" not in line.split(";")[0] for line in far), far


def test_where_the_time_goes_names_the_main_categories_and_the_top_operator():
    profile = {"machine": "m", "hardware": "cpu", "model": "resnet18", "batch_size": 64,
               "breakdown": pd.DataFrame({"category": ["data_loading", "memcpy", "compute", "cpu_exec", "other"],
                                          "time_us": [150.0, 0.0, 800.0, 0.0, 50.0],
                                          "fraction": [0.15, 0.0, 0.8, 0.0, 0.05]}),
               "top_self_cpu": pd.DataFrame({"name": ["aten::conv", "aten::add"], "self_cpu_time_us": [400.0, 10.0]}),
               "top_self_device": pd.DataFrame()}
    (line,) = time_sentences([profile])
    assert line.startswith("resnet18 on cpu (bs64): compute 80.0%, data loading 15.0%")
    assert "memory copies" not in line
    assert "aten::conv (40.0% of the step" in line


def test_warnings_for_interfered_and_noisy_rows_come_first():
    rows = [_row("a", interfered=True, interference_cpu_pct=45.0, interference_threshold_pct=10.0),
            _row("b", model="mobilenet_v2", train_step_noisy=True)]
    df, reader = _frame(rows, {"a": 0.05, "b": 0.1})
    out = key.key_findings(df, reader=reader)
    assert any("1 of 2 rows were measured while other processes used up to 45% of the CPUs" in w
               for w in out.warnings)
    assert any(w.startswith("1 of 2 rows is noisy") and "mobilenet_v2" in w for w in out.warnings)
    assert any(w.endswith("on a quiet machine or with `repeats: 5`.") for w in out.warnings), out.warnings
    text = key.as_markdown(out)
    assert text.index("**Warning:**") < text.index("**Models**")


def test_no_warning_on_clean_rows():
    df, reader = _frame([_row("a"), _row("b", model="mobilenet_v2")], {"a": 0.05, "b": 0.1})
    assert caveats.warnings(df) == []
    assert "Warning" not in key.as_markdown(key.key_findings(df, reader=reader))


def test_failures_and_skips_are_named_with_why():
    rows = [_row("a"), _row("b", variant="gpu-amp", status="skipped", error="fp16 training needs CUDA")]
    df, reader = _frame(rows, {"a": 0.05})
    (line,) = key.key_findings(df, reader=reader).section("Failed and skipped")
    assert line.startswith("1 of 2 configurations produced no measurement")
    assert "resnet18 on cpu (bs64, gpu-amp) was skipped (fp16 training needs CUDA)" in line


def test_a_long_error_is_cut_with_an_ellipsis():
    rows = [_row("a"), _row("b", status="failed", error="RuntimeError: " + "x" * 400)]
    df, reader = _frame(rows, {"a": 0.05})
    (line,) = caveats.failures(df)
    assert "\u2026)" in line and len(line) < 300


def test_nothing_failed_leaves_the_section_out():
    df, reader = _frame([_row("a")], {"a": 0.05})
    out = key.key_findings(df, reader=reader)
    assert out.section("Failed and skipped") == []
    assert out.section("Models") == ["resnet18 trains at 1,280 samples/s on cpu, bs64."]


def test_thread_scaling_names_the_best_count_and_its_efficiency():
    rows = [_row("t1", threads=1), _row("t2", threads=2)]
    df, reader = _frame(rows, {"t1": 0.10, "t2": 0.0625})
    (line,) = key.key_findings(df, reader=reader).section("Scaling")
    assert line.startswith("2 threads train fastest for resnet18 on cpu (bs64): 1,0") and _ratio(line) == \
        pytest.approx(1.6, rel=0.02)
    assert re.search(r"faster \(steps\) than 1 thread \(6[34]\d samples/s\)", line), line
    efficiency = float(re.search(r"parallel efficiency of 2 threads: ([\d.]+)%", line).group(1))
    assert efficiency == pytest.approx(100 * _ratio(line) / 2, abs=0.6), "the ratio shown, over 2"
    _divides_out(line)


def test_more_threads_that_slow_training_down_are_said_to():
    rows = [_row("t1", threads=1), _row("t2", threads=2)]
    df, reader = _frame(rows, {"t1": 0.05, "t2": 0.10})
    (line,) = variant_claims.scaling(df, reader)
    assert line.startswith("1 thread trains fastest for resnet18 on cpu (bs64): 1,2") and _ratio(line) == \
        pytest.approx(2.0, rel=0.02)
    assert re.search(r"faster \(steps\) than 2 threads \(6[34]\d samples/s\); parallel efficiency of 2 threads: "
                     r"2[45]\.\d%", line), line
    _divides_out(line)


def test_no_rows_at_all():
    out = key.key_findings(pd.DataFrame(columns=["status", "run_id"]))
    assert out.sections == [] and out.warnings == [] and out.not_run == ["no configuration was measured"]


class FloorReader(Reader):
    """Samples as ``Reader``, and a noise floor for machine ``m`` at one and two threads (a 30% floor at one)."""

    def floors(self, folder):
        from benchlib.store.noise_floor import NoiseFloor

        runs = tuple(np.exp(np.array([-1.2, -0.5, 0.0, 0.5, 1.2]) * 0.045))
        return [NoiseFloor(machine="m", measured_utc="2026-11-25", torch="", configuration="",
                           values={1: {"train_step_s": runs}, 2: {"train_step_s": runs}}, minutes=0.0)]


def test_rows_of_different_processes_are_claimed_only_beyond_the_floor():
    """One run a side in two processes: without a floor nothing is claimed; with one, 1.6x is and 1.1x is not."""
    rows = [_row("t1", threads=1, process_uid="host:1:0"), _row("t2", threads=2, process_uid="host:2:0")]
    df, reader = _frame(rows, {"t1": 0.10, "t2": 0.0625})
    (line,) = variant_claims.scaling(df, reader)
    assert "is inconclusive" in line and "benchlib calibrate" in line and "faster" not in line
    floors = FloorReader({"t1": 0.10, "t2": 0.0625})
    (line,) = variant_claims.scaling(df, floors)
    assert "faster (floor) than 1 thread" in line, line
    close = FloorReader({"t1": 0.10, "t2": 0.09})
    df_close, _ = _frame(rows, {"t1": 0.10, "t2": 0.09})
    (line,) = variant_claims.scaling(df_close, close)
    assert "is inconclusive" in line and "(floor)" in line and "repeat each side" in line


def test_accuracy_says_whether_it_is_one_training_or_seeds():
    one = pd.DataFrame([_row("cpu__resnet18__bs64__default__fp32__abc__seed0", seed=0, test_accuracy=0.93,
                             test_samples=360)])
    said = caveats.accuracy_sentence(one)
    assert said.startswith("Test accuracy is one training per configuration (seed 0): its 95% interval (Wilson) "
                           "over 360 test images covers the test set's sampling, not the spread between trainings")
    seeds = pd.DataFrame([_row(f"cpu__resnet18__bs64__default__fp32__abc__seed{s}", seed=s, test_accuracy=0.9 + s / 100,
                               test_samples=360) for s in range(3)])
    assert caveats.accuracy_sentence(seeds).startswith("Test accuracy is the median over each configuration's seeds "
                                                       "(up to 3)")
    assert caveats.accuracy_sentence(one.assign(test_accuracy=np.nan)) == ""


def test_rows_noisy_after_repeats_are_not_told_to_repeat_three_times():
    """An 8-repeat study's noisy rows were told to rerun with `repeats: 3`: fewer runs than they had."""
    rows = [_row(f"cpu__resnet18__bs64__default__fp32__abc__seed{i}", seed=i, train_step_noisy=i % 2 == 0)
            for i in range(8)]  # four of its eight runs noisy: the configuration had eight
    df, _ = _frame(rows, {r["run_id"]: 0.05 for r in rows})
    (noisy,) = [w for w in caveats.warnings(df) if "noisy" in w]
    assert "`repeats: 3`" not in noisy and "more repeats than 8" in noisy, noisy


def test_the_heading_counts_configurations_and_their_runs_apart():
    from benchlib.report.display.summary import heading

    runs = pd.DataFrame([_row(f"cpu__resnet18__bs64__{v}__fp32__abc__seed{i}", variant=v, seed=i,
                              device_name="Xeon") for v in ("default", "cl") for i in range(3)])
    assert "Study s: 2 configuration(s) in 6 run(s), 6 measured, on cpu (Xeon)" in heading("t", runs).data
    one_each = runs[runs["seed"] == 0]
    assert "Study s: 2 configuration(s), 2 measured, on cpu (Xeon)" in heading("t", one_each).data
