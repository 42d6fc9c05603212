"""Tests for benchlib.roofline: structure and invariants of measured ceilings, the roof, datasheet, files.

Timing figures themselves are never asserted (they belong in benchmarks): only that they exist, are
finite and positive, and are consistent with each other.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from benchlib import roofline as rl
from benchlib.env.tf32 import tf32
from benchlib.roofline import ceilings as rl_ceilings

SMALL = {"matmul_size": 256, "copy_bytes": 8 * 2**20, "conv_shape": (2, 32, 16), "repeats": 3, "warmup": 1}
PEAK_FLOPS_PER_S = 100e12
BANDWIDTH_BYTES_PER_S = 2e12
RIDGE = PEAK_FLOPS_PER_S / BANDWIDTH_BYTES_PER_S  # 50 FLOP/byte


@pytest.fixture(scope="module")
def cpu_ceilings() -> rl.Ceilings:
    return rl.measure_ceilings("cpu", **SMALL)


def _positive_finite(x: float) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


# ----------------------------------------------------------------------------------------------------------
# Measured ceilings
# ----------------------------------------------------------------------------------------------------------


def test_cpu_ceilings_are_finite_positive_and_complete(cpu_ceilings: rl.Ceilings) -> None:
    c = cpu_ceilings
    assert c.device == "cpu" and c.device_name
    assert "fp32" in c.peak_flops_per_s
    assert "tf32" not in c.peak_flops_per_s  # a CUDA-only mode never appears on a CPU
    assert all(_positive_finite(v) for v in c.peak_flops_per_s.values())
    assert _positive_finite(c.bandwidth_bytes_per_s)
    assert c.matmul_size == 256 and c.copy_bytes == 8 * 2**20 and c.repeats == 3
    assert c.threads == torch.get_num_threads()
    assert c.measured_utc.endswith("+00:00") and "2*n^3" in c.method


def test_samples_have_one_entry_per_repeat_and_give_the_median(cpu_ceilings: rl.Ceilings) -> None:
    c = cpu_ceilings
    expected_keys = {key.format(d) for d in c.peak_flops_per_s
                     for key in ("matmul_{}_s", "conv_{}_s", "conv3x3_{}_s", "conv1x1_{}_s", "depthwise_{}_2x32x16_s",
                                 f"add_{{}}_{2 * 2**20}_s", f"add_{{}}_{256 * 2**10}_s")} | {"copy_s"}
    assert set(c.samples) == expected_keys == set(c.iqr_over_median)
    for values in c.samples.values():
        assert len(values) == 3 and all(_positive_finite(v) for v in values)
    for dtype, peak in c.peak_flops_per_s.items():
        matmul = 2 * 256**3 / sorted(c.samples[f"matmul_{dtype}_s"])[1]
        conv = 2 * 2 * 32 * 32 * 9 * 16 * 16 / sorted(c.samples[f"conv_{dtype}_s"])[1]
        assert c.matmul_flops_per_s[dtype] == pytest.approx(matmul)
        assert c.conv_flops_per_s[dtype] == pytest.approx(conv)
        kinds = [c.kind_flops_per_s[k][dtype] for k in ("conv3x3", "conv1x1", "depthwise", "matmul")]
        assert peak == max(c.matmul_flops_per_s[dtype], c.conv_flops_per_s[dtype], *kinds)  # the fastest is the roof
    assert c.conv_shape == [2, 32, 16] and rl_ceilings.conv_flops(2, 32, 16) == 2 * 2 * 32 * 32 * 9 * 16 * 16
    assert c.conv_kernel == 3 and "a 3x3 convolution" in c.method
    copy = 2 * 8 * 2**20 / sorted(c.samples["copy_s"])[1]
    assert c.bandwidth_bytes_per_s == pytest.approx(max(copy, *c.kind_bandwidth_bytes_per_s["dram"].values()))
    assert all(v >= 0 for v in c.iqr_over_median.values())


def test_ridge_point_is_peak_over_bandwidth(cpu_ceilings: rl.Ceilings) -> None:
    c = cpu_ceilings
    assert set(c.ridge_point_flops_per_byte) == set(c.peak_flops_per_s)
    for dtype, ridge in c.ridge_point_flops_per_byte.items():
        assert ridge == pytest.approx(c.peak_flops_per_s[dtype] / c.bandwidth_bytes_per_s)


def test_ceilings_are_json_ready(cpu_ceilings: rl.Ceilings) -> None:
    text = json.dumps(cpu_ceilings.to_json(), allow_nan=False)
    assert rl.Ceilings.from_json(json.loads(text)) == cpu_ceilings


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="tf32"):
        rl.measure_ceilings("cpu", dtypes=["tf32"], **SMALL)
    with pytest.raises(ValueError, match="unknown dtype"):
        rl.measure_ceilings("cpu", dtypes=["fp8"], **SMALL)
    with pytest.raises(ValueError, match="repeats"):
        rl.measure_ceilings("cpu", dtypes=["fp32"], matmul_size=64, copy_bytes=1024, repeats=0)


def test_tf32_switch_restores_the_legacy_flag() -> None:
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    with tf32(not before, ("matmul",)):
        assert matmul.allow_tf32 == (not before)
    assert matmul.allow_tf32 == before


@pytest.mark.skipif(not hasattr(torch.backends.cuda.matmul, "fp32_precision"), reason="torch without fp32_precision")
def test_tf32_switch_follows_the_new_api_when_the_caller_uses_it() -> None:
    matmul = torch.backends.cuda.matmul
    legacy_before = matmul.allow_tf32
    try:
        matmul.fp32_precision = "ieee"
        with tf32(True, ("matmul",)):
            assert matmul.fp32_precision == "tf32"
        assert matmul.fp32_precision == "ieee"
    finally:
        matmul.fp32_precision = "none"  # back to "never set", so the legacy flag reads again
        matmul.allow_tf32 = legacy_before
    assert matmul.allow_tf32 == legacy_before


# ----------------------------------------------------------------------------------------------------------
# The roof
# ----------------------------------------------------------------------------------------------------------


def test_roof_is_bandwidth_bound_left_of_the_ridge_and_flat_right_of_it() -> None:
    left, right = RIDGE / 10, RIDGE * 10
    assert rl.roof_flops_per_s(left, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S) == pytest.approx(
        left * BANDWIDTH_BYTES_PER_S
    )
    assert rl.roof_flops_per_s(left, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S) < PEAK_FLOPS_PER_S
    assert rl.roof_flops_per_s(right, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S) == PEAK_FLOPS_PER_S
    assert rl.roof_flops_per_s(RIDGE, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S) == pytest.approx(PEAK_FLOPS_PER_S)
    assert rl.ridge_point_flops_per_byte(PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S) == pytest.approx(RIDGE)


def test_roof_fraction_and_above_roof() -> None:
    intensity = RIDGE / 10  # roof here is 10 TFLOP/s
    below = rl.roof_fraction(4e12, intensity, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S)
    above = rl.roof_fraction(30e12, intensity, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S)
    assert below == pytest.approx(0.4) and 0 < below <= 1
    assert above == pytest.approx(3.0) and above > 1
    assert not rl.above_roof(4e12, intensity, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S)
    assert rl.above_roof(30e12, intensity, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S)
    # within tolerance of the roof is timing noise, not a bug
    assert not rl.above_roof(10.3e12, intensity, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S)
    assert rl.above_roof(10.3e12, intensity, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S, tolerance=1.01)


def test_roof_refuses_non_positive_inputs() -> None:
    with pytest.raises(ValueError):
        rl.roof_flops_per_s(0.0, PEAK_FLOPS_PER_S, BANDWIDTH_BYTES_PER_S)
    with pytest.raises(ValueError):
        rl.roof_fraction(1e12, 1.0, PEAK_FLOPS_PER_S, math.nan)


# ----------------------------------------------------------------------------------------------------------
# Datasheet
# ----------------------------------------------------------------------------------------------------------


def test_datasheet_entries_have_positive_numbers_and_a_source() -> None:
    assert len(rl.DATASHEET) >= 10
    for name, entry in rl.DATASHEET.items():
        assert entry["source"].startswith("vendor datasheet"), name
        assert entry["peak_flops_per_s"] and set(entry["peak_flops_per_s"]) <= {"fp32", "tf32", "fp16", "bf16"}, name
        assert all(_positive_finite(float(v)) for v in entry["peak_flops_per_s"].values()), name
        assert _positive_finite(float(entry["bandwidth_bytes_per_s"])), name


def test_datasheet_figures_are_dense_not_sparse() -> None:
    a100 = rl.DATASHEET["NVIDIA A100 (SXM4 80GB)"]["peak_flops_per_s"]
    h100 = rl.DATASHEET["NVIDIA H100 (SXM5)"]["peak_flops_per_s"]
    assert a100["bf16"] == pytest.approx(312e12) and a100["tf32"] == pytest.approx(156e12)
    assert h100["bf16"] == pytest.approx(989.4e12) and h100["tf32"] == pytest.approx(494.7e12)


@pytest.mark.parametrize("torch_name, key", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 (SXM5)"),
    ("Tesla T4", "NVIDIA T4"),
    ("NVIDIA H200", "NVIDIA H200 (SXM)"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 (SXM4 80GB)"),
    ("Tesla V100-SXM2-16GB", "NVIDIA V100 (SXM2)"),
    ("Tesla P100-PCIE-16GB", "NVIDIA P100 (PCIe 16GB)"),
    ("NVIDIA L4", "NVIDIA L4"),
    ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ("NVIDIA GeForce GTX 1660 Ti", "NVIDIA GeForce GTX 1660 Ti"),
    ("Apple M2", "Apple M2"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 (PCIe)"),
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100 (PCIe 80GB)"),
    ("NVIDIA A10", "NVIDIA A10"),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 (SXM4 40GB)"),
    ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 (PCIe 40GB)"),
    ("NVIDIA H100 NVL", "NVIDIA H100 (NVL)"),
    ("NVIDIA A10G", "NVIDIA A10G"),
])
def test_datasheet_for_matches_torch_device_names(torch_name: str, key: str) -> None:
    entry = rl.datasheet_for(torch_name)
    assert entry is not None and entry["name"] == key
    assert entry["peak_flops_per_s"] == rl.DATASHEET[key]["peak_flops_per_s"]


@pytest.mark.parametrize("torch_name", [
    "Some Unknown Accelerator", "AMD EPYC", "NVIDIA H200 NVL", "NVIDIA A30",
    "NVIDIA L40S", "NVIDIA GeForce RTX 3090 Ti", "Apple M1 Max",
    # a slice is not the part: slice_datasheet scales the part's figures by its share
    "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
])
def test_datasheet_for_unknown_or_sibling_parts_gives_none(torch_name: str) -> None:
    assert rl.datasheet_for(torch_name) is None


def test_datasheet_for_returns_a_copy() -> None:
    entry = rl.datasheet_for("Tesla T4")
    assert entry is not None
    entry["peak_flops_per_s"]["fp32"] = 1.0
    assert rl.DATASHEET["NVIDIA T4"]["peak_flops_per_s"]["fp32"] == pytest.approx(8.1e12)


# ----------------------------------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------------------------------


def test_save_load_round_trip_and_corrupt_file_is_skipped(cpu_ceilings: rl.Ceilings, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHLIB_MACHINE", "box one")
    path = rl.save_ceilings(cpu_ceilings, tmp_path)
    assert path == tmp_path / "ceilings" / "box-one__cpu.json"
    assert not list(path.parent.glob("*.tmp"))
    (path.parent / "other__cuda-0.json").write_text("{not json", encoding="utf-8")
    (path.parent / "foreign__cpu.json").write_text(json.dumps({"hello": 1}), encoding="utf-8")
    (tmp_path / "empty").mkdir()

    with pytest.warns(UserWarning) as record:
        loaded = rl.load_ceilings([tmp_path, tmp_path / "empty"])
    messages = " ".join(str(w.message) for w in record)
    assert "other__cuda-0.json" in messages and "foreign__cpu.json" in messages

    assert len(loaded) == 1
    got = loaded[0]
    assert got.machine == "box one" and got.path == str(path)
    assert dataclasses.replace(got, machine="", path=None) == cpu_ceilings


def test_ceilings_measured_without_a_convolution_are_stale(cpu_ceilings: rl.Ceilings) -> None:
    from benchlib.roofline.cache import stale_reason

    assert stale_reason(cpu_ceilings, torch.device("cpu")) is None
    older = dataclasses.replace(cpu_ceilings, conv_flops_per_s={}, matmul_flops_per_s={})
    assert stale_reason(older, torch.device("cpu")) == ("measured without a convolution ceiling (an older benchlib): "
                                                        "its compute roof is a matmul's only")


def test_each_kind_of_operation_has_its_roof_per_dtype_from_its_own_samples(cpu_ceilings: rl.Ceilings) -> None:
    c = cpu_ceilings
    for dtype in c.peak_flops_per_s:
        assert set(c.kind_flops_per_s) == {"conv3x3", "conv1x1", "depthwise", "matmul"}
        assert c.kind_flops_per_s["conv3x3"][dtype] == pytest.approx(
            rl_ceilings.conv_flops(2, 32, 16) / sorted(c.samples[f"conv3x3_{dtype}_s"])[1])
        assert c.kind_flops_per_s["conv1x1"][dtype] == pytest.approx(
            rl_ceilings.conv_flops(2, 32, 16, 1) / sorted(c.samples[f"conv1x1_{dtype}_s"])[1])
        assert c.kind_flops_per_s["depthwise"][dtype] == pytest.approx(
            2 * 2 * 32 * 9 * 16 * 16 / sorted(c.samples[f"depthwise_{dtype}_2x32x16_s"])[1])
        assert c.kind_flops_per_s["matmul"][dtype] == c.matmul_flops_per_s[dtype]
        assert c.kind_bandwidth_bytes_per_s["dram"][dtype] == pytest.approx(
            3 * 2 * 2**20 / sorted(c.samples[f"add_{dtype}_{2 * 2**20}_s"])[1])
        assert c.kind_bandwidth_bytes_per_s["cache"][dtype] == pytest.approx(
            3 * 256 * 2**10 / sorted(c.samples[f"add_{dtype}_{256 * 2**10}_s"])[1])
    assert "depthwise 3x3: 2x32x16" in c.method and "three 2 MiB tensors" in c.method


def test_a_layer_meets_the_roof_of_its_kind_and_where_its_tensors_live() -> None:
    c = rl.Ceilings("cpu", "cpu", peak_flops_per_s={"fp32": 400.0}, bandwidth_bytes_per_s=10.0,
                    kind_flops_per_s={"conv3x3": {"fp32": 400.0}, "depthwise": {"fp32": 20.0}},
                    kind_bandwidth_bytes_per_s={"dram": {"fp32": 8.0}, "cache": {"fp32": 50.0}})
    assert c.kind_roof("depthwise", "fp32") == (20.0, 10.0)  # DRAM: the copy's 10, higher than the add's 8
    assert c.kind_roof("depthwise", "fp32", cache_resident=True) == (20.0, 50.0)
    assert c.kind_roof("conv1x1", "fp32") == (400.0, 10.0)  # a kind not measured: the whole roof
    best = rl.best_of([c, dataclasses.replace(c, kind_flops_per_s={"depthwise": {"fp32": 30.0}})])
    assert best.kind_flops_per_s == {"conv3x3": {"fp32": 400.0}, "depthwise": {"fp32": 30.0}}


def test_ceilings_measured_without_roofs_per_kind_are_stale(cpu_ceilings: rl.Ceilings) -> None:
    from benchlib.roofline.cache import stale_reason

    older = dataclasses.replace(cpu_ceilings, kind_flops_per_s={})
    assert "without roofs per kind of operation" in stale_reason(older, torch.device("cpu"))


def test_load_ceilings_refuses_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        rl.load_ceilings([tmp_path / "nope"])


# ----------------------------------------------------------------------------------------------------------
# GPU
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_ceilings_every_dtype_the_gpu_has_and_tf32_flag_restored() -> None:
    before = torch.backends.cuda.matmul.allow_tf32
    c = rl.measure_ceilings("cuda", matmul_size=4096, copy_bytes=256 * 2**20, repeats=3, warmup=1)
    assert torch.backends.cuda.matmul.allow_tf32 == before
    assert c.device == f"cuda:{torch.cuda.current_device()}"
    assert c.device_name == torch.cuda.get_device_name()
    ampere_on = torch.cuda.get_device_capability() >= (8, 0)  # a T4 or V100 has no TF32 and no native bf16
    expected = {"fp32", "fp16", "tf32", "bf16"} if ampere_on else {"fp32", "fp16"}
    assert set(c.peak_flops_per_s) == expected
    assert set(c.skipped_dtypes) == {"fp32", "tf32", "fp16", "bf16"} - expected
    assert all(_positive_finite(v) for v in c.peak_flops_per_s.values())
    assert _positive_finite(c.bandwidth_bytes_per_s)
    assert all(len(v) == 3 for v in c.samples.values())
    # tensor-core half precision outruns plain fp32 on every GPU that has tensor cores
    if torch.cuda.get_device_capability() >= (8, 0):
        assert c.peak_flops_per_s["fp16"] > c.peak_flops_per_s["fp32"]


def test_best_of_keeps_the_highest_median_per_figure():
    from benchlib.roofline import best_of

    a = rl.Ceilings("cpu", "cpu", peak_flops_per_s={"fp32": 100.0, "bf16": 300.0}, bandwidth_bytes_per_s=20.0)
    b = rl.Ceilings("cpu", "cpu", peak_flops_per_s={"fp32": 150.0, "bf16": 250.0}, bandwidth_bytes_per_s=10.0)
    best = best_of([a, b])
    assert best.peak_flops_per_s == {"fp32": 150.0, "bf16": 300.0}
    assert best.bandwidth_bytes_per_s == 20.0
    assert best.ridge_point_flops_per_byte["fp32"] == 7.5
    assert best.attempts == 2


def test_cudas_conv_roof_is_a_1x1_one_and_a_3x3_roof_is_measured_again(monkeypatch) -> None:
    """cuDNN may run a 3x3 stride-1 convolution as Winograd (up to 2.25x fewer multiplies than counted), which
    would lift the roof above what a layer can reach: on CUDA the conv roof is a 1x1 convolution's (implicit
    GEMM, no shortcut), and ceilings kept from a 3x3 one are stale there. The 1x1 is timed here on the CPU."""
    from fakes import A100_SXM, fake_cuda

    from benchlib.roofline.cache import stale_reason

    assert rl_ceilings.CONV_KERNEL == {"cpu": 3, "cuda": 1, "mps": 3}
    seconds, _ = rl_ceilings._measure_conv("fp32", (2, 32, 16), torch.device("cpu"), 2, 1, kernel=1)
    assert len(seconds) == 2 and all(_positive_finite(v) for v in seconds)
    assert rl_ceilings.conv_flops(2, 32, 16, 1) == 2 * 2 * 32 * 32 * 16 * 16
    fake_cuda(monkeypatch, A100_SXM)
    cuda = torch.device("cuda", 0)
    old = rl.Ceilings(device="cuda:0", device_name=torch.cuda.get_device_name(0), peak_flops_per_s={"fp32": 2e13},
                      bandwidth_bytes_per_s=2e12, conv_flops_per_s={"fp32": 2e13}, conv_kernel=3)
    assert "a 3x3 one's, not a 1x1" in stale_reason(old, cuda)
    assert "3x3" not in (stale_reason(dataclasses.replace(old, conv_kernel=1), cuda) or "")
