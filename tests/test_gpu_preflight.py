"""The GPU path's checks before any work, on this CPU machine with the shared fake of torch.cuda (tests/fakes.py):
kernels for the GPU's architecture, precisions asked of the row's own GPU, room for the ceilings' buffers,
processes no more than GPUs, MIG and PCIe/SXM told apart, a largest batch whose memory floor fits the free
memory (read through NVML, without a CUDA context). Each refusal is one line naming the GPU."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from fakes import A100_MIG_1G, A100_SXM, GIB, H100_PCIE, H100_SXM, P100, T4, V100, FakeGpu, fake_cuda

from benchlib.cli import main
from benchlib.engine.knobs import unsupported_reason
from benchlib.env.devices import bf16_supported
from benchlib.env.gpu import (
    MIN_COPY_BYTES,
    arch_problem,
    compile_problem,
    copy_bytes_for,
    gpu_facts,
    matmul_size_for,
    precision_problem,
)
from benchlib.errors import ConfigError
from benchlib.run.preflight import check_gpus
from benchlib.spec.knobs import Knobs
from benchlib.spec.settings import RunSettings


def test_a_gpu_older_than_the_builds_kernels_is_named_with_what_the_build_has(monkeypatch):
    fake_cuda(monkeypatch, V100, T4, H100_SXM)
    said = arch_problem(gpu_facts(0))
    assert said is not None and "\n" not in said
    assert said.startswith("cuda:0 (Tesla V100-SXM2-16GB, sm_70): this torch ")
    assert "no kernels for sm_70 (it has sm_75 to sm_120)" in said
    assert said.endswith("install PyTorch's CUDA 12.6 build of the same torch: make install "
                         "TORCH_INDEX=https://download.pytorch.org/whl/cu126 (in a fresh .venv), or pip install torch "
                         "torchvision --index-url https://download.pytorch.org/whl/cu126")
    assert arch_problem(gpu_facts(1)) is None and arch_problem(gpu_facts(2)) is None


@pytest.mark.parametrize("capability,advice", [
    ((6, 0), "CUDA 12.6 build"),  # a P100: the legacy wheels reach back to Maxwell
    ((5, 0), "CUDA 12.6 build"),
    ((3, 7), "no current torch build has kernels for sm_37: use a GPU of compute capability 5.0 or newer"),
    ((12, 1), "install a newer torch whose torch.cuda.get_arch_list() includes sm_121"),  # newer than the build
])
def test_the_refusal_names_the_build_that_serves_the_gpu(monkeypatch, capability, advice):
    fake_cuda(monkeypatch, FakeGpu("some GPU", capability, 16.0), arch_list=["sm_75", "sm_80", "sm_90"])
    said = arch_problem(gpu_facts(0))
    assert said is not None and "\n" not in said and advice in said


@pytest.mark.parametrize("capability,archs,runs", [
    ((8, 6), ["sm_80"], True),  # a cubin runs on a later minor of its major
    ((8, 0), ["sm_86"], False),  # not on an earlier one
    ((9, 0), ["sm_80", "sm_86"], False),  # nor on another major
    ((12, 1), ["sm_90", "compute_90"], True),  # PTX is compiled by the driver for any later GPU
    ((9, 0), ["sm_90a"], False),  # an arch-specific cubin is for its own part only (and here unparsed: refused)
    ((6, 0), [], True),  # a build that does not say: the run decides
])
def test_the_compatibility_rule_of_cubins_and_ptx(monkeypatch, capability, archs, runs):
    fake_cuda(monkeypatch, FakeGpu("some GPU", capability, 16.0), arch_list=archs)
    assert (arch_problem(gpu_facts(0)) is None) == runs


def test_bf16_is_asked_of_the_rows_own_gpu_not_the_current_one(monkeypatch):
    fake_cuda(monkeypatch, A100_SXM, T4)
    assert bf16_supported("cuda:0") and bf16_supported("cuda") and not bf16_supported("cuda:1")
    reason = unsupported_reason(Knobs(precision="amp_bf16"), "cuda:1", training=True)
    assert reason == "cuda:1 has no native bf16 (needs compute capability 8.0+); use amp_fp16"
    assert unsupported_reason(Knobs(precision="amp_bf16"), "cuda:0", training=True) is None
    assert precision_problem(gpu_facts(1), "tf32") == ("cuda:1 (Tesla T4, sm_75) has no TF32 tensor cores (needs "
                                                        "compute capability 8.0+); use fp32 (TF32 off)")
    assert precision_problem(gpu_facts(0), "tf32") is None and precision_problem(gpu_facts(1), "fp32") is None


def test_compile_on_a_gpu_triton_cannot_target_is_a_reason_not_a_failure(monkeypatch):
    fake_cuda(monkeypatch, P100, T4)
    assert compile_problem(gpu_facts(0)) == ("cuda:0 (Tesla P100-PCIE-16GB, sm_60): torch.compile's triton backend "
                                             "needs compute capability 7.0+; use compile: off")
    assert compile_problem(gpu_facts(1)) is None


def test_compile_on_a_gpu_triton_cannot_target_is_a_skipped_row_with_the_reason(monkeypatch):
    from benchlib.engine import knobs as engine_knobs
    from benchlib.engine.setup import check_runs
    from benchlib.errors import SkippedConfiguration
    from benchlib.run.outcome import failure_status

    fake_cuda(monkeypatch, P100, T4)
    monkeypatch.setattr(engine_knobs, "find_spec", lambda name: object())  # triton "installed"
    settings = RunSettings(knobs=Knobs(compile="default"))
    with pytest.raises(SkippedConfiguration) as raised:
        check_runs(settings, "cuda:0")
    assert str(raised.value) == compile_problem(gpu_facts(0))
    assert failure_status(raised.value) == "skipped"
    check_runs(settings, "cuda:1")  # a T4 compiles


def test_tf32_and_bf16_ceilings_are_skipped_with_the_reason_below_capability_8(monkeypatch):
    from benchlib.roofline.ceilings import _dtype_unsupported_reason

    fake_cuda(monkeypatch, T4, A100_SXM)
    t4 = torch.device("cuda:0")
    assert _dtype_unsupported_reason("tf32", t4) == ("tf32 needs compute capability 8.0+ on cuda:0 (it would "
                                                     "silently measure fp32)")
    assert _dtype_unsupported_reason("bf16", t4) == ("no native bf16 on this cuda (it would measure slow "
                                                     "emulation, a roof no variant runs under)")


def test_the_ceilings_buffers_fit_the_free_memory_or_are_refused_in_one_line(monkeypatch):
    busy_t4 = FakeGpu("Tesla T4", (7, 5), 15.0, free_gib=0.6)
    fake_cuda(monkeypatch, A100_SXM, A100_MIG_1G, busy_t4)
    assert copy_bytes_for(gpu_facts(0), 2 * GIB) == 2 * GIB, "room to spare: the default"
    mig = copy_bytes_for(gpu_facts(1), 2 * GIB)
    assert MIN_COPY_BYTES <= mig < 2 * GIB and 2 * mig <= 0.5 * A100_MIG_1G.free_bytes
    with pytest.raises(ValueError) as exc:
        copy_bytes_for(gpu_facts(2), 2 * GIB)
    said = str(exc.value)
    assert "\n" not in said and said.startswith("cuda:2 (Tesla T4, sm_75): 0.60 GiB free of 15.0 GiB")
    assert "at least 256 MiB" in said and "nvidia-smi" in said
    assert matmul_size_for(gpu_facts(0), 8192, 4) == 8192
    small = matmul_size_for(gpu_facts(2), 8192, 4)
    assert small % 256 == 0 and 3 * small * small * 4 <= 0.5 * busy_t4.free_bytes


def test_mig_pcie_and_sxm_are_told_apart(monkeypatch):
    fake_cuda(monkeypatch, A100_MIG_1G, H100_SXM, H100_PCIE, T4)
    assert [gpu_facts(i).form for i in range(4)] == ["mig", "sxm", "pcie", "unknown"]
    assert gpu_facts(0).mig and not gpu_facts(1).mig


def _settings(**kw) -> RunSettings:
    return RunSettings.of(**kw)


def test_the_preflight_refuses_each_case_in_one_line_naming_the_gpu(monkeypatch):
    fake_cuda(monkeypatch, T4, V100, FakeGpu("Tesla T4", (7, 5), 15.0, free_gib=0.3))
    check_gpus(["cpu"], [_settings()], "s.yaml")  # nothing asked of a GPU
    check_gpus(["cuda:0"], [_settings()], "s.yaml")  # a T4 in fp32 runs
    cases = [
        (["cuda:1"], [_settings()], 1, "s.yaml: key 'hardware': cuda:1 (Tesla V100-SXM2-16GB, sm_70): this torch"),
        (["cuda:0"], [_settings(precision="amp_bf16")], 1,
         "s.yaml: key 'hardware': cuda:0 (Tesla T4, sm_75) has no native bf16"),
        (["cuda:2"], [_settings()], 1, "s.yaml: key 'hardware': cuda:2 (Tesla T4, sm_75): 0.30 GiB free of 15.0 GiB"),
        (["cuda"], [], 4, "s.yaml: 4 data-parallel processes need a GPU each; this machine has 3 (cuda:0 Tesla T4"),
    ]
    for hardware, settings, processes, start in cases:
        with pytest.raises(ConfigError) as exc:
            check_gpus(hardware, settings, "s.yaml", processes=processes)
        assert str(exc.value).startswith(start) and "\n" not in str(exc.value), str(exc.value)
        assert exc.value.exit_code == 2


def test_more_processes_than_gpus_is_refused_before_launch(monkeypatch, capsys):
    fake_cuda(monkeypatch, A100_SXM, A100_SXM)
    assert main(["run", "--model", "resnet18", "--device", "cuda", "--nproc-per-node", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "allowed: --nproc-per-node 1..2" in err, err


def test_an_unsupported_gpu_refuses_a_run_before_any_work(monkeypatch, capsys, tmp_path):
    fake_cuda(monkeypatch, V100)
    touched: list[str] = []  # what would start work on the GPU: none of it may run before the refusal
    for name in ("set_device", "synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name, **k: touched.append(_n))
    for name in ("synchronize", "set_device_index", "set_device_idx"):  # the device-generic path (torch 2.6+)
        if hasattr(getattr(torch, "accelerator", None), name):
            monkeypatch.setattr(torch.accelerator, name, lambda *a, _n=name, **k: touched.append(f"accelerator.{_n}"))
    code = main(["run", "--model", "resnet18", "--device", "cuda", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "no kernels for sm_70" in err and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir()), "nothing written"
    assert touched == [], touched


def test_the_tf32_column_says_what_the_rows_own_gpu_did(monkeypatch):
    """``--device auto`` on a GPU recorded tf32 off (the name is not 'cuda'), so the roof was fp32's; a T4
    accepts the flag and stays fp32, so tf32 on there must read off."""
    from benchlib.run.columns import base_row
    from benchlib.spec.settings import RunConfig

    fake_cuda(monkeypatch, A100_SXM, T4)
    s = _settings(tf32=True)
    assert base_row(RunConfig("s", "auto", "resnet18", 8, s), "m", torch.device("cuda", 0))["tf32"] is True
    assert base_row(RunConfig("s", "cuda:1", "resnet18", 8, s), "m", torch.device("cuda", 1))["tf32"] is False
    assert base_row(RunConfig("s", "auto", "resnet18", 8, s), "m", torch.device("cpu"))["tf32"] is False
    assert base_row(RunConfig("s", "cuda", "resnet18", 8, s), "m")["tf32"] is True, "before it runs: as named"


def _run_configs(batch: int, model: str = "resnet18", hardware: str = "cuda:0", **flat) -> list:
    from benchlib.spec.settings import RunConfig

    settings = RunSettings.of(dataset="synthetic", image_size=224, synthetic_classes=10, **flat)
    return [RunConfig("s", hardware, model, b, settings) for b in (32, batch)]


def test_saved_bytes_counts_what_autograd_keeps_each_storage_once():
    """Conv -> in-place ReLU -> flatten -> Linear keeps the conv's input and the ReLU's output (the linear
    layer's input is a view of it): (3 + 8) x 6 x 6 floats per sample, nothing of the weights."""
    from benchlib.nets.memory_floor import saved_bytes

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(inplace=True), torch.nn.Flatten(),
                              torch.nn.Linear(8 * 6 * 6, 4))
    assert saved_bytes(net, torch.randn(5, 3, 6, 6)) == 5 * (3 + 8) * 6 * 6 * 4
    frozen = torch.nn.Linear(8, 4).requires_grad_(False)
    assert saved_bytes(frozen, torch.randn(5, 8)) == 0, "nothing trains: nothing is kept"


def test_a_batch_whose_floor_exceeds_the_free_memory_is_refused_with_the_batch_that_fits(monkeypatch):
    from benchlib.nets.memory_floor import training_floor_bytes
    from benchlib.run.preflight import check_gpu_memory

    fake_cuda(monkeypatch, T4)
    check_gpu_memory(_run_configs(256), "s.yaml")  # 256 x ~21 MiB fits in 15 GiB
    with pytest.raises(ConfigError) as exc:
        check_gpu_memory(_run_configs(1024), "s.yaml")
    said = str(exc.value)
    assert said.startswith("s.yaml: key 'batch_sizes': cuda:0 (Tesla T4, sm_75) has 15.00 GiB free; training "
                           "resnet18 at batch 1024 (224 px, fp32) holds at least ") and "\n" not in said, said
    fits = int(said.split("allowed: batch sizes up to ")[1].split()[0])
    assert training_floor_bytes("resnet18", 224, 10, fits, 4) <= T4.free_bytes
    assert training_floor_bytes("resnet18", 224, 10, fits + 1, 4) > T4.free_bytes


def test_the_floor_follows_precision_frozen_backbones_data_parallel_shares_and_compile(monkeypatch):
    from benchlib.run.preflight import check_gpu_memory

    fake_cuda(monkeypatch, T4)
    check_gpu_memory(_run_configs(1024, precision="amp_fp16"), "s.yaml")  # half-width activations
    check_gpu_memory(_run_configs(1024, pretrained=True, freeze_backbone=True), "s.yaml")  # only the head trains
    check_gpu_memory(_run_configs(1024), "s.yaml", world_size=2)  # 512 per GPU
    check_gpu_memory(_run_configs(1024, compile="default"), "s.yaml")  # the compiler may recompute: not judged
    check_gpu_memory(_run_configs(1024, hardware="cpu"), "s.yaml")  # a CPU row: not a GPU's memory
    with pytest.raises(ConfigError, match="at batch 1024 per GPU"):
        check_gpu_memory(_run_configs(2048), "s.yaml", world_size=2)


def test_free_memory_is_read_through_nvml_without_a_cuda_context(monkeypatch):
    """A study's parent process checks the GPUs and then waits for hours: torch.cuda.mem_get_info would leave
    a CUDA context on each GPU for all that time, so NVML (found by torch's UUID) answers instead."""
    from fakes import FakeNvml

    from benchlib.run.preflight import check_gpu_memory

    fake_cuda(monkeypatch, T4)
    nvml = FakeNvml().install(monkeypatch)
    monkeypatch.setattr(nvml, "uuids", {0: "GPU-fake-0", 1: "GPU-aaa", 2: "GPU-bbb"})
    import pynvml

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(free=int(0.5 * GIB), used=1))

    def no_context(device=None):
        raise AssertionError("mem_get_info creates a CUDA context")

    monkeypatch.setattr(torch.cuda, "mem_get_info", no_context)
    with pytest.raises(ConfigError, match=r"has 0\.50 GiB free"):
        check_gpu_memory(_run_configs(64), "s.yaml")


def test_where_nvml_cannot_tell_free_memory_is_read_by_a_child_not_in_this_process(monkeypatch):
    """No NVML (a container without the driver library's NVML, a vGPU): the parent still reads no free memory
    through torch, which would keep a CUDA context on the GPU for hours, but asks a short-lived child."""
    from benchlib.env import gpu as gpu_env
    from benchlib.run.preflight import check_gpu_memory

    fake_cuda(monkeypatch, T4)

    def no_context(device=None):
        raise AssertionError("mem_get_info creates a CUDA context")

    monkeypatch.setattr(torch.cuda, "mem_get_info", no_context)
    asked: list[int] = []
    monkeypatch.setattr(gpu_env, "free_bytes_in_child", lambda index: asked.append(index) or int(0.5 * GIB))
    with pytest.raises(ConfigError, match=r"has 0\.50 GiB free"):
        check_gpu_memory(_run_configs(64), "s.yaml")
    assert asked == [0]


def test_the_compile_check_reads_no_free_memory(monkeypatch):
    from benchlib.engine.knobs import unsupported_reason
    from benchlib.spec.knobs import Knobs

    fake_cuda(monkeypatch, FakeGpu("Tesla P100-PCIE-16GB", (6, 0), 16.0))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: pytest.fail("a CUDA context"))
    monkeypatch.setattr("benchlib.engine.knobs.find_spec", lambda name: object())
    assert "triton backend needs compute capability 7.0+" in unsupported_reason(Knobs(compile="default"), "cuda",
                                                                                 training=True)


def test_a_run_whose_batch_cannot_fit_is_refused_before_any_work(monkeypatch, capsys, tmp_path):
    fake_cuda(monkeypatch, FakeGpu("Tesla T4", (7, 5), 15.0, free_gib=2.0))
    code = main(["run", "--model", "resnet18", "--device", "cuda", "--batch-size", "512", "--data", "synthetic",
                 "--image-size", "224", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "command line: --batch-size: cuda:0 (Tesla T4, sm_75) has 2.00 GiB free" in err
    assert not any(tmp_path.iterdir()), "nothing written"
