"""A configuration that ends without a measurement is a row saying how (oom, failed, skipped), and the study
goes on. Fast, so the torch floor's run (`make floor-test`) takes the out-of-memory path too: torch's
``OutOfMemoryError`` is what sets the floor at 2.5."""
from __future__ import annotations

import pytest
import torch

from benchlib.errors import SkippedConfiguration
from benchlib.run import measure as measure_module
from benchlib.run import record as record_module
from benchlib.run.columns import measured_row
from benchlib.run.outcome import error_text, failure_status
from benchlib.spec.settings import RunConfig, RunSettings
from benchlib.store.rows import read_results


@pytest.mark.parametrize("exc,status", [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
    (MemoryError(), "oom"),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried"), "oom"),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), "failed"),
    (getattr(torch, "AcceleratorError", RuntimeError)("CUDA error: out of memory\nCUDA kernel errors might be "
                                                       "asynchronously reported"), "oom"),
    (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), "oom"),
    (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), "oom"),
    (torch.distributed.DistBackendError("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL "
                                        "version 2.21.5\nLast error:\nCuda failure 'out of memory'"), "oom"),
    (RuntimeError("NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"), "failed"),
    (SkippedConfiguration("tf32 is a CUDA knob: it would be ignored on cpu"), "skipped"),
])
def test_each_ending_has_its_status_word(exc, status):
    assert failure_status(exc) == status


def test_an_out_of_memory_wrapped_by_another_error_is_still_oom():
    """torch.compile raises its own error around what failed inside it (raise ... from ...)."""
    class BackendCompilerFailed(RuntimeError):
        pass

    try:
        try:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")
        except torch.OutOfMemoryError as inner:
            raise BackendCompilerFailed("backend='inductor' raised: see above") from inner
    except BackendCompilerFailed as outer:
        assert failure_status(outer) == "oom"
    assert failure_status(BackendCompilerFailed("backend='inductor' raised: a lowering failed")) == "failed"


def test_an_out_of_memory_batch_is_a_row_and_the_study_goes_on(tmp_path, monkeypatch):
    def out_of_memory(cfg, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")

    monkeypatch.setattr(record_module, "ensure_ceilings", lambda *args, **kwargs: None)
    monkeypatch.setattr(measure_module, "measure", out_of_memory)
    row = record_module.record(RunConfig("o", "cpu", "resnet18", 4096), tmp_path, progress=None)
    assert row is not None and row["status"] == "oom"
    assert row["error"] == "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    saved = read_results([tmp_path])
    assert saved[["batch_size", "status"]].to_dict("records") == [{"batch_size": 4096, "status": "oom"}]
    assert error_text(SkippedConfiguration("no room")) == "no room"


@pytest.mark.parametrize("quantization,copies", [("static_int8", 2), ("none", 0)])
def test_a_quantized_model_is_timed_at_each_batch_on_a_copy_first_served_that_batch(monkeypatch, quantization, copies):
    """The x86 engine's kernels keep a fast path for the first input shape they run (nets.quantize.unserved_copy):
    an int8 model evaluated at batch 32 and then timed at batch 1 measured 1.0x fp32 where a model served at
    batch 1 runs 2.3x. So each latency series runs on a fresh copy whose every call is at its own batch."""
    from conftest import TINY

    from benchlib.run import measure as measure_module

    made: list[list[int]] = []

    def recording_copy(model):
        copy = real(model)
        seen: list[int] = []
        copy.register_forward_pre_hook(lambda m, args: seen.append(int(args[0].shape[0])))
        made.append(seen)
        return copy

    real = measure_module.unserved_copy
    monkeypatch.setattr(measure_module, "unserved_copy", recording_copy)
    settings = RunSettings.of(**{**TINY, "quantization": quantization, "latency_budget_s": 0})
    measured = measure_module.measure(RunConfig("q", "cpu", "squeezenet1_1", 8, settings))
    assert measured is not None and measured_row(measured)["status"] == "ok"
    assert len(made) == copies
    if copies:
        batch_1, batch_n = made
        assert set(batch_1) == {1} and set(batch_n) == {8}, (batch_1[:5], batch_n[:5])
