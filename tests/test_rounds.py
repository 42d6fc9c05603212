"""Repeats as rounds of fresh processes, and ``repeats: auto`` stopping on precision or budget."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from benchlib.cli import main
from benchlib.errors import ConfigError
from benchlib.pipeline import rounds
from benchlib.report.evidence import rules
from benchlib.report.evidence.precision import Precision, study_precision
from benchlib.report.readback.folders import read_rounds
from benchlib.report.readback.samples import SampleFiles
from benchlib.spec.repeats import AutoRepeats, parse_repeats
from benchlib.store.layout import ResultsLayout
from benchlib.store.rows import read_results


def test_repeats_are_a_count_auto_or_a_budget_and_nothing_else():
    assert parse_repeats(3, "f") == (3, None)
    assert parse_repeats("auto", "f") == (10, AutoRepeats())
    assert parse_repeats({"until_pct": 5, "max_runs": 4}, "f") == (4, AutoRepeats(5.0, 4, 10.0))
    for bad in ("often", 0, {"max_runs": 1}, {"until_pct": -1}, {"speed": 2}, True):
        with pytest.raises(ConfigError, match="allowed"):
            parse_repeats(bad, "f.yaml")


def test_auto_takes_a_target_change_in_percent_or_with_a_percent_sign():
    assert parse_repeats({"target_change": "5%"}, "f")[1] == AutoRepeats(target_change_pct=5.0)
    assert parse_repeats({"target_change": 8, "max_runs": 6}, "f") == (6, AutoRepeats(max_runs=6,
                                                                                      target_change_pct=8.0))
    assert "can tell a 5% change" in AutoRepeats(target_change_pct=5.0).describe()
    for bad in ({"target_change": "five"}, {"target_change": 1}, {"target_change": "1%"}):
        with pytest.raises(ConfigError, match="target_change"):
            parse_repeats(bad, "f.yaml")


def test_auto_with_a_target_change_stops_when_every_comparison_can_tell_it_or_says_it_did_not(monkeypatch):
    tells = iter([14.0, 9.0, 4.5])
    monkeypatch.setattr(rounds, "measured_precision",
                        lambda *_: Precision(1.0, "x", 2, {}, next(tells), "b vs a"))
    keeper = rounds.RoundKeeper(AutoRepeats(target_change_pct=5.0), 10)
    assert _count(keeper) == 4 and "target reached: every comparison can tell a 5% change" in keeper.stopped
    assert keeper.record()["can_tell_pct"] == 4.5 and keeper.record()["target_change_pct"] == 5.0
    tells = iter([14.0, 9.0, 8.0])
    short = rounds.RoundKeeper(AutoRepeats(max_runs=3, target_change_pct=5.0), 3)
    assert _count(short) == 3
    assert "budget of 3 runs was spent; target not reached: the least sure comparison can tell 9.0%, not 5%" \
        in short.stopped


def test_the_precision_says_what_each_comparison_can_tell():
    rng = np.random.default_rng(1)

    class Reader(SampleFiles):
        def __call__(self, row):
            return pd.DataFrame({"series": "train_step_s", "value": [row["_step"]] * 5})

    rows = pd.DataFrame([{"run_id": f"cpu__r__bs64__{v}__seed{r}", "status": "ok", "machine": "m", "hardware": "cpu",
                          "model": "r", "batch_size": 64, "process_uid": f"p{v}{r}", "train_samples_per_s": 640.0,
                          "_step": s * math.exp(rng.normal(0, 0.03))}
                         for v, s in (("a", 0.1), ("b", 0.08)) for r in range(4)])
    p = study_precision(rows, Reader())
    assert set(p.per_item) == {"cpu__r__bs64__a", "cpu__r__bs64__b", "cpu__r__bs64__b vs cpu__r__bs64__a"}
    assert 2.0 <= p.can_tell_pct < 50 and p.can_tell_worst in p.per_item


def _keeper(monkeypatch, widths: list[float], auto: AutoRepeats | None, rounds_max: int):
    seen = iter(widths)
    monkeypatch.setattr(rounds, "measured_precision",
                        lambda *_: Precision(next(seen), "cpu__resnet18__bs64", 2, {}))
    return rounds.RoundKeeper(auto, rounds_max)


def _count(keeper) -> int:
    while keeper.another(ResultsLayout.of("unused"), "s", "m"):
        keeper.done += 1
    return keeper.done


def test_auto_stops_when_every_figure_is_precise_enough(monkeypatch):
    keeper = _keeper(monkeypatch, [9.0, 4.0, 2.5], AutoRepeats(3.0, 10, 60.0), 10)
    assert _count(keeper) == 4  # two rounds before judging, then 9%, 4%, 2.5% <= 3%
    assert "within ±2.5%" in keeper.stopped and keeper.record()["precision_pct"] == 2.5


def test_auto_stops_on_its_run_budget_and_says_how_precise_it_got(monkeypatch):
    keeper = _keeper(monkeypatch, [20.0, 15.0, 12.0], AutoRepeats(3.0, 3, 60.0), 3)
    assert _count(keeper) == 3 and "budget of 3 runs" in keeper.stopped
    assert keeper.record()["precision_pct"] == 15.0 and keeper.record()["rounds_run"] == 3


def test_auto_stops_before_a_round_would_overrun_its_minutes(monkeypatch):
    keeper = _keeper(monkeypatch, [20.0] * 5, AutoRepeats(3.0, 10, 1.0), 10)
    keeper.t0 -= 40  # two rounds took 40 s: a third would end past one minute
    keeper.done = 2
    assert not keeper.another(ResultsLayout.of("unused"), "s", "m") and "budget of 1 min" in keeper.stopped


def test_fixed_repeats_run_every_round():
    keeper = rounds.RoundKeeper(None, 3)
    assert _count(keeper) == 3 and keeper.record() == {"rounds_run": 3,
                                                       "each_round": "fresh processes (one kernel per pair)"}


def test_precision_narrows_with_runs_and_covers_ratios_within_a_pair():
    rng = np.random.default_rng(0)

    def rows_of(n_runs: int):
        rows, frames = [], {}
        for variant, step in (("a", 0.10), ("b", 0.08)):
            for r in range(n_runs):
                run_id = f"cpu__r__bs64__{variant}__seed{r}"
                rows.append({"run_id": run_id, "status": "ok", "machine": "m", "hardware": "cpu", "model": "r",
                             "batch_size": 64, "process_uid": f"p{r}", "train_samples_per_s": 64 / step})
                level = step * math.exp(rng.normal(0, 0.05))
                frames[run_id] = pd.DataFrame({"series": "train_step_s",
                                               "value": level * (1 + 0.01 * rng.standard_normal(30))})
        return pd.DataFrame(rows), Frames(frames)

    one = study_precision(*rows_of(1))
    assert math.isnan(one.worst_pct) and one.runs == 1  # one run: no interval across runs yet
    few, many = study_precision(*rows_of(3)), study_precision(*rows_of(12))
    assert "cpu__r__bs64__b vs cpu__r__bs64__a" in many.per_item
    assert 0 < many.worst_pct < few.worst_pct


class Frames(SampleFiles):
    """Samples from memory, no noise floor (no results folder)."""

    def __init__(self, frames: dict) -> None:
        super().__init__()
        self.frames = frames

    def __call__(self, row):
        return self.frames[row["run_id"]]


TINY_STUDY = ("study: s\nhardware: [cpu]\nmodels: [squeezenet1_1]\nbatch_sizes: [8]\ndataset: digits\n"
              "train_subset: 64\ntest_subset: 32\ntrain_steps: 3\nwarmup_steps: 1\nlatency_repeats: 6\n"
              "latency_budget_s: 0\ninfer_warmup_batches: 1\ncalibrate: false\nceilings_at_end: false\n")


@pytest.mark.slow
def test_each_round_runs_in_fresh_processes_and_auto_records_why_it_stopped(tmp_path, capsys):
    params = tmp_path / "s.yaml"
    params.write_text(TINY_STUDY + "repeats: {max_runs: 2}\n")  # tiny runs never reach ±3%: the budget stops it
    argv = ["study", str(params), "--results-root", str(tmp_path / "results"), "--reports-root",
            str(tmp_path / "reports"), "--no-summary"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "round 1/at most 2" in err and "repeats: auto stopped after 2 round(s)" in err
    rows = read_results([tmp_path / "results" / "s"])
    assert sorted(rows["seed"]) == [0, 1] and rows["process_uid"].nunique() == 2  # one process per round
    kept = json.loads((tmp_path / "results" / "s" / "run_rules.json").read_text())["rounds"]
    assert kept["mode"] == "auto" and kept["rounds_run"] == 2 and "budget of 2 runs" in kept["stopped"]
    assert kept["precision_pct"] > 0 and kept["least_precise"].startswith("cpu__squeezenet1_1__bs8")
    said = rules.rounds_text(read_rounds([tmp_path / "results" / "s"])["s"])  # what the summary says
    assert "ran 2 round(s), each in fresh processes, and stopped because the budget of 2 runs" in said
    assert main([*argv, "--repeats", "2"]) == 0  # rerun, fixed: every round's rows exist
    assert "round 2/2" in capsys.readouterr().err
    assert main([*argv, "--repeats", "often"]) == 2
    assert "--repeats" in capsys.readouterr().err
