"""The accelerator paths, shown on the CPU where a test can show them (and on a GPU where only a GPU can).

Each test names the defect it guards against: events on the wrong device, reserved peaks carried over,
compile inside timed figures, telemetry of the wrong GPUs, DDP rows against one GPU's roof, fp32 bytes for
AMP, a synchronize per step, unfair presets, inference throughput as 1/latency, stale ceilings, silent
eager fallback, energy windows too short to trust.
"""
from __future__ import annotations

import itertools
import json
import logging
import math

import pytest
import torch
from fakes import FakeAccelerator, FakeNvml
from torch import nn

import benchlib.engine.setup as setup
import benchlib.instruments.timing as timing
from benchlib.cli import main
from benchlib.data.loaders import build_loaders
from benchlib.engine import inference
from benchlib.engine.knobs import compile_report, reset_compiler
from benchlib.engine.train import check_losses, check_step, evaluate
from benchlib.errors import ConfigError, NonFiniteLossError
from benchlib.instruments import energy as en
from benchlib.instruments.energy import EnergyMeter, gpu_counter_j
from benchlib.instruments.nvml import pynvml
from benchlib.instruments.telemetry import TelemetrySampler
from benchlib.nets.flops import complexity_for_run
from benchlib.roofline import cache
from benchlib.roofline.measured import Ceilings
from benchlib.run.columns import roof_columns, training_columns, work_columns
from benchlib.run.record import record
from benchlib.spec.settings import RunConfig, RunSettings
from benchlib.spec.study import parse_study
from benchlib.spec.variants import PRESETS
from benchlib.store.rows import read_samples

TINY = dict(dataset="digits", image_size=32, train_subset=64, test_subset=40, train_steps=2, warmup_steps=1,
            infer_warmup_batches=1, latency_repeats=3, epochs=1)


# ---------------------------------------------------------------- 1. events on the run's device

def _one_step(version: tuple[int, int], device: torch.device, monkeypatch) -> tuple[list[float], list]:
    fake = FakeAccelerator(version).install(monkeypatch)
    timer = timing.StepTimer(device)
    for _ in range(2):
        timer.start()
        timer.stop()
    return timer.collect(), fake.calls


def test_step_events_are_torch_events_recorded_on_the_stream_of_the_runs_own_device(monkeypatch):
    """torch.Event takes the device's type only (its index comes from the stream it records on), so the
    stream named is cuda:1's own, never the process's current device's (cuda:0)."""
    cuda1 = torch.device("cuda", 1)
    times, calls = _one_step((2, 6), cuda1, monkeypatch)
    step = [("Event", cuda1), ("record", "accelerator stream of cuda:1")] * 2
    assert times == [0.002, 0.002]
    assert calls == step * 2 + [("accelerator.synchronize", cuda1)], "one synchronize, after the region"


def test_before_torch_accelerator_the_step_events_are_cudas_on_the_runs_own_stream(monkeypatch):
    """torch 2.5 has torch.Event (without MPS) but no torch.accelerator: CUDA's own events, and its stream."""
    cuda1 = torch.device("cuda", 1)
    times, calls = _one_step((2, 5), cuda1, monkeypatch)
    step = [("cuda.Event", None), ("record", "cuda stream of cuda:1")] * 2
    assert times == [0.002, 0.002]
    assert calls == step * 2 + [("cuda.synchronize", cuda1)]


_MPS = torch.device("mps")


@pytest.mark.parametrize("version, event, stream, synchronized", [
    ((2, 6), ("Event", _MPS), "accelerator stream of mps", ("accelerator.synchronize", _MPS)),
    ((2, 5), ("mps.Event", None), None, ("mps.synchronize", None)),
])
def test_mps_steps_are_timed_by_events_through_the_same_path(monkeypatch, version, event, stream, synchronized):
    times, calls = _one_step(version, torch.device("mps"), monkeypatch)
    assert times == [0.002, 0.002]
    assert calls == [event, ("record", stream)] * 4 + [synchronized], "events, not a synchronize per step"


# ---------------------------------------------------------------- 2. a clean slate per configuration

def test_each_configuration_starts_from_an_empty_cache_and_no_compiled_graphs(monkeypatch):
    calls = []
    monkeypatch.setattr(setup.gc, "collect", lambda: calls.append("gc"))
    monkeypatch.setattr(setup, "synchronize", lambda device: calls.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(setup, "reset_compiler", lambda: calls.append("reset_compiler"))
    setup.fresh_state(torch.device("cuda", 0))
    # the compiler first: its graphs hold device memory that is garbage only once they are dropped, so
    # emptying the cache before them left it reserved and inflated the next compiled configuration's peak
    assert calls == ["reset_compiler", "gc", "synchronize", "empty_cache"]
    calls.clear()
    setup.fresh_state(torch.device("cpu"))
    assert calls == ["reset_compiler", "gc"]


# ---------------------------------------------------------------- 3. compile and autotuning out of timed figures

class _ShapeSpy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 4 * 4, 5)
        self.seen: list[int] = []

    def forward(self, x):
        self.seen.append(int(x.shape[0]))
        return self.fc(x.flatten(1))


def test_evaluation_warms_every_input_shape_before_its_timed_pass():
    data = torch.utils.data.TensorDataset(torch.randn(10, 3, 4, 4), torch.randint(0, 5, (10,)))
    model = _ShapeSpy()
    result = evaluate(model, torch.utils.data.DataLoader(data, batch_size=4), torch.device("cpu"))
    assert model.seen == [4, 2, 4, 4, 2], "both shapes (full and last partial batch) once, untimed, first"
    assert result.samples == 10


@pytest.mark.parametrize("mode,warm", [("default", 1), ("reduce-overhead", 2), ("max-autotune", 2)])
def test_evaluation_warms_each_shape_as_often_as_its_compile_mode_needs(mode, warm):
    """A CUDA-graph mode records its graph on the second call of a shape: one warm pass would leave the
    recording inside the timed validation pass. The passes are counted on an eager stand-in."""
    from benchlib.spec.knobs import Knobs

    data = torch.utils.data.TensorDataset(torch.randn(10, 3, 4, 4), torch.randint(0, 5, (10,)))
    model = _ShapeSpy()
    evaluate(model, torch.utils.data.DataLoader(data, batch_size=4), torch.device("cpu"), Knobs(compile=mode))
    assert model.seen == [4] * warm + [2] * warm + [4, 4, 2]


@pytest.mark.slow
def test_a_compiled_variants_first_epoch_is_left_out_of_epoch_time(tmp_path):
    from benchlib.engine.knobs import unsupported_reason

    if unsupported_reason(PRESETS["cpu-compiled"].knobs, "cpu", training=True):
        pytest.skip("no C++ compiler for inductor")
    from torch import nn

    from benchlib.nets.user_models import register_model

    # a small network: what is tested is where the compile lands, not inductor's time on a big graph
    name = register_model("compile_probe", lambda: nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 10)))
    s = RunSettings.of(**{**TINY, "train_steps": None, "epochs": 2, "train_subset": 32, "compile": "default"})
    row = record(RunConfig("c", "cpu", name, 16, s), tmp_path, progress=None)
    assert row["status"] == "ok" and row["epochs_timed"] == 1, "epoch 0 compiles: compile_s holds it"
    assert row["compile_s"] > 0 and row["compile_fell_back"] is False and row["compile_graphs"] >= 1


def test_compile_without_warmup_is_refused():
    with pytest.raises(ConfigError, match="warmup_steps' is 0 with compile"):
        parse_study({"study": "s", "hardware": ["cpu"], "models": ["resnet18"], "batch_sizes": [8],
                     "warmup_steps": 0, "variants": ["cpu-default", "cpu-compiled"]}, "p.yaml")


@pytest.mark.parametrize("mode,key,value,allowed", [
    ("default", "infer_warmup_batches", 0, 1),  # inference compiles on its first call too
    ("reduce-overhead", "warmup_steps", 1, 2),  # CUDA graphs: a call to compile, one to record, then replays
    ("max-autotune", "infer_warmup_batches", 1, 2),
])
def test_compile_needs_its_warm_calls_in_training_and_inference(mode, key, value, allowed):
    base = {"study": "s", "hardware": ["cpu"], "models": ["resnet18"], "batch_sizes": [8], "compile": mode,
            "warmup_steps": 3, "infer_warmup_batches": 3}
    with pytest.raises(ConfigError) as exc:
        parse_study({**base, key: value}, "p.yaml")
    assert f"key '{key}' is {value} with compile '{mode}'; allowed: {key} >= {allowed}" in str(exc.value)
    parse_study({**base, key: allowed}, "p.yaml")  # enough warm calls: accepted


# ---------------------------------------------------------------- 4. telemetry and energy of the run's own GPU

def test_a_cpu_row_on_a_gpu_machine_samples_no_gpu(monkeypatch, tmp_path):
    """The GPUs beside a CPU run are not its own: no GPU telemetry, no GPU energy (which would also have
    stretched its inference window to NVML's one second)."""
    FakeNvml().install(monkeypatch)
    from benchlib.run import measure as measure_module

    moving = itertools.count(0, 5000)  # counters that move (5 J a read): a meter claiming a GPU would write a figure
    monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", lambda h: next(moving))
    assert measure_module._gpu_uuids(torch.device("cpu"), None) == []
    with EnergyMeter(gpu_uuids=[]) as meter:
        assert not meter.counts_gpu
    row = record(RunConfig("c", "cpu", "squeezenet1_1", 8, RunSettings.of(**TINY)), tmp_path, progress=None)
    assert row["status"] == "ok" and row["train_gpu_energy_j"] is None and row["infer_gpu_energy_j"] is None
    assert "gpu" in str(row["train_energy_unmeasurable"]), row["train_energy_unmeasurable"]
    assert row["infer_repeats"] <= TINY["latency_repeats"] * 4, "no stretch to NVML's one-second window"
    gpu = {k: row.get(k) for k in ("gpu_util_pct_mean", "gpu_power_w_mean", "gpu_temp_c_max")}
    assert all(v is None or (isinstance(v, float) and math.isnan(v)) for v in gpu.values()), gpu


def test_a_mig_slice_is_found_by_its_own_uuid_and_its_boards_energy_is_not_claimed(monkeypatch):
    """torch names a MIG slice by the slice's UUID; NVML's top-level devices carry the board's. The slice is
    found among its GPU's MIG devices; the energy counter there is the whole board's, so it is not used."""
    FakeNvml().install(monkeypatch).with_mig(monkeypatch, gpu=1, slices=["MIG-1111", "MIG-2222"])
    from benchlib.instruments.nvml import NvmlDevices

    with NvmlDevices(uuids=["2222"]) as found:
        assert list(found.handles) == [1] and found.mig == {1} and found.handles[1].slot == 1
        assert not found.missing
    with EnergyMeter(gpu_uuids=["2222"]) as meter:
        assert not meter.counts_gpu and "a MIG slice" in meter.reasons["gpu1"]
    with NvmlDevices(uuids=["9999"]) as lost:
        assert not lost.handles and "no NVML device has UUID 9999" in lost.missing["gpu_uuid"]


def test_two_mig_slices_of_one_gpu_are_two_devices_not_one(monkeypatch):
    """Two ranks on two slices of one board: both slices are found, each under its own key (the second
    slice's key lies beyond any board index), and neither overwrites the other."""
    FakeNvml().install(monkeypatch).with_mig(monkeypatch, gpu=1, slices=["MIG-1111", "MIG-2222"])
    from benchlib.instruments.nvml import NvmlDevices, mig_slice_key

    with NvmlDevices(uuids=["1111", "2222"]) as found:
        assert not found.missing, found.missing
        assert sorted(found.handles) == [1, mig_slice_key(1, 1)] and found.mig == set(found.handles)
        assert {h.slot for h in found.handles.values()} == {0, 1}
    with TelemetrySampler(0.05, gpu_uuids=["1111", "2222"]) as sampler:
        pass
    prefixes = {c.split("_")[0] for c in sampler.result.frame.columns if c.startswith("gpu")}
    assert prefixes == {"gpu1", f"gpu{mig_slice_key(1, 1)}"}


def test_telemetry_and_energy_follow_the_runs_gpu_by_uuid_not_by_index(monkeypatch):
    FakeNvml().install(monkeypatch)
    with TelemetrySampler(0.05, gpu_uuids=["bbb"]) as sampler:  # torch's name of NVML's GPU 2
        pass
    gpu_columns = {c for c in sampler.result.frame.columns if c.startswith("gpu")}
    assert gpu_columns and all(c.startswith("gpu2_") for c in gpu_columns), "one GPU, not all three pooled"
    with EnergyMeter(gpu_uuids=["GPU-AAA"]) as meter:
        assert set(meter.read().gpu_energy_mj) == {1}
    with EnergyMeter(gpu_uuids=["ddd"]) as meter:
        assert not meter.counts_gpu and "ddd" in meter.reasons["gpu_uuid"]


# ---------------------------------------------------------------- 5. DDP rows against one device's roof

def _row(**kw):
    base = dict(train_flops_per_sample=1e9, train_samples_per_s=200.0, flops_per_sample=3e8,
                infer_samples_per_s=1000.0, precision="fp32", tf32=False, quantization="none",
                train_arithmetic_intensity=50.0, arithmetic_intensity=60.0)
    return {**base, **kw}


def test_a_data_parallel_row_is_placed_per_device():
    roof = Ceilings("cuda:0", "GPU", peak_flops_per_s={"fp32": 1e12}, bandwidth_bytes_per_s=1e11)
    one = roof_columns(_row(), roof, "cuda", world_size=1)
    four = roof_columns(_row(), roof, "cuda", world_size=4)
    assert four["achieved_train_flops_per_s"] == pytest.approx(one["achieved_train_flops_per_s"] / 4)
    assert four["roof_fraction"] == pytest.approx(one["roof_fraction"] / 4)


def test_bytes_are_counted_at_the_batch_one_device_processes_and_in_the_autocast_dtype():
    s = RunSettings.of(**TINY)
    whole = work_columns(complexity_for_run("resnet18", s.image_size, 64, 10))
    share = work_columns(complexity_for_run("resnet18", s.image_size, 16, 10))
    assert share["bytes_per_sample"] > whole["bytes_per_sample"], "weights amortize over the per-rank batch"
    bf16 = work_columns(complexity_for_run("resnet18", s.image_size, 64, 10, activation_dtype=torch.bfloat16))
    assert bf16["activation_dtype"] == "bfloat16"
    assert bf16["activation_bytes_per_sample"] == pytest.approx(whole["activation_bytes_per_sample"] / 2)
    assert bf16["arithmetic_intensity"] > whole["arithmetic_intensity"]


# ---------------------------------------------------------------- 6. no synchronize per step

class _Unreadable(torch.Tensor):
    """A loss that fails the test if anything reads its value on the host."""

    def __bool__(self):
        raise AssertionError("the loss was read on the host: a synchronize per step")

    def item(self):
        raise AssertionError("the loss was read on the host: a synchronize per step")


def test_the_per_step_guard_never_reads_the_loss():
    check_step(torch.tensor(float("nan")).as_subclass(_Unreadable), 3, None)


def test_a_non_finite_loss_is_caught_at_the_epochs_end_with_its_step():
    check_losses([0.5, 0.4], 0)
    with pytest.raises(NonFiniteLossError, match=r"\(nan\) at step 12"):
        check_losses([0.5, float("nan"), float("inf")], 11)


def test_pinned_memory_is_the_default_on_cuda_only():
    s = RunSettings.of(**TINY)
    assert build_loaders(s, 8, torch.device("cuda")).train.pin_memory is True
    assert build_loaders(s, 8, torch.device("cpu")).train.pin_memory is False
    assert build_loaders(s.updated(pin_memory=False), 8, torch.device("cuda")).train.pin_memory is False


# ---------------------------------------------------------------- 11. fair presets

def test_every_preset_of_a_device_shares_its_backend_settings():
    for prefix in ("cpu-", "gpu-"):
        backends = {(v.knobs.tf32, v.knobs.cudnn_benchmark) for n, v in PRESETS.items() if n.startswith(prefix)}
        assert len(backends) == 1, (prefix, backends)


# ---------------------------------------------------------------- 12. inference throughput, not 1/latency

def test_throughput_runs_batches_back_to_back_with_one_synchronize_per_repeat(monkeypatch):
    syncs = []
    monkeypatch.setattr(inference, "synchronize", lambda device: syncs.append(device))
    calls = []
    model = _ShapeSpy()
    model.register_forward_hook(lambda *a: calls.append(1))
    samples = inference.measure_throughput(model, torch.randn(4, 3, 4, 4), warmup=2, repeats=3,
                                           batches_per_repeat=5)
    assert samples.n == 3 and len(calls) == 2 + 15
    assert len(syncs) == 1 + 3, "after the warmup, then once per repeat: never per batch"


def test_autocast_is_entered_around_every_inference_call():
    entered = []

    class Ctx:
        def __enter__(self):
            entered.append(1)

        def __exit__(self, *a):
            return False

    inference.measure_latency(_ShapeSpy(), torch.randn(1, 3, 4, 4), warmup=1, repeats=4, context=Ctx)
    assert len(entered) == 5


@pytest.mark.slow
def test_a_rows_inference_throughput_is_samples_over_summed_timed_work(tmp_path):
    row = record(RunConfig("t", "cpu", "squeezenet1_1", 8, RunSettings.of(**TINY)), tmp_path, progress=None)
    repeats = read_samples(tmp_path, row).query("series == 'infer_repeat_s'")["value"]
    assert row["infer_repeats"] == len(repeats) == 3
    assert row["infer_samples_per_s"] == pytest.approx(8 * inference.BATCHES_PER_THROUGHPUT_REPEAT * 3 / repeats.sum())
    assert row["process_peak_rss_bytes"] >= row["rss_baseline_bytes"] > 0


# ---------------------------------------------------------------- 13. ceilings keyed by what measured them

def test_cached_ceilings_of_another_device_or_torch_are_measured_again(tmp_path, monkeypatch):
    measured = []

    def fake_measure(device, **kw):
        measured.append(device)
        return Ceilings(str(device), cache.device_name(device), peak_flops_per_s={"fp32": 1e11},
                        bandwidth_bytes_per_s=1e10, torch=torch.__version__, matmul_flops_per_s={"fp32": 9e10},
                        conv_flops_per_s={"fp32": 1e11}, kind_flops_per_s={"conv3x3": {"fp32": 1e11}})

    monkeypatch.setattr(cache, "measure_ceilings_robust", fake_measure)
    monkeypatch.setenv("BENCHLIB_CACHE", str(tmp_path / "machine-cache"))
    first = cache.ensure_ceilings(tmp_path / "a", "cpu")
    for folder in ("a", "b"):  # the same folder again, then a second one: the machine's ceilings, measured once
        assert cache.ensure_ceilings(tmp_path / folder, "cpu").peak_flops_per_s == first.peak_flops_per_s
        assert len(measured) == 1, folder
    assert (tmp_path / "b" / "ceilings").is_dir(), "a second results folder keeps a copy of the machine's"
    paths = [next((tmp_path / "a" / "ceilings").glob("*.json")), next((tmp_path / "machine-cache" / "ceilings").glob(
        "*.json"))]
    for stale in ({"device_name": "Another CPU"}, {"torch": "1.0.0"}, {"conv_flops_per_s": {}},
                  {"kind_flops_per_s": {}}, {"fingerprint": {**first.fingerprint, "cpus": "64"}}):
        for path in paths:
            path.write_text(json.dumps({**json.loads(path.read_text()), **stale}))
        with pytest.warns(UserWarning, match="re-measuring ceilings"):
            cache.ensure_ceilings(tmp_path / "a", "cpu")
    assert len(measured) == 6
    paths[1].write_text(json.dumps({**json.loads(paths[1].read_text()), "fingerprint": {}}))
    with pytest.warns(UserWarning, match="re-measuring ceilings.*without a fingerprint"):
        cache.ensure_ceilings(tmp_path / "c", "cpu")
    assert len(measured) == 7, "the machine cache keeps only what says what it was measured under"


# ---------------------------------------------------------------- 14. eager fallback is said, not silent

def test_a_model_past_its_recompile_limit_is_reported_as_fallen_back():
    reset_compiler()
    # torch 2.6 renamed dynamo's cache_size_limit to recompile_limit; the torch floor has the old name
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    with torch._dynamo.config.patch(**{limit: 1}):
        model = torch.compile(nn.Linear(4, 4), backend="eager", dynamic=False)
        for n in (1, 2, 3):
            model(torch.randn(n, 4))
    report = compile_report()
    assert report.fell_back and "limit" in report.reason and "runs eager" in report.reason, report
    reset_compiler()
    model = torch.compile(nn.Linear(4, 4), backend="eager", dynamic=False)
    model(torch.randn(2, 4))
    assert not compile_report().fell_back and compile_report().graphs == 1


def _report_after(*records: tuple[str, tuple], unimplemented: str | None = None) -> object:
    """compile_report() once a frame compiled and dynamo's convert_frame logger wrote ``records`` (a format and
    its arguments, as dynamo logs them), with ``unimplemented`` among dynamo's counters; then a clean slate."""
    from torch._dynamo.utils import counters

    reset_compiler()
    counters["frames"]["ok"] += 1  # a frame compiled: the frames counter alone does not say fallen back
    if unimplemented:
        counters["unimplemented"][unimplemented] += 1
    for message, args in records:
        logging.getLogger("torch._dynamo.convert_frame").warning(message, *args)
    report = compile_report()
    reset_compiler()
    return report


def test_the_recompile_limit_is_read_from_the_records_arguments_whatever_its_wording():
    reworded = _report_after(("gave up recompiling: %s is %s", ("recompile_limit", 8)))
    assert reworded.fell_back and "config.recompile_limit (8)" in reworded.reason, reworded
    floor = _report_after(("%s reached (%s)", ("cache_size_limit", 8)))  # torch 2.5's name of the limit
    assert floor.fell_back and "config.cache_size_limit (8)" in floor.reason, floor


def test_the_old_wording_without_a_limits_arguments_is_not_a_fallback():
    wording = "torch._dynamo hit config.%s (%s)\n   function: %s\n   last reason: %s"
    report = _report_after(
        (wording, ("automatic_dynamic_shapes", True, "'forward'", "size changed")),  # another config's name
        ("torch._dynamo hit config.recompile_limit (8): recompile limit, cache size limit", ()),  # no arguments
        unimplemented="Dynamo recompile limit exceeded (cache size limit)",  # the words once searched for
    )
    assert not report.fell_back and report.reason is None, report


# ---------------------------------------------------------------- 15. energy windows long enough to trust

def test_an_nvml_window_under_a_second_is_unmeasurable():
    joules, reason = gpu_counter_j(1000, 1500, 0.5)
    assert joules is None and ">= 1 s" in reason and "not 0 J" in reason
    assert gpu_counter_j(1000, 3000, en.NVML_MIN_WINDOW_S)[0] == pytest.approx(2.0)


# ---------------------------------------------------------------- 16. smaller ones

def test_a_numbered_gpu_with_several_processes_is_refused_before_launch(capsys):
    assert main(["run", "--model", "resnet18", "--device", "cuda:1", "--nproc-per-node", "2"]) == 2
    assert "cuda (each process takes cuda:LOCAL_RANK" in capsys.readouterr().err


# ---------------------------------------------------------------- on a GPU

@pytest.mark.gpu
def test_one_configuration_recorded_on_cuda(tmp_path):
    row = record(RunConfig("g", "cuda", "squeezenet1_1", 16, RunSettings.of(**TINY)), tmp_path, progress=None)
    assert row["status"] == "ok" and row["step_sync"] == "region"
    assert row["peak_cuda_allocated_bytes"] > 0 and row["peak_cuda_reserved_bytes"] >= row["peak_cuda_allocated_bytes"]
    assert math.isfinite(row["train_samples_per_s"]) and row["infer_samples_per_s"] > 0


@pytest.mark.gpu
def test_reserved_peak_does_not_carry_over_from_a_larger_configuration(tmp_path):
    def reserved(batch):
        s = RunSettings.of(**{**TINY, "dataset": "synthetic", "synthetic_samples": batch * 4})
        return record(RunConfig("g", "cuda", "resnet18", batch, s), tmp_path, progress=None)["peak_cuda_reserved_bytes"]

    small_first = reserved(8)
    reserved(256)
    assert reserved(8) <= 1.1 * small_first


def _visible_gpus() -> list:
    """Each visible GPU's index, marked gpu (one, skipped, where there is none: the test still collects)."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [pytest.param(i, marks=pytest.mark.gpu) for i in range(max(count, 1))]


@pytest.mark.parametrize("index", _visible_gpus())
def test_the_nvml_handle_of_the_run_is_the_torch_devices(index):
    """benchlib finds cuda:N in NVML by the UUID torch reports; NVML's own lookup by the PCI location torch
    reports must land on the same board (CUDA's order and NVML's can differ; a MIG slice's board is its GPU)."""
    from benchlib.env.devices import cuda_uuids
    from benchlib.instruments.nvml import NvmlDevices, normal_uuid

    props = torch.cuda.get_device_properties(index)
    if not hasattr(props, "pci_bus_id"):
        pytest.skip("this torch reports no PCI location of its devices")
    with NvmlDevices(uuids=cuda_uuids([index])) as nv:
        assert len(nv.handles) == 1, nv.missing
        (nvml_index,) = nv.handles
        found = pynvml.nvmlDeviceGetHandleByIndex(nvml_index)  # the board benchlib's handle is on
        by_pci = pynvml.nvmlDeviceGetHandleByPciBusId(
            f"{props.pci_domain_id:x}:{props.pci_bus_id:x}:{props.pci_device_id:x}.0")
        assert normal_uuid(pynvml.nvmlDeviceGetUUID(found)) == normal_uuid(pynvml.nvmlDeviceGetUUID(by_pci))


# ---------------------------------------------------------------- fair variants: no host sync the baseline lacks

def test_auto_optimizer_kernels_keep_a_step_the_fp16_scaler_skips_skipped():
    """On CUDA ``auto`` runs SGD and Adam fused. torch's fused SGD makes its momentum buffers with
    ``empty_like`` on the first step; when the gradient scaler skips that step they keep whatever memory held
    and the next finite step throws the weights off (an fp16 resnet50 on an H200 reached a NaN loss by its
    sixth step). benchlib zeroes them first. Run here on the CPU, where the same kernels exist: an overflow
    first step leaves SGD's weights and state bit for bit as a plain loop leaves them (Adam's within rounding)."""
    from benchlib.engine.step import make_optimizer, optimizer_impl

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert optimizer_impl(RunSettings.of(), cuda) == "fused"
    assert optimizer_impl(RunSettings.of(optimizer="adam"), cuda) == "fused"
    assert optimizer_impl(RunSettings.of(), cpu) == "default"
    assert optimizer_impl(RunSettings.of(optimizer_impl="for_loop"), cuda) == "for_loop"

    def overflow_then_finite(optimizer: str, impl: str) -> tuple[torch.Tensor, dict]:
        torch.manual_seed(0)
        net = nn.Linear(64, 32)
        opt = make_optimizer(net, RunSettings.of(optimizer=optimizer, optimizer_impl=impl), cpu)
        scaler = torch.amp.GradScaler("cpu")
        x = torch.randn(8, 64)
        for bad in (True, False, False):
            opt.zero_grad(set_to_none=True)
            loss = net(x).sum() * (float("inf") if bad else 1.0)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return net.weight.detach().clone(), opt.state_dict()["state"]

    for optimizer in ("sgd", "adam"):
        impl = optimizer_impl(RunSettings.of(optimizer=optimizer), cuda)
        weights, state = overflow_then_finite(optimizer, impl)
        plain_weights, plain_state = overflow_then_finite(optimizer, "for_loop")
        same = torch.equal if optimizer == "sgd" else torch.allclose  # fused Adam rounds in another order
        assert torch.isfinite(weights).all() and same(weights, plain_weights), (optimizer, impl)
        for key, value in plain_state.get(0, {}).items():
            assert same(torch.as_tensor(state[0][key]), torch.as_tensor(value)), (optimizer, impl, key)


def test_fused_sgd_starts_from_zero_momentum_buffers():
    """The mechanism itself, whatever the allocator happens to hold: before the first step every parameter of
    a fused SGD with momentum has a zero buffer (torch would make them with ``empty_like`` inside a step the
    scaler may skip); other kernels keep torch's own first step."""
    from benchlib.engine.step import make_optimizer

    net = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    fused = make_optimizer(net, RunSettings.of(optimizer_impl="fused"), torch.device("cpu"))
    buffers = [fused.state[p].get("momentum_buffer") for p in net.parameters()]
    assert all(b is not None and b.shape == p.shape and not b.any() for b, p in zip(buffers, net.parameters()))
    plain = make_optimizer(net, RunSettings.of(optimizer_impl="for_loop"), torch.device("cpu"))
    assert not plain.state, "no buffer where torch's own first step is safe"
    assert not make_optimizer(net, RunSettings.of(optimizer_impl="fused", momentum=0.0), torch.device("cpu")).state


def test_fused_sgd_under_fp16_is_allowed_now_that_its_first_step_is_safe():
    from benchlib.spec.settings import check_consistency

    check_consistency(RunSettings.of(optimizer_impl="fused", precision="amp_fp16"), "study.yaml")


def test_a_fused_optimizer_takes_the_gradient_scalers_inf_check_on_the_device(monkeypatch):
    """fp16 training scales its loss; with a for-loop optimizer the scaler reads its inf flag with .item()
    every step (a host sync an fp32 row does not pay); a fused one (SGD and Adam under ``auto`` on CUDA) does
    not."""
    from benchlib.engine.step import make_optimizer

    real_item = torch.Tensor.item

    def host_reads(impl: str, optimizer: str) -> int:
        net = nn.Linear(4, 2)
        opt = make_optimizer(net, RunSettings.of(optimizer=optimizer, optimizer_impl=impl), torch.device("cpu"))
        scaler = torch.amp.GradScaler("cpu")
        reads = []
        monkeypatch.setattr(torch.Tensor, "item", lambda self: reads.append(1) or real_item(self))
        scaler.scale(net(torch.randn(8, 4)).sum()).backward()
        scaler.step(opt)
        monkeypatch.setattr(torch.Tensor, "item", real_item)
        return len(reads)

    for optimizer in ("sgd", "adam"):
        assert host_reads("fused", optimizer) == 0, optimizer
        assert host_reads("for_loop", optimizer) >= 1, "what a non-fused optimizer pays under fp16"


@pytest.mark.slow
def test_the_row_records_the_optimizer_kernels_it_ran(tmp_path, monkeypatch):
    """The row's column and the optimizer that trained agree: the setting reached torch.optim."""
    from benchlib.engine import step as step_module

    built: list[torch.optim.Optimizer] = []
    real = step_module.make_optimizer
    monkeypatch.setattr(step_module, "make_optimizer", lambda *a, **k: built.append(real(*a, **k)) or built[-1])
    row = record(RunConfig("o", "cpu", "squeezenet1_1", 8, RunSettings.of(**TINY, optimizer_impl="foreach")),
                 tmp_path, progress=None)
    assert row["status"] == "ok" and row["optimizer_impl"] == "foreach"
    assert built and all(o.param_groups[0]["foreach"] is True for o in built), "the kernels the row names"


def test_data_waits_are_a_share_of_the_hosts_wall_time_not_of_device_step_time():
    """On a GPU the step times are the device's and overlap the host's waiting for the next batch: 2 s of
    waits in a 10 s timed region are 20%, whatever the device's steps add up to (10 s here, so waits + steps
    would have said 17%)."""
    from benchlib.engine.train import TrainResult

    trained = TrainResult(step_s=[1.0] * 10, data_wait_s=[0.2] * 10, timed_samples=640, total_samples=640,
                          timed_wall_s=10.0)
    assert training_columns(trained, 10, 1)["data_wait_fraction"] == pytest.approx(0.2)


@pytest.mark.slow
def test_the_timed_region_is_measured_on_the_host_from_the_first_timed_step(tmp_path):
    row = record(RunConfig("w", "cpu", "squeezenet1_1", 8, RunSettings.of(**TINY)), tmp_path, progress=None)
    steps = read_samples(tmp_path, row)
    total = float(steps.loc[steps["series"] == "train_step_s", "value"].sum())
    waits = float(steps.loc[steps["series"] == "data_wait_s", "value"].sum())
    assert 0 < row["data_wait_fraction"] < 1
    wall = waits / row["data_wait_fraction"]
    assert wall >= total * 0.99, "the host's region holds the steps (on a CPU, one clock)"


@pytest.mark.parametrize("memory_format", ["channels_last", "contiguous"])
def test_synthetic_batches_are_made_in_the_variants_memory_format_once(memory_format):
    """A channels_last variant's synthetic batches are channels_last from the start: the conversion inside
    every timed step then copies nothing (the same storage comes back)."""
    from benchlib.engine.step import to_device

    s = RunSettings.of(dataset="synthetic", image_size=8, synthetic_samples=16, memory_format=memory_format)
    loaders = build_loaders(s, 4, torch.device("cpu"))
    for loader in (loaders.train, loaders.test):
        x, y = next(iter(loader))
        assert x.is_contiguous(memory_format=torch.channels_last) == (memory_format == "channels_last")
        stepped, _ = to_device(x, y, torch.device("cpu"), s.knobs)
        assert stepped.data_ptr() == x.data_ptr(), "no copy inside the step"


@pytest.mark.skipif(not hasattr(torch.backends.cuda.matmul, "fp32_precision"), reason="torch without fp32_precision")
def test_tf32_set_through_torchs_newer_api_is_read_and_restored_without_an_error():
    """torch refuses to read the legacy ``allow_tf32`` once a notebook set ``fp32_precision``: benchlib's
    manifest, variant flags and ceilings read and set TF32 through whichever API is in use. In a fresh process:
    the newer API, once used, stays for the rest of the process."""
    import subprocess
    import sys

    code = """
import torch
from benchlib.engine.knobs import backend_flags
from benchlib.env.manifest import collect_manifest
from benchlib.env.tf32 import tf32_enabled
from benchlib.spec.knobs import Knobs
torch.backends.cuda.matmul.fp32_precision = "tf32"
try:
    torch.backends.cuda.matmul.allow_tf32
    raise SystemExit("torch read the legacy flag: the case under test did not arise")
except RuntimeError:
    pass
assert tf32_enabled("matmul") is True
with backend_flags(Knobs(tf32=False)):
    assert tf32_enabled("matmul") is False and torch.backends.cuda.matmul.fp32_precision == "ieee"
assert torch.backends.cuda.matmul.fp32_precision == "tf32", "restored in the API it was set with"
assert collect_manifest()["default_tf32_matmul"] is True
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
