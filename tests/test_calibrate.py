"""The machine's noise floor: measured in fresh processes, kept, reused while fresh, refused on bad input, carried
into the manifests, the summary and the published data."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats

from benchlib.cli import main
from benchlib.env.fingerprint import fingerprint
from benchlib.errors import ConfigError
from benchlib.instruments.run_to_run import floor_groups, floor_of, floor_pcts, log_spread
from benchlib.pipeline import calibrate, publish
from benchlib.pipeline import study as study_pipeline
from benchlib.report.evidence import floors
from benchlib.report.evidence.inference import Spread, compare, compare_runs
from benchlib.report.evidence.stats import judge_single_runs
from benchlib.run import measure as measure_module
from benchlib.run import record as record_module
from benchlib.spec.settings import RunConfig
from benchlib.spec.study import parse_study
from benchlib.store.layout import ReportLayout, ResultsLayout
from benchlib.store.machine_cache import machine_cache
from benchlib.store.noise_floor import (
    FLOOR_METRICS,
    NoiseFloor,
    read_noise_floor,
    save_noise_floor,
)

MACHINE = "testbox"


def _noise(level: float, n: int = 40, seed: int = 1) -> np.ndarray:
    return level * (1 + 0.01 * np.random.default_rng(seed).standard_normal(n))
TINY_CALIBRATION = calibrate.Calibration(
    model="squeezenet1_1", data="synthetic", batch_size=8, image_size=32, steps=2,
    settings={"epochs": 1, "warmup_steps": 1, "infer_warmup_batches": 1, "latency_repeats": 6,
              "latency_budget_s": 0, "synthetic_samples": 64})  # no 2 s latency series per batch size


@pytest.fixture(autouse=True)
def _machine(monkeypatch, tmp_path):
    monkeypatch.setenv("BENCHLIB_MACHINE", MACHINE)
    monkeypatch.setenv("BENCHLIB_CACHE", str(tmp_path / "machine-cache"))  # each test's machine cache its own


def _here(**change: str) -> dict[str, str]:
    """This process's fingerprint of the CPU (``change`` replaces some of it)."""
    return {**fingerprint(torch.device("cpu"), calibrate.METHOD_VERSION), **change}


def _floor(*, machine: str = MACHINE, device: str = "cpu", days_old: float = 0.0, torch_version: str | None = None,
           interfered: bool = False, runs: int = 3, step: float = 0.1, printed: dict | None = None) -> NoiseFloor:
    when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days_old)
    steps = tuple(step * (1 + 0.1 * i) for i in range(runs))
    return NoiseFloor(machine=machine, measured_utc=when.isoformat(timespec="seconds"),
                      torch=torch.__version__ if torch_version is None else torch_version,
                      configuration="benchlib run --model resnet18", minutes=1.5, interfered=interfered,
                      interference="other processes used 50% of the 2 usable CPUs" if interfered else "",
                      values={1: {"train_step_s": steps, "infer_samples_per_s": tuple(100.0 + i for i in range(runs))},
                              2: {"train_step_s": tuple(s / 2 for s in steps)}},
                      device=device, fingerprint=_here() if printed is None else printed)


def _expected_pct(*groups) -> float:
    """floor_pct of two single runs, worked out here: t times the pooled spread of a log ratio."""
    logs = [np.log(g) for g in groups]
    df = sum(len(x) - 1 for x in logs)
    s = math.sqrt(sum(((x - x.mean()) ** 2).sum() for x in logs) / df)
    return (math.exp(scipy_stats.t.ppf(0.995, df) * s * math.sqrt(2)) - 1) * 100


# ---------------------------------------------------------------- the record and when it is stale

def test_a_floor_survives_its_file(tmp_path):
    floor = _floor()
    path = save_noise_floor(floor, tmp_path)
    assert path == ResultsLayout.of(tmp_path).noise_floor_path(MACHINE, "cpu")
    back = read_noise_floor(path)
    assert back == floor
    assert back.runs == 3


@pytest.mark.parametrize("change,words", [
    ({"machine": "otherbox"}, "machine 'otherbox'"),
    ({"device": "cuda"}, "measured on cuda, not cpu"),
    ({"torch_version": "1.0.0"}, "torch 1.0.0"),
    ({"days_old": 8.0}, "8 days ago"),
    ({"interfered": True}, "other work ran"),
    ({"runs": 2}, "three or more"),
])
def test_a_floor_is_stale_for_each_reason(change, words):
    assert calibrate.stale_reason(_floor(), MACHINE, "cpu") is None
    assert calibrate.stale_reason(_floor(days_old=6.9), MACHINE, "cpu") is None, "under STALE_AFTER_DAYS it is fresh"
    reason = calibrate.stale_reason(_floor(**change), MACHINE, "cpu")
    assert reason is not None and words in reason


@pytest.mark.parametrize("change,words", [
    ({"cpus": "64"}, "measured with usable CPUs 64, not "),
    ({"cpu_model": "Another CPU"}, "measured on CPU Another CPU, not "),
    ({"method": "noise-floor-0"}, "measured by method noise-floor-0, not noise-floor-"),
])
def test_a_floor_of_another_fingerprint_is_stale(change, words):
    assert calibrate.stale_reason(_floor(), MACHINE, "cpu", current=_here()) is None
    reason = calibrate.stale_reason(_floor(printed=_here(**change)), MACHINE, "cpu", current=_here())
    assert reason is not None and reason.startswith(words), reason


def test_an_unreadable_time_is_stale():
    floor = dataclasses.replace(_floor(), measured_utc="yesterday")
    assert "unreadable" in str(calibrate.stale_reason(floor, MACHINE, "cpu"))


# ---------------------------------------------------------------- reused or measured

@pytest.fixture
def measured(monkeypatch):
    """Each call of the measuring function, which returns a fresh fake floor instead of running anything."""
    calls: list[tuple[str, int]] = []

    def fake(device, *, runs=5, threads=None, progress=None, calibration=None):
        calls.append((device, runs))
        return dataclasses.replace(_floor(step=0.5), extra={"new": True, "call": len(calls)})

    monkeypatch.setattr(calibrate, "measure_noise_floor", fake)
    return calls


def test_no_floor_is_measured_saved_then_reused(tmp_path, measured):
    folder = tmp_path / "results" / "s"
    first = calibrate.ensure_noise_floor(folder, "cpu", progress=None, runs=4)
    assert measured == [("cpu", 4)] and first.extra == {"new": True, "call": 1}
    assert read_noise_floor(ResultsLayout.of(folder).noise_floor_path(MACHINE, "cpu")).extra == first.extra
    again = calibrate.ensure_noise_floor(folder, "cpu", progress=None)
    assert measured == [("cpu", 4)], "a fresh floor in the folder is not measured again"
    assert again.measured_utc == first.measured_utc


@pytest.mark.parametrize("stale", [{"days_old": 30.0}, {"interfered": True}, {"torch_version": "0.1"},
                                   {"machine": "otherbox"}])
def test_a_stale_floor_in_the_folder_is_measured_again(tmp_path, measured, stale):
    folder = tmp_path / "results" / "s"
    old = _floor(**stale)
    path = ResultsLayout.of(folder).noise_floor_path(MACHINE, "cpu")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old.to_json()))  # under this machine's name, whatever the record says
    lines: list[str] = []
    calibrate.ensure_noise_floor(folder, "cpu", progress=lines.append)
    assert len(measured) == 1 and read_noise_floor(path).extra == {"new": True, "call": 1}
    assert any("not reused" in line for line in lines)


def test_a_second_results_folder_finds_the_floor_in_the_machine_cache(tmp_path, measured):
    first = calibrate.ensure_noise_floor(tmp_path / "results" / "a", "cpu", progress=None)
    assert read_noise_floor(machine_cache().noise_floor_path(MACHINE, "cpu")) == first, "kept for the machine"
    lines: list[str] = []
    second = calibrate.ensure_noise_floor(tmp_path / "results" / "b", "cpu", progress=lines.append)
    assert measured == [("cpu", 5)], "the second folder measures nothing"
    assert second == first and read_noise_floor(ResultsLayout.of(tmp_path / "results" / "b").noise_floor_path(
        MACHINE, "cpu")) == first, "the folder keeps a copy: its report reads its own"
    assert any("machine cache" in line for line in lines), lines


@pytest.mark.parametrize("printed,kept,words", [
    ({"torch": "0.1"}, {}, "measured with torch 0.1, not"),
    ({"cpus": "64"}, {}, "measured with usable CPUs 64, not"),
    (None, {}, "measured without a fingerprint (an older benchlib)"),
    ({}, {"days_old": 10.0}, "10 days ago"),
    ({}, {"interfered": True}, "other work ran"),
])
def test_a_changed_fingerprint_or_an_old_floor_in_the_machine_cache_is_measured_again(tmp_path, measured, printed,
                                                                                      kept, words):
    save_noise_floor(_floor(printed={} if printed is None else _here(**printed), **kept), machine_cache().root)
    lines: list[str] = []
    got = calibrate.ensure_noise_floor(tmp_path / "results" / "s", "cpu", progress=lines.append)
    assert len(measured) == 1 and got.extra["call"] == 1
    assert any("machine cache" in line and "not reused" in line and words in line for line in lines), lines
    assert read_noise_floor(machine_cache().noise_floor_path(MACHINE, "cpu")) == got, "the cache holds the new one"


def test_without_measuring_a_missing_floor_is_none(tmp_path, measured):
    assert calibrate.ensure_noise_floor(tmp_path / "s", "cpu", progress=None, measure=False) is None
    assert measured == [] and not (tmp_path / "s" / "noise_floor").exists()


def test_the_estimate_comes_from_the_runs_so_far():
    counts = (1, 2)
    assert calibrate.estimate_line([(1, 35.0)], counts, 10) == ("calibrating: 10 runs, about 35 s each from the "
                                                                "first: about 6 minutes")
    # once each thread count has run, each is estimated from its own runs: 4 more at 20 s, 4 more at 60 s
    assert calibrate.time_left_s([(1, 20.0), (2, 60.0)], counts, 10) == pytest.approx(320.0)
    assert calibrate.estimate_line([(1, 20.0), (2, 60.0)], counts, 10) == "about 5 minutes left"
    assert calibrate.estimate_line([(1, 10.0)] * 2, (1,), 3) == "10 s left"
    assert calibrate.duration_text(89) == "89 s" and calibrate.duration_text(150) == "about 2 minutes"


def test_a_calibration_says_how_long_it_will_take_after_its_first_run(monkeypatch):
    clock = iter(range(0, 10_000, 30))  # every reading of the clock 30 s after the last
    monkeypatch.setattr(calibrate.time, "perf_counter", lambda: float(next(clock)))
    monkeypatch.setattr(calibrate, "run_once", lambda *a, **k: {"status": "ok", "train_step_s_median": 0.1})
    lines: list[str] = []
    calibrate.measure_noise_floor("cpu", runs=3, threads=[1, 2], progress=lines.append)
    assert lines[0].startswith("noise floor of cpu: 3 fresh runs at 1, 2 thread(s), 6 in all; the first run's "
                               "time gives the estimate")
    assert lines[2] == "calibrating: 6 runs, about 30 s each from the first: about 3 minutes", lines
    assert lines[3].endswith("in 30 s; about 2 minutes left"), lines
    assert lines[-1].endswith("in 30 s"), "the last run: nothing left to estimate"


def test_a_study_calibrates_once_per_device_type_and_goes_on_when_it_fails(tmp_path, monkeypatch):
    calls: list[str] = []

    def fake(results_dir, device, *, progress=None, runs=5, measure=True):
        calls.append(device)
        raise calibrate.CalibrationFailed("calibration run 1/10 (1 thread) failed (boom)")

    monkeypatch.setattr(study_pipeline, "ensure_noise_floor", fake)
    study_pipeline.calibrate(tmp_path, ["cpu", "cpu"])
    assert calls == ["cpu"]


def test_the_study_file_key():
    base = {"study": "s", "hardware": ["cpu"], "models": ["resnet18", "mobilenet_v2"], "batch_sizes": [8]}
    assert parse_study(base, "x").calibrate is None, "by default: when a comparison needs it"
    assert parse_study(base, "x").floor_needed() is None, "models compared, none of the study's own comparisons"
    assert parse_study({**base, "calibrate": True}, "x").floor_needed() == "calibrate: true"
    assert parse_study({**base, "calibrate": False}, "x").calibrate is False
    variants = {**base, "variants": ["cpu-default", "cpu-quantized"]}
    assert parse_study(variants, "x").floor_needed() == "2 variants compared at one run a side"
    assert parse_study({**variants, "calibrate": False}, "x").floor_needed() is None
    assert parse_study({**variants, "repeats": 3}, "x").floor_needed() is None, "runs compared with runs"
    several = {**base, "batch_sizes": [8, 16], "sweep": {"threads": [1, 2]}}
    assert parse_study(several, "x").floor_needed() == ("2 batch sizes, 2 values of threads compared at one run a "
                                                        "side")
    with pytest.raises(ConfigError, match="key 'calibrate' is 'yes'; allowed: true or false"):
        parse_study({**base, "calibrate": "yes"}, "x")


# ---------------------------------------------------------------- the command

@pytest.mark.parametrize("argv,words", [
    (["--runs", "2"], "--runs 2; allowed: integers >= 3"),
    (["--threads", "0"], "--threads 0; allowed: 1.."),
    (["--threads", "1", "100000"], "--threads 100000; allowed: 1.."),
    (["--device", "cuda:99"], "--device: hardware 'cuda:99' is not present"),
    (["--device", "tpu"], "--device: unknown hardware 'tpu'"),
])
def test_bad_input_is_refused_in_one_line_before_any_run(tmp_path, capsys, measured, argv, words):
    assert main(["calibrate", "--results-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("benchlib: error: command line: ") and words in err, err
    assert measured == [] and not (tmp_path / "noise_floor").exists()


def test_the_command_prints_the_floor_per_thread_count_and_metric(tmp_path, capsys, measured):
    assert main(["calibrate", "--results-dir", str(tmp_path), "--runs", "3", "--threads", "1", "2"]) == 0
    out = capsys.readouterr().out
    values = _floor(step=0.5).values
    step = floors.floor_text(_expected_pct(values[1]["train_step_s"], values[2]["train_step_s"]))
    infer = floors.floor_text(_expected_pct(values[1]["infer_samples_per_s"]))
    assert (f"differences between single runs under {step} in training step time and {infer} in inference "
            "throughput are within this machine's run-to-run noise and are not claimed") in out
    assert "1.5 min" in out and "the runs' figures" in out and "floor %" in out
    assert "1 thread: 500 ms, 550 ms, 600 ms; 2 threads: 250 ms, 275 ms, 300 ms" in out, "the runs' figures"
    assert (tmp_path / "noise_floor" / f"{MACHINE}__cpu.json").is_file()
    assert machine_cache().noise_floor_path(MACHINE, "cpu").is_file(), "every results folder of the machine finds it"
    assert main(["calibrate", "--results-dir", str(tmp_path), "--runs", "3", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["machine"] == MACHINE and record["values"]["1"]["train_step_s"][0] == pytest.approx(0.5)
    assert record["floor_pct"] == floor_pcts(_floor(step=0.5))


@pytest.mark.slow
def test_a_real_calibration_in_fresh_processes(tmp_path):
    lines: list[str] = []
    floor = calibrate.measure_noise_floor("cpu", runs=3, threads=[1], progress=lines.append,
                                          calibration=TINY_CALIBRATION)
    assert floor.machine == MACHINE and floor.device == "cpu" and floor.torch == torch.__version__
    assert set(floor.values) == {1} and floor.runs == 3
    assert set(floor.values[1]) == set(FLOOR_METRICS)
    steps = floor.values[1]["train_step_s"]
    assert all(0 < s < 30 for s in steps) and len(set(steps)) == 3, "three processes, three different medians"
    assert 0 < floor.minutes < 10
    assert "--model squeezenet1_1" in floor.configuration and "--threads" not in floor.configuration
    assert abs(dt.datetime.fromisoformat(floor.measured_utc) - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(
        minutes=10)
    assert floor.interfered == bool(floor.interference)
    pct = floor_pcts(floor)["train_step_s"]
    assert pct == pytest.approx(_expected_pct(steps), abs=0.06)
    assert sum("noise floor run" in line for line in lines) == 3


def test_a_failed_run_is_one_line_naming_it():
    bad = dataclasses.replace(TINY_CALIBRATION, settings={**TINY_CALIBRATION.settings, "latency_repeats": 1})
    with pytest.raises(calibrate.CalibrationFailed) as exc:
        calibrate.measure_noise_floor("cpu", runs=3, threads=[1], progress=None, calibration=bad)
    message = str(exc.value)
    assert "\n" not in message and "calibration run 1/3 (1 thread) failed" in message
    assert "latency_repeats" in message and exc.value.exit_code == 1


# ---------------------------------------------------------------- where the floor shows

def test_the_manifest_carries_this_machines_floor(tmp_path, monkeypatch, tiny_settings):
    mine = _floor()
    save_noise_floor(mine, tmp_path)
    save_noise_floor(_floor(machine="otherbox", step=9.0), tmp_path)
    monkeypatch.setattr(record_module, "ensure_ceilings", lambda *a, **k: None)  # no roof needed here

    def nothing_measured(*a, **k):  # the manifest is written before the measurement, which is not the point here
        raise RuntimeError("not measured in this test")

    monkeypatch.setattr(measure_module, "measure", nothing_measured)
    row = record_module.record(RunConfig("t", "cpu", "squeezenet1_1", 8, tiny_settings), tmp_path, progress=None)
    assert row["status"] == "failed"
    manifest = json.loads(ResultsLayout.of(tmp_path).manifest_path(row["manifest_id"]).read_text())
    pct = round(_expected_pct(mine.values[1]["train_step_s"], mine.values[2]["train_step_s"]), 1)
    assert manifest["noise_floor"]["cpu"]["floor_pct"]["train_step_s"] == pytest.approx(pct)
    assert manifest["noise_floor"] == {"cpu": {"measured_utc": mine.measured_utc, "runs": 3, "interfered": False,
                                               "floor_pct": floor_pcts(mine)}}
    assert record_module.noise_floor_entry(ResultsLayout.of(tmp_path / "none"), MACHINE) == {}


def test_the_summary_table_and_sentence_of_a_floor():
    floor = _floor()
    table = floors.noise_floor_table([floor])
    assert list(table.columns) == ["machine", "device", "metric", "floor %", "runs", "the runs' figures"]
    assert len(table) == 2, "one line per metric, its thread counts pooled"
    step = table[table["metric"] == "training step"].iloc[0]
    pooled = _expected_pct(floor.values[1]["train_step_s"], floor.values[2]["train_step_s"])
    assert step["floor %"] == floors.floor_text(pooled)
    assert pooled < _expected_pct(floor.values[1]["train_step_s"]), "more runs behind it: a narrower bound"
    assert step["runs"] == 6
    assert step["the runs' figures"] == "1 thread: 100 ms, 110 ms, 120 ms; 2 threads: 50.0 ms, 55.0 ms, 60.0 ms"
    said = floors.noise_floor_sentences([floor], [MACHINE, "otherbox"])
    infer = floors.floor_text(_expected_pct(floor.values[1]["infer_samples_per_s"]))
    assert said[0].startswith(f"On {MACHINE} (cpu), differences between single runs under {step['floor %']} in "
                              f"training step time and {infer} in inference throughput")
    assert "3 fresh runs at each of 1 thread and 2 threads on " in said[0]
    assert "are within this machine's run-to-run noise and are not claimed" in said[0]
    assert said[1] == ("No noise floor was measured on otherbox: single-run comparisons are inconclusive; run "
                       "`benchlib calibrate`.")
    assert "wider than the machine's quiet floor" in floors.noise_floor_sentences([_floor(interfered=True)])[0]


def _busy_floor() -> NoiseFloor:
    """A calibration beside other work: a floor of about 450% in training step time, far more in inference."""
    return dataclasses.replace(_floor(), values={
        1: {"train_step_s": (0.22, 0.30, 0.25, 0.40, 0.21), "infer_samples_per_s": (602.0, 196.0, 711.0, 22.6, 732.0)}})


def test_a_floor_that_bounds_nothing_is_said_to_not_printed_as_a_bound():
    """Issue 36: a busy host's calibration printed as a floor of "190,000%" and of 545% beside 540%."""
    floor = _busy_floor()
    step_pct = floor_of([floor], "train_step_s")
    infer_pct = floor_of([floor], "infer_samples_per_s")
    assert 100 < step_pct < 1000 and infer_pct > 10_000, (step_pct, infer_pct)
    table = floors.noise_floor_table([floor])
    cells = dict(zip(table["metric"], table["floor %"]))
    assert re.fullmatch(r"no bound \(identical runs may differ [\d.]+x\)", cells["training step"]), cells
    assert cells["inference throughput"].startswith("no bound"), cells
    (said,) = floors.noise_floor_sentences([floor])
    assert "bounds nothing in training step time or inference throughput" in said
    assert "busy" in said and "inconclusive" in said and "not claimed" not in said
    page = " ".join([said, *table["floor %"]])
    assert "%" not in page.replace("% of", ""), page  # no floor quoted as a percentage bound
    steps = compare(_noise(1.0), _noise(3.0, seed=2), higher_is_better=False)
    judged = judge_single_runs(steps, step_pct, same_process=False)
    assert judged.verdict == "inconclusive" and judged.level == "steps", judged
    assert "bounds nothing" in judged.note and f"{step_pct:.0f}%" not in judged.note + judged.test


def test_one_floor_reads_the_same_in_the_table_the_sentence_and_a_comparison():
    floor = dataclasses.replace(_floor(), values={1: {"train_step_s": (0.100, 0.101, 0.102, 0.1005, 0.1015),
                                                      "infer_samples_per_s": (100.0, 101.0, 99.0, 100.5, 99.5)}})
    pct = floor_of([floor], "train_step_s")  # 5.23%: "5%" to one rounding, "5.2%" to the other
    shown = floors.floor_text(pct)
    assert f"{pct:.0f}%" != shown, "a floor whose two roundings differ"
    assert shown in floors.noise_floor_table([floor])["floor %"].tolist()
    assert f"under {shown} in training step time" in floors.floor_sentence(floor)
    sd, df = log_spread(floor_groups([floor], "train_step_s"))
    judged = compare_runs([_noise(1.0)], [_noise(1.01, seed=2)], higher_is_better=False, floor=Spread(sd, df))
    assert judged.level == "floor" and judged.test == "t-log, spread pooled with the noise floor", judged
    # the floor's prediction bound (99%) and a single-run comparison's interval (95%) rest on one spread
    assert math.log(1 + pct / 100) == pytest.approx(scipy_stats.t.ppf(0.995, df) * sd * math.sqrt(2), rel=1e-9)


def test_the_published_data_holds_the_floor(tmp_path):
    results = tmp_path / "results" / "s"
    save_noise_floor(_floor(), results)
    report = ReportLayout(tmp_path / "reports" / "s")
    copy = publish.copy_data([results], report)[0]
    assert read_noise_floor(copy / "noise_floor" / f"{MACHINE}__cpu.json") == read_noise_floor(
        ResultsLayout.of(results).noise_floor_path(MACHINE, "cpu"))
