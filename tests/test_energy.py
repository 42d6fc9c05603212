"""Energy from counter differences: RAPL (fake powercap tree), NVML (fake library), power x time."""
from __future__ import annotations

import pathlib
from pathlib import Path
from types import SimpleNamespace

import fakes
import numpy as np
import pandas as pd
import pytest
from fakes import A100_SXM, FakeNvml, FakeProcessGroup, fake_cuda

from benchlib.instruments import energy as en
from benchlib.instruments.energy import EnergyMeter, EnergyReading, EnergyResult, energy_between, per_sample
from benchlib.instruments.telemetry import Telemetry

MAX_RANGE_UJ = 262_143_328_850


def make_zone(root: Path, zone: str, name: str, energy_uj: int, max_range_uj: int = MAX_RANGE_UJ) -> Path:
    d = root / zone
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_range_uj}\n")
    return d


def set_energy(zone: Path, energy_uj: int) -> None:
    (zone / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.fixture
def powercap(tmp_path, monkeypatch):
    """A fake /sys/class/powercap: one package plus zones that must not be counted."""
    root = tmp_path / "powercap"
    pkg = make_zone(root, "intel-rapl:0", "package-0", 5_000_000)
    make_zone(root / "intel-rapl:0", "intel-rapl:0:0", "core", 1_000)  # subzone: inside the package
    make_zone(root, "intel-rapl:1", "psys", 9_000_000)  # platform: not a package
    make_zone(root, "intel-rapl-mmio:0", "package-0", 7_000_000)  # MMIO mirror of the package
    monkeypatch.setattr(en, "POWERCAP_ROOT", root)
    return SimpleNamespace(root=root, pkg=pkg)


no_nvml = fakes.no_nvml  # the one fake of a machine without NVML, as this module's fixture


def reading(t_s: float, gpu=None, rapl=None, reasons=None) -> EnergyReading:
    return EnergyReading(t_s=t_s, gpu_energy_mj=gpu or {}, rapl_energy_uj=rapl, reasons=reasons or {})


def power_telemetry(t_s, power_w: dict[int, list[float | None]], interval_s: float = 0.1, t0: float = 0.0) -> Telemetry:
    frame = pd.DataFrame({"t_s": t_s, "phase": "train", **{f"gpu{i}_power_w": p for i, p in power_w.items()},
                          **{f"gpu{i}_util_pct": 50 for i in power_w}})
    return Telemetry(frame=frame, missing={}, interval_s=interval_s, start_monotonic_s=t0)


# ---------------------------------------------------------------- RAPL

def test_rapl_counts_package_zones_only(powercap, no_nvml):
    meter = EnergyMeter()
    start = meter.read()
    assert start.rapl_energy_uj == {"package-0": 5_000_000}
    set_energy(powercap.pkg, 17_500_000)
    end = meter.read()
    result = meter.between(start, end)
    assert result.cpu_package_j == pytest.approx(12.5)
    assert result.cpu_method == "rapl" and "cpu" not in result.unmeasurable


def test_rapl_wraparound_uses_max_energy_range(powercap, no_nvml):
    set_energy(powercap.pkg, MAX_RANGE_UJ - 2_000_000)
    meter = EnergyMeter()
    start = meter.read()
    set_energy(powercap.pkg, 3_000_000)
    result = meter.between(start, meter.read())
    assert result.cpu_package_j == pytest.approx(5.0)


def test_rapl_two_packages_are_summed(powercap, no_nvml):
    pkg1 = make_zone(powercap.root, "intel-rapl:2", "package-1", 100)
    meter = EnergyMeter()
    start = meter.read()
    assert set(start.rapl_energy_uj) == {"package-0", "package-1"}
    set_energy(powercap.pkg, 6_000_000)
    set_energy(pkg1, 2_000_100)
    assert meter.between(start, meter.read()).cpu_package_j == pytest.approx(3.0)


def test_rapl_permission_denied_is_none_with_reason(powercap, no_nvml, monkeypatch):
    real = pathlib.Path.read_text

    def deny(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(pathlib.Path, "read_text", deny)
    meter = EnergyMeter()
    start = meter.read()
    assert start.rapl_energy_uj is None and "permission denied" in start.reasons["cpu"]
    result = meter.between(start, meter.read())
    assert result.cpu_package_j is None and result.cpu_method is None
    assert "permission denied" in result.unmeasurable["cpu"]


def test_rapl_absent_is_none_with_reason(tmp_path, monkeypatch, no_nvml):
    monkeypatch.setattr(en, "POWERCAP_ROOT", tmp_path / "nothing")
    meter = EnergyMeter()
    result = meter.between(meter.read(), meter.read())
    assert result.cpu_package_j is None and "not exposed" in result.unmeasurable["cpu"]
    assert result.gpu_j is None and "NVMLError_LibraryNotFound" in result.unmeasurable["gpu"]


def test_rapl_counter_that_did_not_move_is_unmeasurable_not_zero():
    short = energy_between(reading(0.0, rapl={"package-0": 5}), reading(0.0005, rapl={"package-0": 5}))
    assert short.cpu_package_j is None and "update period" in short.unmeasurable["cpu"]
    long = energy_between(reading(0.0, rapl={"package-0": 5}), reading(1.0, rapl={"package-0": 5}))
    assert long.cpu_package_j is None and "did not advance" in long.unmeasurable["cpu"]


@pytest.mark.parametrize("start, end, max_range, expected", [
    (10, 25, 100, 15), (90, 5, 100, 15), (0, 0, 100, 0), (90, 5, None, None),
])
def test_counter_delta(start, end, max_range, expected):
    assert en.counter_delta(start, end, max_range) == expected


# ---------------------------------------------------------------- NVML counter

def energy_nvml(count: int, **kwargs) -> FakeNvml:
    """GPUs with total-energy counters of 10 MJ per GPU so far, all visible (no CUDA_VISIBLE_DEVICES)."""
    return FakeNvml(count, energy_mj=lambda i: 10_000_000 * (i + 1), visible=None, **kwargs)


def test_nvml_counter_difference_summed_over_gpus(monkeypatch, powercap):
    fake = energy_nvml(2).install(monkeypatch)
    with EnergyMeter() as meter:
        start = meter.read()
        assert start.gpu_energy_mj == {0: 10_000_000, 1: 20_000_000}
        fake.energy_mj[0] += 30_000  # 30 J
        fake.energy_mj[1] += 45_500  # 45.5 J
        end = meter.read()
        result = meter.between(start, EnergyReading(start.t_s + 1.0, end.gpu_energy_mj, end.rapl_energy_uj))
    assert result.gpu_j == pytest.approx(75.5) and result.gpu_method == "nvml-counter"
    assert fake.calls["shutdown"] == 1


def test_meter_respects_gpu_indices(monkeypatch, powercap):
    energy_nvml(3).install(monkeypatch)
    with EnergyMeter(gpu_indices=[2]) as meter:
        assert set(meter.read().gpu_energy_mj) == {2}


def test_a_gpu_without_an_energy_counter_reads_none_with_nvmls_reason(monkeypatch, powercap):
    """Boards before Volta answer NotSupported: that GPU's reading is None and says why; the other's stands."""
    FakeNvml(2, energy_mj=lambda i: None if i == 1 else 5_000, visible=None).install(monkeypatch)
    with EnergyMeter() as meter:
        start = meter.read()
    assert start.gpu_energy_mj == {0: 5_000, 1: None}
    assert "NVMLError_NotSupported" in start.reasons["gpu1"] and "gpu0" not in start.reasons


def test_short_window_without_counter_change_is_unmeasurable_not_zero():
    result = energy_between(reading(10.0, gpu={0: 5_000}), reading(10.05, gpu={0: 5_000}))
    assert result.gpu_j is None and result.gpu_method is None
    assert "shorter than the counter's update period" in result.unmeasurable["gpu0"]
    assert "not 0 J" in result.unmeasurable["gpu0"]


def test_stale_counter_over_a_long_window_is_unmeasurable():
    result = energy_between(reading(0.0, gpu={0: 5_000}), reading(2.0, gpu={0: 5_000}))
    assert result.gpu_j is None and "did not advance" in result.unmeasurable["gpu0"]


def test_counter_going_backwards_is_unmeasurable():
    result = energy_between(reading(0.0, gpu={0: 9_000}), reading(2.0, gpu={0: 5_000}))
    assert result.gpu_j is None and "backwards" in result.unmeasurable["gpu0"]


def test_one_unmeasurable_gpu_leaves_the_total_unknown():
    result = energy_between(reading(0.0, gpu={0: 0, 1: 0}), reading(1.0, gpu={0: 50_000, 1: None},
                                                                    reasons={"gpu1": "NotSupported"}))
    assert result.gpu_j is None and "gpu1" in result.unmeasurable and "gpu0" not in result.unmeasurable


# ---------------------------------------------------------------- power x time

def test_power_x_time_constant_power():
    t = np.round(np.arange(0, 2.0001, 0.1), 6)
    tel = power_telemetry(t, {0: [100.0] * len(t)}, t0=50.0)
    start = reading(50.0, gpu={0: None}, reasons={"gpu0": "NVML energy counter: NVMLError_NotSupported"})
    end = reading(52.0, gpu={0: None}, reasons=start.reasons)
    result = energy_between(start, end, telemetry=tel)
    assert result.gpu_j == pytest.approx(200.0) and result.gpu_method == "power-x-time"
    assert result.seconds == pytest.approx(2.0)


def test_power_x_time_trapezoid_with_interpolated_edges():
    t = np.round(np.arange(0, 2.0001, 0.1), 6)
    tel = power_telemetry(t, {0: list(50.0 * t)})  # P = 50 t W: E(a, b) = 25 (b^2 - a^2)
    result = energy_between(reading(0.55, gpu={0: None}), reading(1.55, gpu={0: None}), telemetry=tel)
    assert result.gpu_j == pytest.approx(25 * (1.55**2 - 0.55**2))


def test_power_x_time_mixed_with_counter_sums_and_names_both():
    t = np.round(np.arange(0, 2.0001, 0.1), 6)
    tel = power_telemetry(t, {1: [100.0] * len(t)})
    result = energy_between(reading(0.0, gpu={0: 0, 1: None}), reading(2.0, gpu={0: 40_000, 1: None}), telemetry=tel)
    assert result.gpu_j == pytest.approx(240.0) and result.gpu_method == "nvml-counter+power-x-time"


def test_power_x_time_needs_samples_covering_the_window():
    t = np.round(np.arange(0, 1.0001, 0.1), 6)
    tel = power_telemetry(t, {0: [100.0] * len(t)})
    result = energy_between(reading(0.0, gpu={0: None}), reading(3.0, gpu={0: None}), telemetry=tel)
    assert result.gpu_j is None and "not the window" in result.unmeasurable["gpu0"]
    short = energy_between(reading(0.0, gpu={0: None}), reading(0.05, gpu={0: None}), telemetry=tel)
    assert short.gpu_j is None and "sampling interval" in short.unmeasurable["gpu0"]


def test_no_counter_and_no_telemetry_is_unmeasurable():
    result = energy_between(reading(0.0, gpu={0: None}, reasons={"gpu0": "NotSupported"}),
                            reading(2.0, gpu={0: None}))
    assert result.gpu_j is None and "no telemetry" in result.unmeasurable["gpu0"]


def test_power_x_time_unsupported_power_gives_its_reason():
    t = np.round(np.arange(0, 2.0001, 0.1), 6)
    tel = power_telemetry(t, {0: [None] * len(t)})
    result = energy_between(reading(0.0, gpu={0: None}), reading(2.0, gpu={0: None}), telemetry=tel)
    assert result.gpu_j is None and "power x time" in result.unmeasurable["gpu0"]


# ---------------------------------------------------------------- per sample

def test_per_sample():
    assert per_sample(200.0, 400) == pytest.approx(0.5)
    assert per_sample(None, 400) is None
    assert per_sample(10.0, 0) is None
    assert isinstance(energy_between(reading(0.0), reading(1.0)), EnergyResult)


# ---------------------------------------------------------------- what the training window holds (issue 24, 1)

class _Meter:
    """A meter whose every read is a reading at the next second, and whose windows hold 100 J of GPU energy."""

    def __init__(self):
        self.reads = 0

    def read(self):
        self.reads += 1
        return EnergyReading(t_s=float(self.reads), gpu_energy_mj={}, rapl_energy_uj={}, reasons={})

    def between(self, start, end, *, telemetry=None):
        return EnergyResult(seconds=end.t_s - start.t_s, gpu_j=100.0, gpu_method="nvml-counter", cpu_package_j=None,
                            cpu_method=None, unmeasurable={})


def test_training_energy_is_per_timed_sample_of_this_nodes_ranks(monkeypatch):
    from benchlib.engine.train import TrainResult
    from benchlib.env import distributed
    from benchlib.run.columns import energy_columns
    from benchlib.run.measure import _training

    meter, trained = _Meter(), TrainResult(timed_samples=640, total_samples=960)
    start, end = meter.read(), meter.read()

    def columns(first, dist_info):
        t = _training(trained, meter, first, end, None, dist_info, None)
        return energy_columns("train", t.energy, t.energy_samples, "cuda")

    one = columns(start, None)
    assert one["train_energy_j_per_sample"] == pytest.approx(100.0 / 640), "timed samples, not warmup ones"
    monkeypatch.setattr(distributed, "local_world_size", lambda: 4)  # 2 nodes x 4 ranks: this node's 4 GPUs
    rank = SimpleNamespace(rank=0, local_rank=0, world_size=8, backend="nccl")
    ddp = columns(start, rank)
    assert ddp["train_energy_j_per_sample"] == pytest.approx(100.0 / (640 * 4)), "not 8 ranks' samples"
    none = columns(None, None)
    assert none["train_energy_j_per_sample"] is None and none["train_energy_window_s"] == 0


def test_the_training_energy_window_opens_at_the_first_timed_step():
    import torch

    from benchlib.engine.step import Trainer
    from benchlib.engine.train import train
    from benchlib.spec.settings import RunSettings

    drawn = []

    class Loader:
        dataset, batch_size = range(32), 4

        def __iter__(self):
            for _ in range(8):
                drawn.append(1)
                yield torch.randn(4, 3, 8, 8), torch.randint(0, 2, (4,))

        def __len__(self):
            return 8

    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 2))
    s = RunSettings.of(epochs=1, warmup_steps=3, dataset="synthetic")
    at = []
    result = train(Trainer.of(net, net, s, torch.device("cpu")), Loader(), s, 8,
                   at_timed_start=lambda: at.append(len(drawn)))
    assert at == [4], "called once, after the 3 warmup batches and the first timed one were drawn, before its step"
    assert len(result.warmup_step_s) == 3 and result.timed_samples == 5 * 4


class _Stop(Exception):
    """Ends a run once its inference meter is known (what follows needs a GPU's kernels)."""


def test_under_ddp_inference_energy_counts_rank_0s_gpu_only_and_training_every_local_ranks(monkeypatch):
    """Item 1 of issue 24: after data-parallel training rank 0 alone runs inference while the other local ranks
    wait; a meter over every local rank's GPU would charge their idle draw to inference. The GPUs are found by
    UUID, in an NVML order that differs from CUDA's."""
    import torch
    from torch import nn

    from benchlib.engine.train import TrainResult
    from benchlib.env.distributed import DistInfo
    from benchlib.run import measure as measure_module
    from benchlib.spec.settings import RunConfig, RunSettings

    fake_cuda(monkeypatch, A100_SXM, A100_SXM)  # cuda:N has UUID GPU-fake-N
    FakeProcessGroup(rank=0, world_size=2, initialized=True).install(monkeypatch)  # both ranks on this node
    FakeNvml(2, uuids={0: "GPU-fake-1", 1: "GPU-fake-0"}, visible=None).install(monkeypatch)
    made: list[EnergyMeter] = []

    class Meter(EnergyMeter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    def inference(net, loaders, cfg, device, meter, tick=None):
        made.append(meter)  # the meter the inference window is read with
        raise _Stop

    def train(trainer, loader, s, per_epoch, *, at_timed_start, **kwargs):
        at_timed_start()
        return TrainResult(step_s=[0.1], timed_samples=4, total_samples=4)

    class NoMemory:
        def start(self):
            return self

    net = nn.Linear(2, 2)
    built = SimpleNamespace(model=net, loaders=SimpleNamespace(train=[], test=[], test_samples=4, synthetic=True,
                                                             num_classes=2, train_samples=4),
                            per_epoch=1)
    for name, stub in {"EnergyMeter": Meter, "_inference": inference, "train": train, "build": lambda *a: built,
                       "wrap": lambda model, *a: (model, model), "Trainer": SimpleNamespace(of=lambda *a: None),
                       "evaluate": lambda *a, **k: SimpleNamespace(), "complexity_for_run": lambda *a, **k: None,
                       "PeakMemory": lambda device: NoMemory()}.items():
        monkeypatch.setattr(measure_module, name, stub)
    cfg = RunConfig("s", "cuda", "resnet18", 8, RunSettings.of(dataset="synthetic", telemetry=False))
    with pytest.raises(_Stop):
        measure_module._measure(cfg, torch.device("cuda", 0), DistInfo(0, 0, 2, "nccl"), machine="m", progress=None,
                                ceilings=None, weights=None)
    training, inferring, used = made
    assert used is inferring, "inference is read with a meter of its own"
    assert set(training.read().gpu_energy_mj) == {0, 1}, "training: both local ranks' GPUs, each busy with its share"
    assert set(inferring.read().gpu_energy_mj) == {1}, "inference: rank 0's GPU (cuda:0, NVML's GPU 1) alone"
