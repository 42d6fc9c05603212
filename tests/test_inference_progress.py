"""A slow inference phase says what it times and how far it got, at a terminal and in a notebook, and stays
bounded: after "timing inference ... within 2 s" a pair once ran 13 more minutes with no line but "still
running" (50 throughput repeats of 5 batches each, at a slow working batch, on a busy host)."""
from __future__ import annotations

import io
import re
import time

import pytest
import torch
from torch import nn

from benchlib import log as messages
from benchlib.cli.progress import Progress
from benchlib.engine import inference
from benchlib.engine.inference import measure_latency, measure_throughput
from benchlib.run.measure import inference_plan
from benchlib.spec.settings import RunConfig, RunSettings


class _Slow(nn.Module):
    """A forward pass that takes ``seconds``, whatever the batch (a slow working batch on a busy host)."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return x


@pytest.fixture
def every_pass(monkeypatch):
    monkeypatch.setattr(inference, "TICK_S", 0.0)  # a report after every timed sample, not once a second


def test_each_series_reports_its_counts_and_seconds(every_pass):
    heard: list[str] = []
    measure_latency(_Slow(0.001), torch.zeros(1, 3), warmup=2, repeats=4, tick=heard.append)
    assert heard[:2] == [h for h in heard[:2] if h.startswith("warmup at batch 1: ")]
    assert re.fullmatch(r"warmup at batch 1: 2/2 passes, \d+\.\d s", heard[1]), heard
    assert re.fullmatch(r"latency at batch 1: 3/4 passes, \d+\.\d s", heard[4]), heard
    heard.clear()
    measure_latency(_Slow(0.001), torch.zeros(1, 3), warmup=0, repeats=2, budget_s=30.0, target=5, tick=heard.append)
    assert re.fullmatch(r"latency at batch 1: 4/5 passes, \d+\.\d s of up to 30 s", heard[3]), heard
    heard.clear()
    measure_throughput(_Slow(0.001), torch.zeros(8, 3), warmup=0, repeats=3, tick=heard.append)
    assert re.fullmatch(r"throughput at batch 8: 2/3 repeats of 5 batches, \d+\.\d s", heard[1]), heard


def test_a_series_past_its_budget_counts_toward_where_it_stops():
    series = inference.throughput_series(64, repeats=50, budget_s=2.0)
    assert series.status(3, 8.8) == "throughput at batch 64: 3/5 repeats of 5 batches, 8.8 s"
    assert series.status(5, 8.8) == "throughput at batch 64: 5/5 repeats of 5 batches, 8.8 s", "not 'of up to 2 s'"
    assert series.status(7, 1.2) == "throughput at batch 64: 7/50 repeats of 5 batches, 1.2 s of up to 2 s"


def test_a_slow_throughput_series_stops_at_its_budget_after_its_minimum():
    t0 = time.perf_counter()
    samples = measure_throughput(_Slow(0.01), torch.zeros(8, 3), warmup=0, repeats=50, budget_s=0.2)
    assert samples.n == inference.THROUGHPUT_MIN_REPEATS, "5 repeats of 5 slow batches outlast the budget"
    assert time.perf_counter() - t0 < 50 * 5 * 0.01, "not the 50 repeats of before"
    assert measure_throughput(nn.Identity(), torch.zeros(8, 3), warmup=0, repeats=50, budget_s=30.0).n == 50
    assert measure_throughput(nn.Identity(), torch.zeros(8, 3), warmup=0, repeats=3, budget_s=0.0).n == 3
    assert measure_throughput(nn.Identity(), torch.zeros(8, 3), warmup=0, repeats=50).n == 50, "no budget: all"


def test_the_phase_line_says_what_it_will_time():
    cfg = RunConfig("s", "cpu", "resnet18", 64, RunSettings.of(latency_repeats=50, latency_budget_s=2.0,
                                                               infer_warmup_batches=10))
    plan = inference_plan(cfg)
    assert plan == ("timing inference: 10 warmup pass(es) at batch 1 and at 64; latency at each: at least 50 passes, "
                    "up to 1000 within 2 s; throughput at 64: at least 5 repeats of 5 batches, up to 50 within 2 s")
    exact = inference_plan(RunConfig("s", "cpu", "resnet18", 64, RunSettings.of(latency_repeats=3,
                                                                                latency_budget_s=0.0)))
    assert "latency at each: 3 passes; throughput at 64: 3 repeats of 5 batches" in exact


def test_a_terminal_shows_the_counts_on_its_status_line(every_pass):
    stream = io.StringIO()
    progress = Progress(stream, terminal=True, shown=True)
    measure_latency(_Slow(0.001), torch.zeros(4, 3), warmup=0, repeats=3, tick=progress.heartbeat)
    assert "\r\x1b[K[benchlib] latency at batch 4: 3/3 passes, " in stream.getvalue()


def test_a_notebook_sees_lines_with_counts_through_benchlibs_logger(every_pass, monkeypatch, capsys):
    """In Jupyter benchlib writes to stderr through its own handler; a long phase adds a line now and then."""
    monkeypatch.setattr(messages, "PLAIN_HEARTBEAT_S", 0.02)
    messages.configure()
    beat = messages.now_and_then(messages.info)
    measure_throughput(_Slow(0.005), torch.zeros(16, 3), warmup=0, repeats=6, tick=beat)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "throughput at batch 16" in ln]
    assert lines and all(re.fullmatch(r"\[benchlib\] throughput at batch 16: \d/6 repeats of 5 batches, \d+\.\d s", ln)
                         for ln in lines), lines


def test_now_and_then_waits_its_interval_from_the_start():
    clock = iter([0.0, 10.0, 61.0, 62.0, 125.0]).__next__
    said: list[str] = []
    beat = messages.now_and_then(said.append, 60.0, clock=clock)
    for msg in ("a", "b", "c", "d"):
        beat(msg)
    assert said == ["b", "d"], "the first a minute after the start, then a minute apart"


@pytest.mark.slow
def test_a_benchmark_call_in_a_notebook_hears_its_inference_phase(every_pass, monkeypatch, capsys, tmp_path):
    """``benchlib.benchmark`` as a notebook cell calls it: no heartbeat of its own, its lines on stderr."""
    import benchlib

    monkeypatch.setattr(messages, "PLAIN_HEARTBEAT_S", 0.0)
    messages.configure()

    class SlowCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.head = nn.Linear(4, 3)

        def forward(self, x):
            if not self.training:
                time.sleep(0.002)
            return self.head(self.body(x))

    benchlib.benchmark(SlowCNN(), hardware="cpu", batch_sizes=[4], image_size=16, steps=2, results_dir=tmp_path,
                       settings={"latency_repeats": 3, "latency_budget_s": 0, "warmup_steps": 1,
                                 "infer_warmup_batches": 1, "telemetry": False})
    err = capsys.readouterr().err
    assert "[benchlib] timing inference: 1 warmup pass(es) at batch 1 and at 4" in err
    for expected in (r"latency at batch 1: \d/3 passes, \d+\.\d s", r"latency at batch 4: \d/3 passes",
                     r"throughput at batch 4: \d/3 repeats of 5 batches"):
        assert re.search(r"\[benchlib\] " + expected, err), (expected, err)

