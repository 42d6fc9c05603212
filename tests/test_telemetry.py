"""The telemetry sampler: sample counts, columns and units, phases, summaries and missing sources."""
from __future__ import annotations

import io
import os
import time
from collections import namedtuple

import fakes
import pandas as pd
import psutil
import pytest
import torch
from fakes import FakeNvml

from benchlib.instruments import cpu as tm_cpu
from benchlib.instruments import nvml as tm_nvml
from benchlib.instruments import telemetry as tm
from benchlib.instruments.telemetry import Telemetry, TelemetrySampler
from benchlib.run.columns import telemetry_columns
from benchlib.store import schema
from benchlib.store.atomic import atomic_write_text

CORES = psutil.cpu_count() or 1
GPU_COLUMN_SUFFIXES = ("util_pct", "mem_util_pct", "mem_used_bytes", "power_w", "temp_c", "sm_clock_mhz", "energy_j")


def busy(seconds: float) -> None:
    """Keep one core busy in Python for ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(500))


def sample(seconds: float, interval_s: float = 0.1, **kwargs) -> Telemetry:
    with TelemetrySampler(interval_s, **kwargs) as s:
        s.set_phase("busy")
        busy(seconds)
    assert s.result is not None
    return s.result


no_nvml = fakes.no_nvml  # the one fake of a machine without NVML, as this module's fixture


# ---------------------------------------------------------------- sampling

@pytest.mark.parametrize("interval_s", [0.1, 0.05])
def test_sample_count_matches_interval(interval_s, no_nvml):
    tel = sample(1.0, interval_s)
    # one at start, one per tick, one at stop; a sampler whose samples cost over 0.5% of a core widens its
    # interval after its first five ticks, and says so
    assert tel.interval_s == interval_s or "to keep sampling under 0.5% of a core" in tel.notes["interval"]
    fewest, most = 1.0 / tel.interval_s + 2, 1.0 / interval_s + 2
    assert 0.8 * fewest <= len(tel.frame) <= 1.2 * most
    gaps = tel.frame["t_s"].diff().dropna()
    assert (gaps > 0).all()


def test_columns_and_units(no_nvml):
    tel = sample(0.6)
    f = tel.frame
    for col in ("t_s", "phase", "cpu_util_pct", "proc_cpu_util_pct", "rss_bytes", "threads", "processes", "cpu_temp_c"):
        assert col in f
    cores = [c for c in f if c.startswith("cpu") and c.endswith("_util_pct") and c[3:-9].isdigit()]
    assert len(cores) == CORES
    util = f[["cpu_util_pct", *cores]].stack().dropna().astype(float)
    assert not util.empty
    assert ((util >= 0) & (util <= 100)).all()
    proc = f["proc_cpu_util_pct"].dropna().astype(float)
    assert not proc.empty and ((proc >= 0) & (proc <= 100 * CORES * 1.1)).all()  # psutil: % of one core
    assert (f["rss_bytes"] > 10 * 2**20).all()
    assert (f["threads"] >= 1).all() and (f["processes"] >= 1).all()
    assert f["t_s"].is_monotonic_increasing and f["t_s"].iloc[0] >= 0
    assert not any(c.startswith("gpu") for c in f)


def test_first_sample_has_no_utilization_rather_than_zero(no_nvml):
    f = sample(0.3).frame
    assert pd.isna(f["cpu_util_pct"].iloc[0]) and pd.isna(f["proc_cpu_util_pct"].iloc[0])
    assert f["rss_bytes"].iloc[0] > 0


def test_phases_label_samples_in_order(no_nvml):
    with TelemetrySampler(0.05) as s:
        s.set_phase("train")
        busy(0.3)
        s.set_phase("eval")
        busy(0.3)
    f = s.result.frame
    phases = f["phase"].tolist()
    assert {"train", "eval"} <= set(phases)
    assert max(i for i, p in enumerate(phases) if p == "train") < min(i for i, p in enumerate(phases) if p == "eval")
    train, eval_ = s.result.summary("train"), s.result.summary("eval")
    assert train.samples == phases.count("train") >= 3
    assert eval_.samples == phases.count("eval") >= 3


def test_summary_keys_values_and_none_for_missing(no_nvml):
    tel = sample(0.6)
    s = telemetry_columns(tel.summary())
    assert set(s) == set(schema.names(schema.TELEMETRY)), "the summary fills every telemetry column"
    assert 0 < s["cpu_util_pct_mean"] <= 100 and 0 < s["cpu_util_pct_p95"] <= 100
    assert s["rss_bytes_max"] > 10 * 2**20 and isinstance(s["rss_bytes_max"], int)
    assert s["telemetry_samples"] == len(tel.frame) and s["telemetry_interval_s"] == tel.interval_s
    # a busy host may make a sample cost more than 0.5% of a core: the interval then widens, and says so
    assert tel.interval_s == 0.1 or "to keep sampling under 0.5% of a core" in tel.notes["interval"]
    for col in ("gpu_util_pct_mean", "gpu_util_pct_p95", "gpu_mem_util_pct_mean", "gpu_mem_used_bytes_max",
                "gpu_power_w_mean", "gpu_temp_c_max", "gpu_sm_clock_mhz_mean"):
        assert s[col] is None
    assert "gpu" in s["telemetry_missing"]
    if tel.frame["cpu_temp_c"].isna().all():
        assert s["cpu_temp_c_max"] is None and "cpu_temp" in tel.missing


def test_summary_of_an_unknown_phase_is_none_not_zero(no_nvml):
    s = telemetry_columns(sample(0.2).summary("no-such-phase"))
    assert s["telemetry_samples"] == 0
    assert s["cpu_util_pct_mean"] is None and s["rss_bytes_max"] is None


def test_missing_nvml_gives_a_reason_and_no_gpu_columns(no_nvml):
    tel = sample(0.2)
    assert "NVMLError_LibraryNotFound" in tel.missing["gpu"]
    assert not [c for c in tel.frame if c.startswith("gpu")]


def test_gpus_off_gives_a_reason():
    tel = sample(0.2, gpus=False)
    assert "gpu" in tel.missing and not [c for c in tel.frame if c.startswith("gpu")]


def test_fake_nvml_two_gpus_one_without_power(monkeypatch):
    fake = FakeNvml.two_boards().install(monkeypatch)
    tel = sample(0.5)
    f = tel.frame
    for i in (0, 1):
        for suffix in GPU_COLUMN_SUFFIXES:
            assert f"gpu{i}_{suffix}" in f
    assert (f["gpu0_util_pct"] == 40).all() and (f["gpu1_util_pct"] == 60).all()
    assert (f["gpu1_mem_used_bytes"] == 2 * 2**30).all()
    assert (f["gpu0_power_w"] == 150.0).all()
    assert f["gpu1_power_w"].isna().all()
    assert "NotSupported" in tel.missing["gpu1_power_w"]
    assert "gpu0_power_w" not in tel.missing
    assert fake.calls["power1"] == 1  # a NotSupported metric is not asked again every tick
    assert fake.calls["util0"] == len(f)  # one utilization query per GPU and sample gives both rates
    assert f["gpu0_energy_j"].is_monotonic_increasing and f["gpu0_energy_j"].iloc[0] > 1000
    assert fake.calls["init"] == 1 and fake.calls["shutdown"] == 1
    s = telemetry_columns(tel.summary())
    assert s["gpu_util_pct_mean"] == pytest.approx(50.0)
    assert s["gpu_mem_util_pct_mean"] == pytest.approx(10.5)
    assert s["gpu_mem_used_bytes_max"] == 2 * 2**30
    assert s["gpu_temp_c_max"] == 61 and s["gpu_sm_clock_mhz_mean"] == 1400
    assert s["gpu_power_w_mean"] is None  # GPU 1's power is unknown: a total without it would under-count
    assert "gpu1_power_w" in s["telemetry_missing"]


def test_fake_nvml_power_is_summed_over_gpus(monkeypatch):
    fake = FakeNvml.two_boards()
    fake.power_mw = lambda i: 100_000 + 50_000 * i  # both boards report: 100 W and 150 W
    fake.install(monkeypatch)
    assert sample(0.3).summary().gpu_power_w_mean == pytest.approx(250.0)


def test_power_is_the_instant_reading_where_the_driver_has_it(monkeypatch):
    """NVML's power usage is a one-second average on Ampere and newer: the instant field is read where the
    driver has it (board 0 here), the average where it has not (board 1, a driver before 530)."""
    fake = FakeNvml.two_boards()
    fake.power_mw = lambda i: 100_000  # the one-second average
    fake.power_instant_mw = lambda i: 310_000 if i == 0 else None
    fake.install(monkeypatch)
    f = sample(0.3).frame
    assert (f["gpu0_power_w"] == 310.0).all() and (f["gpu1_power_w"] == 100.0).all()
    assert "power0" not in fake.calls, "no average read where the instant one answers"


def test_cuda_visible_devices_selects_nvml_indices(monkeypatch):
    FakeNvml.two_boards().install(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    cols = [c for c in sample(0.2).frame if c.startswith("gpu")]
    assert cols and all(c.startswith("gpu1_") for c in cols)


def test_explicit_gpu_indices_and_bad_index(monkeypatch):
    FakeNvml.two_boards().install(monkeypatch)
    tel = sample(0.2, gpu_indices=[0, 5])
    cols = [c for c in tel.frame if c.startswith("gpu")]
    assert cols and {c.split("_")[0] for c in cols} == {"gpu0"}, "GPU 0 sampled, the bad index left out"
    assert "5" in tel.missing["gpu_indices"]


@pytest.mark.parametrize("env, count, expected", [
    (None, 4, None), ("", 4, []), ("2,0", 4, [2, 0]), ("1,-1,2", 4, [1]), ("0,7,1", 4, [0]),
    ("GPU-1234abcd", 4, None), ("MIG-GPU-1/0/0", 4, None), ("-1", 2, []),
])
def test_visible_nvml_indices(env, count, expected):
    assert tm_nvml.visible_nvml_indices(env, count) == expected


def test_sampling_error_is_recorded_not_raised(no_nvml, monkeypatch):
    with TelemetrySampler(0.05) as s:
        monkeypatch.setattr(tm_cpu, "cpu_util_pct", lambda a, b: 1 / 0)
        busy(0.2)
    assert "ZeroDivisionError" in s.result.missing["cpu"]
    assert len(s.result.frame) >= 3


def test_psutil_fallback_gives_the_same_columns(no_nvml, monkeypatch):
    procfs = sample(0.3).frame

    def no_procfs():
        raise OSError("no /proc")

    monkeypatch.setattr(tm_cpu, "ProcfsCpu", no_procfs)
    fallback = sample(0.3).frame
    assert list(fallback.columns) == list(procfs.columns)
    assert fallback["cpu_util_pct"].dropna().between(0, 100).all() and fallback["proc_cpu_util_pct"].notna().any()


def test_procfs_figures_agree_with_psutil(no_nvml):
    f = sample(0.3).frame
    proc = psutil.Process()
    assert f["rss_bytes"].iloc[-1] == pytest.approx(proc.memory_info().rss, rel=0.2)
    assert f["threads"].iloc[-1] <= proc.num_threads() + 2


def test_slow_sources_are_read_about_once_a_second(no_nvml):
    tel = sample(0.3, 0.05)
    assert "every 20 ticks" in tel.notes["processes"]


# ---------------------------------------------------------------- pure helpers

PROC_STAT = """cpu  684327 0 59766 199997 2984 0 518 1047 0 0
cpu0 314741 0 24368 133647 798 0 49 507 0 0
cpu2 369586 0 35398 66350 2185 0 468 539 0 0
intr 123 4 5
ctxt 99
"""


def test_parse_proc_stat():
    cores = tm_cpu.parse_proc_stat(PROC_STAT)
    assert list(cores) == [0, 2]  # numbered as the kernel numbers them (offline CPUs are absent)
    assert cores[2].user == 369586 and cores[2].idle == 66350 and cores[2].steal == 539
    assert tm_cpu.parse_proc_stat(PROC_STAT[:120]) is None  # cut inside the cpu lines: read more
    assert tm_cpu.parse_proc_stat("cpu  1 2 3 4\ncpu0 1 2 3 4\nintr 0\n")[0].iowait == 0  # old kernels: fewer fields


def test_parse_proc_pid_stat():
    line = "17264 (my (odd) cmd) R 17259 17259 8006 0 -1 4194304 97 0 2 0 31 7 0 0 20 0 5 0 475063 3133440 388 1844\n"
    assert tm_cpu.parse_proc_pid_stat(line) == (38, 5, 388)


Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")


def test_cpu_util_pct_from_times():
    a = Times(10, 0, 5, 80, 5, 0, 0, 0, 0, 0)
    b = Times(16, 0, 7, 82, 5, 0, 0, 0, 2, 0)  # guest is inside user: not counted twice
    assert tm_cpu.cpu_util_pct(a, b) == pytest.approx(80.0)
    assert tm_cpu.cpu_util_pct(a, a) is None


def test_cpu_temp_prefers_cpu_sensors():
    T = namedtuple("T", "label current high critical")
    sensors = {"coretemp": [T("Package id 0", 71.0, 90, 100), T("Core 0", 65.0, 90, 100)],
               "nvme": [T("Composite", 80.0, 90, 100)], "acpitz": [T("", 30.0, None, None)]}
    assert tm_cpu.cpu_temp_c(sensors) == 71.0
    assert tm_cpu.cpu_temp_c({"k10temp": [T("Tctl", 55.5, None, None)]}) == 55.5
    assert tm_cpu.cpu_temp_c({"nvme": [T("Composite", 40.0, None, None)]}) is None
    assert tm_cpu.cpu_temp_c({}) is None


def test_csv_round_trip_and_atomic_write(no_nvml, tmp_path):
    tel = sample(0.2)
    back = pd.read_csv(io.StringIO(tel.to_csv_text()))
    assert list(back.columns) == list(tel.frame.columns) and len(back) == len(tel.frame)
    path = tmp_path / "t" / "telemetry.csv"
    atomic_write_text(path, tel.to_csv_text())  # how benchlib.run.record writes it
    assert path.read_text() == tel.to_csv_text()
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]


def test_sampler_cannot_stop_twice(no_nvml):
    s = TelemetrySampler(0.05).start()
    s.stop()
    with pytest.raises(RuntimeError):
        s.stop()
    with pytest.raises(ValueError):
        TelemetrySampler(0)


# ---------------------------------------------------------------- real GPU

@pytest.mark.gpu
def test_real_gpu_is_sampled_during_matmuls():
    x = torch.randn(4096, 4096, device="cuda")
    with TelemetrySampler(0.1) as s:
        s.set_phase("matmul")
        end = time.perf_counter() + 2.0
        while time.perf_counter() < end:
            for _ in range(10):
                y = x @ x
            torch.cuda.synchronize()
    tel = s.result
    assert "gpu" not in tel.missing, tel.missing
    gpus = tm.gpu_indices_in(tel.frame)
    assert gpus
    util = pd.concat([tel.frame[f"gpu{i}_util_pct"] for i in gpus]).astype(float)
    assert util.max() > 0
    used = pd.concat([tel.frame[f"gpu{i}_mem_used_bytes"] for i in gpus]).astype(float)
    assert used.max() > x.numel() * 4
    summary = tel.summary("matmul")
    assert summary.gpu_util_pct_mean > 0 and (summary.gpu_mem_used_bytes_max or 0) > 0
    for i in gpus:
        power = tel.frame[f"gpu{i}_power_w"]
        assert power.notna().all() and (power > 0).all() or f"gpu{i}_power_w" in tel.missing
        energy = tel.frame[f"gpu{i}_energy_j"]
        assert energy.notna().all() and energy.is_monotonic_increasing or f"gpu{i}_energy_j" in tel.missing
    del y


def _burn_cpu_s(seconds: float) -> None:
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        pass


def test_a_costly_sampler_widens_its_interval_and_says_so(monkeypatch):
    """Samples that take 2 ms of CPU at a 0.1 s interval are 2% of a core: after five ticks the interval is
    widened so sampling stays under 0.5% of a core (0.4 s here), said in the notes, and the CPU it took is
    charged to benchlib."""
    from benchlib.env import harness

    real = TelemetrySampler._cpu

    def costly(self, window_s):
        _burn_cpu_s(0.002)
        return real(self, window_s)

    monkeypatch.setattr(TelemetrySampler, "_cpu", costly)
    charged_before = harness.by_thread_s().get("telemetry", 0.0)
    sampler = TelemetrySampler(0.1, gpus=False).start()
    time.sleep(1.3)  # five ticks at 0.1 s measure the cost, then the widened pace
    tel = sampler.stop()
    assert tel.interval_s >= 0.4 and "to keep sampling under 0.5% of a core" in tel.notes["interval"]
    assert len(tel.frame) <= 1 + 5 + 3 + 1, "samples at the widened pace after the five that measured it"
    assert harness.by_thread_s()["telemetry"] - charged_before >= 0.002 * len(tel.frame)


def test_a_cheap_sampler_keeps_its_interval():
    tel = sample(0.3, interval_s=0.5, gpus=False)
    assert tel.interval_s == 0.5 and "interval" not in tel.notes


def _costly_cpu(monkeypatch, seconds: float) -> None:
    real = TelemetrySampler._cpu

    def costly(self, window_s):
        _burn_cpu_s(seconds)
        return real(self, window_s)

    monkeypatch.setattr(TelemetrySampler, "_cpu", costly)


def test_a_sampler_beside_busy_cores_widens_further_and_says_why(monkeypatch):
    """0.4 ms a sample is 0.4% of a core at 0.1 s: under the 0.5% bound, so a sampler beside a GPU's work keeps its
    interval. Beside a CPU step that keeps every core busy it costs the step about three times its CPU (measured
    in lockstep: 0.7% of an AVX2 step at 0.23 ms a sample), so the interval widens until that stays under 0.2% of
    the work's time: 0.4 ms x 3 / 0.002 = 0.6 s at least."""
    _costly_cpu(monkeypatch, 0.0004)
    beside_gpu = TelemetrySampler(0.1, gpus=False).start()
    time.sleep(0.8)
    calm = beside_gpu.stop()  # widened only where this machine's own sampling passes 0.1 ms
    assert "busy" not in calm.notes.get("interval", "")
    busy = TelemetrySampler(0.1, gpus=False, busy_cores=True).start()
    time.sleep(0.8)
    tel = busy.stop()
    least = 0.0004 * tm.BUSY_CORE_COST_FACTOR / tm.MAX_BUSY_WORK_SHARE
    assert tel.interval_s >= least * 0.99
    assert "cost to work that keeps the cores busy" in tel.notes["interval"]
    assert "under 0.2% of the work's time" in tel.notes["interval"]
    row = telemetry_columns(tel.summary())
    assert row["telemetry_interval_s"] == tel.interval_s and row["telemetry_interval_note"] == tel.notes["interval"]
    assert telemetry_columns(calm.summary())["telemetry_interval_note"] == calm.notes.get("interval")


def test_the_slow_sources_reads_count_in_a_samples_cost(monkeypatch):
    """Listing processes is read once every ten ticks, none of them among the five that measure a sample's CPU:
    its cost, shared over its ticks, is part of what a sample costs. A 60 ms listing (stride 100 at 0.1 s, as a
    call over 5 ms) adds 0.6 ms a tick, past 0.5% of a core at 0.1 s whatever the rest of a sample costs."""
    real = TelemetrySampler._processes

    def slow_listing(self):
        _burn_cpu_s(0.06)
        return real(self)

    monkeypatch.setattr(TelemetrySampler, "_processes", slow_listing)
    sampler = TelemetrySampler(0.1, gpus=False).start()
    time.sleep(0.8)
    tel = sampler.stop()
    assert tel.interval_s >= 0.12 and "to keep sampling under 0.5% of a core" in tel.notes["interval"]
    assert float(tel.notes["interval"].split("a sample took ")[1].split(" ms")[0]) >= 0.6


def test_the_summary_says_where_sampling_was_widened(monkeypatch, tmp_path):
    """The summary's hardware section names why a row's sampler sampled less often than asked, once."""
    from benchlib.report.display import summary

    shown: list[str] = []
    monkeypatch.setattr(summary, "display", lambda obj: shown.append(getattr(obj, "data", str(obj))))
    monkeypatch.setattr(summary, "telemetry_timelines", lambda *a, **k: True)
    note = "a sample took 0.43 ms of CPU: the interval is 0.65 s, not 0.1 s, to keep its cost ... under 0.2%"
    rows = pd.DataFrame([{"status": "ok", "machine": "m", "hardware": "cpu", "model": "resnet18", "batch_size": 64,
                          "variant": v, "cpu_util_pct_mean": 99.0, "telemetry_samples": 16,
                          "telemetry_interval_note": note} for v in ("a", "b")])
    summary.telemetry(rows, lambda _rows: [], str(tmp_path))
    said = [s for s in shown if isinstance(s, str) and s.startswith("Sampled less often than asked")]
    assert len(said) == 1, "said once, under the table"
    assert said[0].endswith(f"- resnet18, batch 64, a: {note}\n- resnet18, batch 64, b: {note}")
    shown.clear()
    summary.telemetry(rows.drop(columns="telemetry_interval_note"), lambda _rows: [], str(tmp_path))
    assert not any(isinstance(s, str) and s.startswith("Sampled less often") for s in shown)


def test_the_sampler_counts_as_costly_where_the_steps_threads_fill_the_cpus(monkeypatch):
    """A CPU step on as many threads as usable CPUs (over the machine's ranks) leaves the sampler no free core;
    one thread of two beside a free core does, and so does a GPU's work."""
    from benchlib.run import measure

    monkeypatch.setattr(measure, "usable_cpu_ids", lambda: [0, 1, 2, 3])
    for threads, peers, device, busy in [(4, 0, "cpu", True), (2, 1, "cpu", True), (2, 0, "cpu", False),
                                         (1, 0, "cpu", False), (4, 0, "cuda", False)]:
        monkeypatch.setattr(measure.torch, "get_num_threads", lambda t=threads: t)
        assert measure._cores_all_busy(torch.device(device), peers) is busy, (threads, peers, device)
