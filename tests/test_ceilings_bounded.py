"""A ceilings file stays bounded: merges keep each attempt once, old attempts are summarised, a grown file is
read fast and cut back, and no roof's highest figure is lost on the way."""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import warnings
from pathlib import Path

import pytest
import torch

from benchlib.env.devices import device_name
from benchlib.roofline import cache
from benchlib.roofline.cache import RETRY_INTERFERED_S, ensure_ceilings, remeasure_ceilings
from benchlib.roofline.ceilings import CONV_KERNEL
from benchlib.roofline.history import KEPT_LATEST, Attempt, Earlier, bounded
from benchlib.roofline.measured import MAX_CEILINGS_FILE_BYTES, Ceilings, best_of, read_ceilings
from benchlib.store.machine_cache import machine_cache

# A real file's samples: about 20 figures of 10 repeats each, so the bound is tested at a real file's size.
SAMPLE_KEYS = [f"{kind}_{d}_s" for kind in ("matmul", "conv", "conv3x3", "conv1x1", "depthwise", "dram", "cache")
               for d in ("fp32", "bf16")] + ["copy_s"]


def _when(seconds_ago: float) -> str:
    when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds_ago)
    return when.isoformat(timespec="seconds")


def _attempt(rng: random.Random, seconds_ago: float) -> Ceilings:
    """A measurement as ``measure_watched`` returns one on a busy host, figures drawn at random, not measured."""
    fp32, bf16 = rng.uniform(50e9, 150e9), rng.uniform(100e9, 400e9)
    bandwidth = rng.uniform(5e9, 20e9)
    return Ceilings(
        device="cpu", device_name=device_name(torch.device("cpu")), peak_flops_per_s={"fp32": fp32, "bf16": bf16},
        bandwidth_bytes_per_s=bandwidth, samples={k: [rng.uniform(1e-3, 2e-3) for _ in range(10)] for k in SAMPLE_KEYS},
        conv_flops_per_s={"fp32": fp32, "bf16": bf16}, conv_kernel=CONV_KERNEL["cpu"],
        kind_flops_per_s={"conv3x3": {"fp32": fp32, "bf16": bf16}}, matmul_flops_per_s={"fp32": fp32 / 2},
        kind_bandwidth_bytes_per_s={"dram": {"fp32": bandwidth}}, torch=torch.__version__,
        measured_utc=_when(seconds_ago), interference_cpu_pct=60.0, interfered=True,
        interference="other processes used 60% of the 2 usable CPUs (threshold 10%)")


@pytest.fixture
def simulated(monkeypatch, tmp_path):
    """Every measurement a new busy-host attempt an hour old (so never settled), drawn, not measured."""
    monkeypatch.setenv("BENCHLIB_CACHE", str(tmp_path / "machine-cache"))
    rng, made = random.Random(51), []

    def measure(device, *args, **kwargs):
        made.append(_attempt(rng, RETRY_INTERFERED_S * 6 - len(made)))
        return made[-1]

    monkeypatch.setattr(cache, "measure_ceilings_robust", measure)
    monkeypatch.setattr(cache, "measure_watched", measure)
    return made


def test_200_merges_of_a_copy_and_its_source_on_a_busy_host_stay_bounded(tmp_path, simulated):
    """What a study's processes and its end do, 200 times over: on the code before this test the attempt lists
    quadrupled a cycle (3, 15, 63, 255, ...) until a study was killed for memory."""
    folder = tmp_path / "results"
    kept = machine_cache().ceilings_path(cache.machine_name(), "cpu")
    for cycle in range(200):
        ensure_ceilings(folder, "cpu")
        remeasure_ceilings(folder, "cpu")
        for path in (kept, next((folder / "ceilings").glob("*.json"))):
            size = path.stat().st_size
            assert size < 100_000, f"cycle {cycle}: {path} is {size} bytes"
    now = read_ceilings(kept)
    assert now.interfered is True and not cache.settled(now), "the case under test: never settled"
    assert now.attempts == len(simulated), "each attempt counted once"
    assert len(now.history) <= KEPT_LATEST + 3  # the latest few, and a holder of each highest figure
    # nothing measured is lost: each roof's highest figure survives the cut
    for dtype in ("fp32", "bf16"):
        assert now.peak_flops_per_s[dtype] == max(a.peak_flops_per_s[dtype] for a in simulated)
        assert now.kind_flops_per_s["conv3x3"][dtype] == max(a.kind_flops_per_s["conv3x3"][dtype] for a in simulated)
    assert now.bandwidth_bytes_per_s == max(a.bandwidth_bytes_per_s for a in simulated)
    assert now.earlier.first_utc == min(a.measured_utc for a in simulated)


def test_best_of_a_ceilings_with_itself_is_itself(tmp_path, simulated):
    rng = random.Random(1)
    merged = best_of([_attempt(rng, 9000 - 60 * i) for i in range(12)])
    cache.save_ceilings(merged, tmp_path)
    x = read_ceilings(next((tmp_path / "ceilings").glob("*.json")))
    assert best_of([x, x]) == x
    assert best_of([x]) == x
    copy = dataclasses.replace(x, path="elsewhere")
    new = _attempt(rng, 10)
    three = best_of([x, copy, new])
    assert [a.identity for a in three.history] == sorted({a.identity for a in three.history},
                                                         key=[a.identity for a in three.history].index)
    assert three.attempts == x.attempts + 1, "each attempt once: the copy adds nothing, the new one adds one"


def test_bounding_keeps_the_best_and_the_latest_and_is_stable():
    rng = random.Random(7)
    attempts = [Attempt(_when(1000 - i), {"fp32": rng.uniform(1, 100)}, rng.uniform(1, 100)) for i in range(40)]
    kept, earlier = bounded(attempts, Earlier())
    assert len(kept) <= KEPT_LATEST + 2 and earlier.count == 40 - len(kept)
    ids = {a.identity for a in kept}
    assert max(attempts, key=lambda a: a.peak_flops_per_s["fp32"]).identity in ids
    assert max(attempts, key=lambda a: a.bandwidth_bytes_per_s).identity in ids
    assert {a.identity for a in attempts[-KEPT_LATEST:]} <= ids
    assert bounded(kept, earlier) == (kept, earlier), "bounding a bounded history changes nothing"
    assert earlier.merged(earlier) == earlier
    assert earlier.peak_flops_per_s["fp32"] <= max(a.peak_flops_per_s["fp32"] for a in kept)


def _grown_file(path: Path, copies: int) -> Ceilings:
    """A ceilings file of the kind an older benchlib grew: its attempt lists the same few attempts many times
    (written as that version wrote them, streamed, so the test holds none of it in memory)."""
    rng = random.Random(3)
    few = [_attempt(rng, 5000 - i) for i in range(3)]
    top = best_of(few)
    data = top.to_json()
    for key in ("history", "earlier", "attempts"):
        data.pop(key)
    data["attempts"] = 3 * copies
    head, tail = json.dumps(data)[:-1], "}"
    lists = {"attempt_peaks_flops_per_s": [json.dumps(a.peak_flops_per_s) for a in few],
             "attempt_bandwidths_bytes_per_s": [json.dumps(a.bandwidth_bytes_per_s) for a in few],
             "attempt_interference_cpu_pct": ["60.0", "null", "55.5"]}
    with path.open("w", encoding="utf-8") as out:
        out.write(head)
        for key, items in lists.items():
            out.write(f', "{key}": [')
            block = ", ".join(items)
            out.write(", ".join([block] * copies))
            out.write("]")
        out.write(', "conv_shape": [16, 256, 14]' + tail)
    return top


def test_a_grown_file_is_read_without_its_history_and_cut_back(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHLIB_CACHE", str(tmp_path / "machine-cache"))
    path = machine_cache().ceilings_path(cache.machine_name(), "cpu")
    path.parent.mkdir(parents=True)
    top = _grown_file(path, copies=40_000)
    assert path.stat().st_size > MAX_CEILINGS_FILE_BYTES
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        read = read_ceilings(path)
    assert len(said) == 1 and "grown by an older benchlib" in str(said[0].message)
    assert read.peak_flops_per_s == top.peak_flops_per_s and read.kind_flops_per_s == top.kind_flops_per_s
    assert read.bandwidth_bytes_per_s == top.bandwidth_bytes_per_s and read.conv_shape == [16, 256, 14]
    assert read.cut_on_read and len(read.attempt_history()) == 1
    with pytest.warns(UserWarning, match="grown by an older benchlib"):
        cache._cached(path, torch.device("cpu"))
    assert path.stat().st_size < 100_000, "cut back as soon as it is read for use"
    again = read_ceilings(path)
    assert again.peak_flops_per_s == top.peak_flops_per_s and not again.cut_on_read


def test_an_older_files_lists_are_summarised_each_distinct_attempt_once(tmp_path):
    path = tmp_path / "m__cpu.json"
    top = _grown_file(path, copies=20)
    with pytest.warns(UserWarning, match="held 60 attempts: 1 kept whole, 2 others summarised"):
        read = read_ceilings(path)
    assert read.attempts == 3 and read.earlier.peak_flops_per_s["fp32"] <= top.peak_flops_per_s["fp32"]
    assert read.peak_flops_per_s == top.peak_flops_per_s


def test_a_garbled_grown_file_is_refused_as_unreadable(tmp_path):
    path = tmp_path / "m__cpu.json"
    _grown_file(path, copies=40_000)
    with path.open("r+b") as f:  # the last list never closed
        f.seek(-40, 2)
        f.write(b" " * 40)
    with pytest.raises(ValueError):
        read_ceilings(path)
