"""Apple MPS: the same code path as CPU and CUDA. Skipped where no MPS device exists (run `make test` on a Mac)."""
from __future__ import annotations

import pytest

from benchlib.roofline.ceilings import measure_ceilings
from benchlib.run.record import record
from benchlib.spec.settings import RunConfig
from benchlib.spec.variants import PRESETS, apply_variant

pytestmark = pytest.mark.mps


def test_training_inference_and_memory_figures_on_mps(tmp_path, tiny_settings):
    row = record(RunConfig("m", "mps", "resnet18", 16, tiny_settings), tmp_path, progress=None)
    assert row["status"] == "ok", row.get("error")
    assert row["hardware"] == "mps"
    assert row["train_step_s_median"] > 0 and row["latency_ms_p50"] > 0
    assert row["mps_driver_allocated_bytes"] > 0, "MPS memory figures come from torch.mps"


def test_mps_ceilings_are_measured():
    c = measure_ceilings("mps", dtypes=["fp32", "fp16"], matmul_size=2048, copy_bytes=128 * 2**20, repeats=3, warmup=1)
    assert c["peak_flops_per_s"]["fp32"] > 0 and c["bandwidth_bytes_per_s"] > 0


def test_variants_mps_cannot_run_are_skipped_rows(tmp_path, tiny_settings):
    for name, reason in (("gpu-compiled", "not run on MPS"), ("cpu-quantized", "runs on CPU only")):
        cfg = RunConfig("m", "mps", "squeezenet1_1", 8, apply_variant(tiny_settings, PRESETS[name]))
        row = record(cfg, tmp_path, progress=None)
        assert row["status"] == "skipped" and reason in row["error"], (name, row["error"])
