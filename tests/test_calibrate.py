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
from benchlib.errors import ConfigError
from benchlib.instruments.run_to_run import floor_of, floor_pcts
from benchlib.pipeline import calibrate, publish
from benchlib.pipeline import study as study_pipeline
from benchlib.report.evidence import floors
from benchlib.report.evidence.stats import compare, judge_single_runs
from benchlib.run import measure as measure_module
from benchlib.run import record as record_module
from benchlib.spec.settings import RunConfig
from benchlib.spec.study import parse_study
from benchlib.store.layout import ReportLayout, ResultsLayout
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
def _machine(monkeypatch):
    monkeypatch.setenv("BENCHLIB_MACHINE", MACHINE)


def _floor(*, machine: str = MACHINE, device: str = "cpu", days_old: float = 0.0, torch_version: str | None = None,
           interfered: bool = False, runs: int = 3, step: float = 0.1) -> NoiseFloor:
    when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days_old)
    steps = tuple(step * (1 + 0.1 * i) for i in range(runs))
    return NoiseFloor(machine=machine, measured_utc=when.isoformat(timespec="seconds"),
                      torch=torch.__version__ if torch_version is None else torch_version,
                      configuration="benchlib run --model resnet18", minutes=1.5, interfered=interfered,
                      interference="other processes used 50% of the 2 usable CPUs" if interfered else "",
                      values={1: {"train_step_s": steps, "infer_samples_per_s": tuple(100.0 + i for i in range(runs))},
                              2: {"train_step_s": tuple(s / 2 for s in steps)}},
                      device=device)


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
        return dataclasses.replace(_floor(step=0.5), extra={"new": True})

    monkeypatch.setattr(calibrate, "measure_noise_floor", fake)
    return calls


def test_no_floor_is_measured_saved_then_reused(tmp_path, measured):
    folder = tmp_path / "results" / "s"
    first = calibrate.ensure_noise_floor(folder, "cpu", progress=None, runs=4)
    assert measured == [("cpu", 4)] and first.extra == {"new": True}
    assert read_noise_floor(ResultsLayout.of(folder).noise_floor_path(MACHINE, "cpu")).extra == {"new": True}
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
    assert len(measured) == 1 and read_noise_floor(path).extra == {"new": True}
    assert any("not reused" in line for line in lines)


def test_a_fresh_floor_beside_the_folder_is_copied_in(tmp_path, measured):
    save_noise_floor(_floor(days_old=3.0, step=0.2), tmp_path / "results" / "older")
    save_noise_floor(_floor(days_old=1.0, step=0.3), tmp_path / "results" / "newer")
    save_noise_floor(_floor(torch_version="0.1", step=0.4), tmp_path / "results" / "foreign")
    folder = tmp_path / "results" / "s"
    got = calibrate.ensure_noise_floor(folder, "cpu", progress=None)
    assert measured == [], "a fresh sibling floor is reused"
    assert got.values[1]["train_step_s"][0] == pytest.approx(0.3), "the newest fresh sibling"
    assert read_noise_floor(ResultsLayout.of(folder).noise_floor_path(MACHINE, "cpu")) == got


def test_a_stale_floor_beside_the_folder_is_not_reused(tmp_path, measured):
    save_noise_floor(_floor(days_old=10.0), tmp_path / "results" / "old")
    calibrate.ensure_noise_floor(tmp_path / "results" / "s", "cpu", progress=None)
    assert len(measured) == 1


def test_a_study_calibrates_once_per_device_type_and_goes_on_when_it_fails(tmp_path, monkeypatch):
    calls: list[str] = []

    def fake(results_dir, device, *, progress=None, runs=5):
        calls.append(device)
        raise calibrate.CalibrationFailed("calibration run 1/10 (1 thread) failed (boom)")

    monkeypatch.setattr(study_pipeline, "ensure_noise_floor", fake)
    study_pipeline.calibrate(tmp_path, ["cpu", "cpu"])
    assert calls == ["cpu"]


def test_the_study_file_key():
    base = {"study": "s", "hardware": ["cpu"], "models": ["resnet18"], "batch_sizes": [8]}
    assert parse_study(base, "x").calibrate is True, "on by default"
    assert parse_study({**base, "calibrate": False}, "x").calibrate is False
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
    steps = compare(_noise(1.0), _noise(1.01, seed=2), higher_is_better=False)
    judged = judge_single_runs(steps, pct, same_process=False)
    assert judged.test == f"floor ±{shown}" and f"±{shown} (its noise floor)" in judged.note


def test_the_published_data_holds_the_floor(tmp_path):
    results = tmp_path / "results" / "s"
    save_noise_floor(_floor(), results)
    report = ReportLayout(tmp_path / "reports" / "s")
    copy = publish.copy_data([results], report)[0]
    assert read_noise_floor(copy / "noise_floor" / f"{MACHINE}__cpu.json") == read_noise_floor(
        ResultsLayout.of(results).noise_floor_path(MACHINE, "cpu"))
