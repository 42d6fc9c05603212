"""The GPU acceptance script: its plumbing on the CPU (every check reports a verdict, the JSON holds them)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_acceptance.py"


@pytest.fixture(scope="module")
def acceptance():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_acceptance"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules["gpu_acceptance"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the one-line answer is for machines without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_0(acceptance, capsys):
    assert acceptance.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no CUDA device" in out


@pytest.mark.slow
def test_every_check_gives_a_verdict_with_its_figure(acceptance, tmp_path, capsys):
    out = tmp_path / "acceptance.json"
    code = acceptance.main(["--allow-cpu", "--quick", "--out", str(out), "--device", "cpu"])
    report = json.loads(out.read_text())
    names = [c["name"] for c in report["checks"]]
    assert code == (0 if report["passed"] else 1)
    assert len(report["checks"]) >= len(acceptance.CHECKS), "at least one verdict per check"
    assert "step timer on cpu: sum of step_s / host clock" in names and "ceiling fp32" in names
    for c in report["checks"]:
        assert set(c) == {"name", "figure", "unit", "expected", "passed", "detail"}
        assert c["passed"] in (True, False, None) and c["expected"]
    judged = [c for c in report["checks"] if c["passed"] is not None]
    assert judged and all(c["figure"] is not None for c in judged)
    assert "checks not failed" in capsys.readouterr().out


# ---------------------------------------------------------------- each judgement can fail (issue 24, item 7)

def test_a_roof_is_judged_against_its_familys_datasheet_and_can_fail(acceptance):
    from benchlib.roofline.datasheet import datasheet_for

    h100_pcie, t4 = datasheet_for("NVIDIA H100 PCIe"), datasheet_for("Tesla T4")
    assert acceptance.judge_roof("fp32", 45e12, h100_pcie).passed is True  # 88% of its 51 TFLOP/s
    assert acceptance.judge_roof("fp32", 60e12, h100_pcie).passed is False, "above the datasheet: a measuring error"
    assert acceptance.judge_roof("fp32", 20e12, h100_pcie).passed is False, "far under its roof"
    assert acceptance.judge_roof("bandwidth", 3.0e12, h100_pcie).passed is False, "SXM's bandwidth on a PCIe part"
    assert acceptance.judge_roof("bandwidth", 1.7e12, h100_pcie).passed is True
    assert acceptance.judge_roof("tf32", 50e12, t4).passed is None, "a T4's sheet states no TF32: not judged"
    mig = acceptance.judge_roof("fp32", 5e12, datasheet_for("NVIDIA A100-SXM4-80GB MIG 1g.10gb"))
    assert mig.passed is None and "MIG" in mig.detail


def test_the_step_timer_nhwc_uuid_and_scaler_judgements_can_fail(acceptance):
    assert acceptance.judge_step_timer(1.00, 1.01, "cuda:1").passed is True
    wrong_stream = acceptance.judge_step_timer(0.05, 1.0, "cuda:1")  # launch times, not step times
    assert wrong_stream.passed is False and "cuda:1" in wrong_stream.name
    assert acceptance.judge_nhwc(["nchwToNhwcKernel", "nhwc_to_nchw_kernel", "elementwise_copy_nhwc"]).passed is False
    assert acceptance.judge_nhwc(["sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_nhwckrsc_nhwc"]).passed is True
    assert acceptance.judge_uuid("GPU-aaa", "GPU-bbb").passed is False
    assert acceptance.judge_uuid("aaa", "GPU-AAA").passed is True
    assert acceptance.judge_uuid("aaa", None).passed is None
    assert acceptance.judge_scaler(65536.0, 0, 10).passed is False, "every step skipped: weights never moved"
    assert acceptance.judge_scaler(float("inf"), 1, 10).passed is False
    assert acceptance.judge_scaler(32768.0, 1, 10).passed is True
    assert acceptance.judge_memory_floor(2e9, 1_500_000_000).passed is False, "a floor above the real peak"
    assert acceptance.judge_memory_floor(2e9, 2_600_000_000).passed is True
