"""The GPU acceptance script: its plumbing on the CPU (every check reports a verdict, the JSON holds them), and
every judgement it makes (``benchmarks/gpu_judges.py``) fed a wrong figure and a right one, with the ranges and
sizes chosen from facts of GPUs described by the shared fakes."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import yaml
from fakes import A100_MIG_1G, GIB, H100_PCIE, H100_SXM, T4, FakeGpu, fake_cuda

from benchlib.env.gpu import GpuFacts, gpu_facts
from benchlib.roofline.datasheet import datasheet_for, slice_datasheet

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def acceptance():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports its sibling gpu_judges.py, as it does when run
    spec = importlib.util.spec_from_file_location("gpu_acceptance", BENCHMARKS / "gpu_acceptance.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_acceptance"] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))
        sys.modules.pop("gpu_acceptance", None)
        sys.modules.pop("gpu_judges", None)


@pytest.fixture(scope="module")
def judges(acceptance):
    return sys.modules["gpu_judges"]


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


# ---------------------------------------------------------------- the ranges: family and board, MIG slices scaled

A100_40_SXM = FakeGpu("NVIDIA A100-SXM4-40GB", (8, 0), 39.4)
A100_40_PCIE = FakeGpu("NVIDIA A100-PCIE-40GB", (8, 0), 39.4)
H100_NVL = FakeGpu("NVIDIA H100 NVL", (9, 0), 93.1)
A10G = FakeGpu("NVIDIA A10G", (8, 6), 22.0)
L4 = FakeGpu("NVIDIA L4", (8, 9), 22.0)
A100_MIG_3G = FakeGpu("NVIDIA A100-SXM4-40GB MIG 3g.20gb", (8, 0), 19.5)
A100_MIG_CI = FakeGpu("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", (8, 0), 19.5)  # a compute instance in a slice
A30_MIG = FakeGpu("NVIDIA A30 MIG 1g.6gb", (8, 0), 5.8)


def _sheets(judges, monkeypatch, *gpus: FakeGpu) -> list[tuple[dict | None, str]]:
    """What the acceptance run judges each GPU against, from the facts torch gives (as faked)."""
    fake_cuda(monkeypatch, *gpus)
    return [judges.sheet_for(gpu_facts(i)) for i in range(len(gpus))]


def test_rentable_parts_get_their_own_familys_and_boards_datasheet(judges, monkeypatch):
    found = _sheets(judges, monkeypatch, A100_40_SXM, A100_40_PCIE, H100_NVL, A10G, H100_PCIE, H100_SXM, T4, L4)
    assert [sheet["name"] for sheet, _ in found] == [
        "NVIDIA A100 (SXM4 40GB)", "NVIDIA A100 (PCIe 40GB)", "NVIDIA H100 (NVL)", "NVIDIA A10G",
        "NVIDIA H100 (PCIe)", "NVIDIA H100 (SXM5)", "NVIDIA T4", "NVIDIA L4"]
    assert found[0][0]["bandwidth_bytes_per_s"] == pytest.approx(1555e9), "40GB HBM2, not the 80GB's 2,039 GB/s"
    assert found[2][0]["peak_flops_per_s"]["bf16"] == pytest.approx(835.5e12), "dense: half the 1,671 with sparsity"


def test_a_pcie_board_never_gets_sxm_figures(judges, monkeypatch):
    """The board decides with the name: a name the SXM pattern would take ("NVIDIA H100") read as PCIe gets none."""
    assert datasheet_for("NVIDIA H100")["name"] == "NVIDIA H100 (SXM5)"
    assert datasheet_for("NVIDIA H100", form="pcie") is None
    assert datasheet_for("NVIDIA H100 PCIe", form="sxm") is None
    for (sheet, _), gpu in zip(_sheets(judges, monkeypatch, A100_40_PCIE, H100_PCIE, H100_NVL),
                               (A100_40_PCIE, H100_PCIE, H100_NVL)):
        assert sheet["form"] == "pcie" == GpuFacts(0, gpu.name, gpu.capability, 1, 1).form


def test_a_mig_slice_is_judged_against_its_parents_figures_scaled_by_its_share(judges, monkeypatch):
    (one, why_one), (three, _) = _sheets(judges, monkeypatch, A100_MIG_1G, A100_MIG_3G)
    full = datasheet_for("NVIDIA A100-SXM4-40GB")
    assert one["peak_flops_per_s"]["fp32"] == pytest.approx(full["peak_flops_per_s"]["fp32"] / 7)
    assert one["bandwidth_bytes_per_s"] == pytest.approx(full["bandwidth_bytes_per_s"] / 8)
    assert three["peak_flops_per_s"]["tf32"] == pytest.approx(full["peak_flops_per_s"]["tf32"] * 3 / 7)
    assert three["bandwidth_bytes_per_s"] == pytest.approx(full["bandwidth_bytes_per_s"] * 4 / 8)
    assert "1/7" in why_one and "1/8" in why_one
    assert judges.judge_roof("fp32", 2.4e12, one).passed is True  # 86% of a 1g slice's 2.79 TFLOP/s
    assert judges.judge_roof("fp32", 17e12, one).passed is False, "the whole A100's roof: not a 1g slice's"
    assert judges.judge_roof("bandwidth", 1.4e12, three).passed is False, "the whole part's bandwidth on 4/8 of it"
    h100_slice, _ = slice_datasheet("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "sxm")
    assert h100_slice["bandwidth_bytes_per_s"] == pytest.approx(3.35e12 / 2)


def test_a_slice_whose_share_or_parent_is_unknown_is_not_judged_and_says_why(judges, monkeypatch):
    (ci, why_ci), (a30, why_a30) = _sheets(judges, monkeypatch, A100_MIG_CI, A30_MIG)
    assert ci is None and "does not state" in why_ci
    assert a30 is None and "NVIDIA A30" in why_a30
    check = judges.judge_roof("fp32", 5e12, ci, why_ci)
    assert check.passed is None and check.detail == why_ci
    unknown, why = _sheets(judges, monkeypatch, FakeGpu("NVIDIA Some New Part", (10, 0), 90.0))[0]
    assert unknown is None and "no datasheet" in why


# ---------------------------------------------------------------- sizes from free memory

def _floor(model: str, image_px: int, batch: int) -> float:
    """A linear floor like nets/memory_floor.py's: resnet50 at 224 px 80 MiB a sample, resnet18 40 MiB."""
    per_sample = {"resnet50": 80, "resnet18": 40}[model] * 2**20 * (image_px / 224) ** 2
    return 200 * 2**20 + batch * per_sample


def _fit(judges, monkeypatch, gpu: FakeGpu, sizes=None):
    fake_cuda(monkeypatch, gpu)
    return judges.fit_sizes(sizes or judges.Sizes(), gpu_facts(0), _floor)


def test_sizes_are_the_issues_where_the_gpu_has_room(judges, monkeypatch):
    sizes, why = _fit(judges, monkeypatch, H100_SXM)
    assert (sizes.model, sizes.batch, sizes.isolation_batches) == ("resnet50", 128, (256, 16))
    assert sizes.copy_bytes == 2 * GIB and sizes.matmul == 8192
    assert any("resnet50 batch 128" in line for line in why)


@pytest.mark.parametrize("gpu", [A100_MIG_1G, FakeGpu("NVIDIA GeForce RTX 3050 Laptop GPU", (8, 6), 4.0),
                                 FakeGpu("Tesla T4", (7, 5), 15.0, free_gib=3.0)], ids=["mig-1g", "laptop", "busy-t4"])
def test_sizes_shrink_to_what_a_small_or_busy_gpu_holds(judges, monkeypatch, gpu):
    sizes, why = _fit(judges, monkeypatch, gpu)
    budget = gpu.free_bytes * judges.WORK_SHARE
    assert sizes.batch < 128 and _floor(sizes.model, sizes.image_px, sizes.batch) <= budget
    larger = [b for b in judges.BATCHES if sizes.batch < b <= 128]
    assert all(_floor(sizes.model, sizes.image_px, b) > budget for b in larger), "the largest batch that fits"
    big, small = sizes.isolation_batches
    assert big < 256 and small == big // 16 and _floor("resnet18", sizes.image_px, big) <= budget
    assert 2 * sizes.copy_bytes <= gpu.free_bytes * 0.5
    assert any(f"batch {sizes.batch}" in line and "asked resnet50 batch 128" in line for line in why)


def test_where_no_batch_fits_the_small_model_is_tried_and_the_output_says_so(judges, monkeypatch):
    sizes, _ = _fit(judges, monkeypatch, FakeGpu("NVIDIA Tiny", (8, 6), 1.0, free_gib=0.7))
    assert (sizes.model, sizes.batch) == ("resnet18", 2), "resnet50 fits no batch in 0.28 GiB; resnet18 does"
    sizes, why = _fit(judges, monkeypatch, FakeGpu("NVIDIA Tiny", (8, 6), 1.0, free_gib=0.3))
    assert (sizes.model, sizes.batch) == ("resnet18", 2)
    assert any("expect out of memory" in line for line in why)
    assert any("free memory" in line for line in why), "the ceilings' buffers cannot fit either: said, not raised"


def test_sizes_follow_the_projects_own_memory_floor(acceptance, judges, monkeypatch):
    floor = acceptance.fp32_floor_bytes  # nets/memory_floor.py's, counted on the CPU
    fake_cuda(monkeypatch, FakeGpu("NVIDIA Small", (8, 6), 1.0, free_gib=0.3))
    sizes, _ = judges.fit_sizes(judges.Sizes(model="resnet18", batch=256, image_px=32), gpu_facts(0), floor)
    budget = 0.3 * GIB * judges.WORK_SHARE
    assert sizes.batch < 256 and floor("resnet18", 32, sizes.batch) <= budget
    assert floor("resnet18", 32, judges.BATCHES[judges.BATCHES.index(sizes.batch) - 1]) > budget


# ---------------------------------------------------------------- the step timer on every GPU

def test_the_step_timer_is_timed_on_every_gpu_with_another_one_current(acceptance, monkeypatch):
    assert acceptance.timer_plan(1) == [(0, 0)]
    assert acceptance.timer_plan(3) == [(0, 1), (1, 2), (2, 0)]
    fake_cuda(monkeypatch, T4, A100_MIG_1G, H100_SXM)
    timed = []
    monkeypatch.setattr(acceptance, "_timer_on", lambda ctx, device, current: timed.append((str(device), str(current))))
    ctx = acceptance.Context(torch.device("cuda:1"), acceptance.Sizes(), None, "", None)
    acceptance.check_step_timer(ctx)
    assert timed == [("cuda:0", "cuda:1"), ("cuda:1", "cuda:2"), ("cuda:2", "cuda:0")], "every GPU, not only the asked"


def test_the_memory_floor_check_trains_under_the_studys_backend_flags(acceptance, monkeypatch):
    """The allocator's peak is compared with the floor only for steps run as a study runs them: inside
    ``configuration`` (cuDNN's autotuner and TF32 as the precision sets them), whose workspaces count."""
    from contextlib import contextmanager

    fake_cuda(monkeypatch, H100_SXM)
    inside: list[str] = []
    steps: list[str | None] = []

    @contextmanager
    def configuration(device, settings):
        inside.append(settings.knobs.precision)
        try:
            yield
        finally:
            inside.pop()

    monkeypatch.setattr(acceptance, "configuration", configuration)
    monkeypatch.setattr(acceptance, "fresh_state", lambda device: None)
    monkeypatch.setattr(acceptance, "_trainer", lambda ctx, precision="fp32": (None, None, None))
    monkeypatch.setattr(acceptance, "train_step", lambda t, x, y: steps.append(inside[-1] if inside else None))
    monkeypatch.setattr(acceptance, "synchronize", lambda device: None)
    monkeypatch.setattr(acceptance, "training_floor_bytes", lambda *args: 100)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 200)
    ctx = acceptance.Context(torch.device("cuda:0"), acceptance.Sizes(), None, "", None)
    checks = acceptance.check_memory_floor(ctx)
    assert steps == ["fp32"] * 3 + ["amp_fp16"] * 3, "every step inside the precision's own configuration"
    assert [c.name.endswith(f"({p})") for c, p in zip(checks, ("fp32", "amp_fp16"))] == [True, True]


def test_on_a_mig_slice_the_run_is_judged_and_sized_for_the_slice(acceptance, monkeypatch):
    fake_cuda(monkeypatch, A100_MIG_1G)
    monkeypatch.setattr(acceptance, "fp32_floor_bytes", _floor)
    ctx = acceptance._context(torch.device("cuda:0"), False, None)
    assert ctx.sheet["name"] == "NVIDIA A100 (SXM4 40GB) MIG 1g.5gb"
    assert ctx.sizes.batch < 128 and ctx.notes[0] == f"ranges: {ctx.sheet_why}"
    assert any(f"resnet50 batch {ctx.sizes.batch}" in note for note in ctx.notes), "the output says what was chosen"


# ---------------------------------------------------------------- each judgement can fail (issue 24, item 7)

def test_a_roof_is_judged_against_its_familys_datasheet_and_can_fail(judges):
    h100_pcie, t4 = datasheet_for("NVIDIA H100 PCIe"), datasheet_for("Tesla T4")
    assert judges.judge_roof("fp32", 45e12, h100_pcie).passed is True  # 88% of its 51 TFLOP/s
    assert judges.judge_roof("fp32", 60e12, h100_pcie).passed is False, "above the datasheet: a measuring error"
    assert judges.judge_roof("fp32", 20e12, h100_pcie).passed is False, "far under its roof"
    assert judges.judge_roof("bandwidth", 3.0e12, h100_pcie).passed is False, "SXM's bandwidth on a PCIe part"
    assert judges.judge_roof("bandwidth", 1.7e12, h100_pcie).passed is True
    assert judges.judge_roof("tf32", 50e12, t4).passed is None, "a T4's sheet states no TF32: not judged"
    assert judges.judge_roof("fp32", 23.2e12, datasheet_for("NVIDIA A10G")).passed is True, "SGEMM's 66% on GA102"


def test_strict_fp32_against_tf32_is_judged_by_the_familys_own_datasheet_ratio(judges):
    l4, a100, a10g = datasheet_for("NVIDIA L4"), datasheet_for("NVIDIA A100-SXM4-80GB"), datasheet_for("NVIDIA A10G")
    assert judges.judge_strict_fp32(20e12, 40e12, l4).passed is True, "an L4's 0.50 by its datasheet"
    assert judges.judge_strict_fp32(40e12, 41e12, l4).passed is False, "TF32 ran for strict fp32"
    assert judges.judge_strict_fp32(18e12, 140e12, a100).passed is True
    assert judges.judge_strict_fp32(18e12, 60e12, a100).passed is False, "0.30 on an A100: TF32 is not 8x fp32"
    assert judges.judge_strict_fp32(30e12, 31e12, datasheet_for("NVIDIA A10")).passed is False
    assert judges.judge_strict_fp32(23e12, 34e12, a10g).passed is None, "TF32 no faster than fp32: cannot tell"
    unknown = judges.judge_strict_fp32(20e12, 40e12, None, "no datasheet for NVIDIA X")
    assert unknown.passed is None and unknown.detail == "no datasheet for NVIDIA X"


def test_the_step_timer_nhwc_uuid_and_scaler_judgements_can_fail(judges):
    assert judges.judge_step_timer(1.00, 1.01, "cuda:1").passed is True
    wrong_stream = judges.judge_step_timer(0.05, 1.0, "cuda:1 (cuda:0 current)")  # launch times, not step times
    assert wrong_stream.passed is False and "cuda:1" in wrong_stream.name
    assert judges.judge_nhwc(["nchwToNhwcKernel", "nhwc_to_nchw_kernel", "elementwise_copy_nhwc"]).passed is False
    assert judges.judge_nhwc(["sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_nhwckrsc_nhwc"]).passed is True
    behind_transposes = ["nchwToNhwcKernel", "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_nhwckrsc_nhwc",
                         "nhwcToNchwKernel"]
    assert judges.judge_nhwc(behind_transposes).passed is False, "an NCHW model cuDNN runs as NHWC is no pass"
    assert judges.judge_weights_channels_last(False).passed is False
    assert judges.judge_weights_channels_last(True).passed is True
    assert judges.judge_uuid("GPU-aaa", "GPU-bbb").passed is False
    assert judges.judge_uuid("aaa", "GPU-AAA").passed is True
    assert judges.judge_uuid("aaa", None).passed is None
    assert judges.judge_nvml_handle(0, ["GPU-aaa"]).passed is False
    assert judges.judge_nvml_handle(1, []).passed is True
    assert judges.judge_scaler(32768.0, 1, 10, True).passed is True
    assert judges.judge_scaler(32768.0, 1, 10, False).passed is False, "NaN weights 'moved' but are wrong"
    assert judges.judge_scaler(float("inf"), 1, 10, True).passed is False
    halved_each_step = judges.scaler_skips(65536.0, 65536.0 * 0.5**10, 2000, 10)
    assert halved_each_step == 10 and judges.judge_scaler(64.0, halved_each_step, 10, True).passed is False
    assert judges.judge_scaler(0.5, judges.scaler_skips(65536.0, 0.5, 2000, 40), 40, True).passed is False
    assert judges.scaler_skips(65536.0, 1024.0, 100, 200) is None, "it may have grown: halvings do not count"
    assert judges.judge_scaler(1024.0, None, 200, True).passed is None, "cannot tell: not a pass"
    assert judges.judge_scaler(1024.0, None, 200, False).passed is False
    assert judges.judge_memory_floor(2e9, 1_500_000_000).passed is False, "a floor above the real peak"
    assert judges.judge_memory_floor(2e9, 2_600_000_000).passed is True


def test_the_sync_judgement_counts_only_synchronizations_fp16_scaler_path_included(judges):
    sync = "called a synchronizing CUDA operation"
    assert judges.judge_syncs("fp32", []).passed is True
    assert judges.judge_syncs("fp32", ["some UserWarning about a deprecated argument"]).passed is True
    notice = ("Synchronization debug mode is a prototype feature and does not yet detect all synchronizing "
              "operations")  # CUDA's own notice on switching the mode on: counted as a sync on an H200 before
    assert judges.judge_syncs("fp32", [notice]).passed is True
    scaler = judges.judge_syncs("amp_fp16", [sync])  # a GradScaler reading its inf check on the host each step
    assert scaler.passed is False and scaler.figure == 1 and "synchronizing" in scaler.detail
    assert judges.judge_syncs("amp_bf16", [sync, sync]).figure == 2


def test_the_amp_judgement_can_fail_and_expects_less_where_half_precision_is_only_twice_fp32(judges):
    a100, a10g = datasheet_for("NVIDIA A100-SXM4-80GB"), datasheet_for("NVIDIA A10G")
    assert judges.judge_amp("amp_fp16", 0.040, 0.100, a100).passed is True
    assert judges.judge_amp("amp_fp16", 0.070, 0.100, a100).passed is False
    assert judges.judge_amp("amp_bf16", 0.070, 0.100, a10g).passed is True, "tensor cores at 2x fp32: 0.8"
    assert judges.judge_amp("amp_bf16", 0.98, 1.0, a10g).passed is False, "autocast that changed nothing"
    assert judges.judge_amp("amp_fp16", 0.98, 1.0, None).passed is False


def test_the_memory_isolation_and_compile_judgements_can_fail(judges):
    assert judges.judge_memory_isolation(300 * 2**20, 200 * 2**20, 256, 16).passed is False, "the large one's cache"
    assert judges.judge_memory_isolation(204 * 2**20, 200 * 2**20, 256, 16).passed is True
    assert judges.judge_compile_speed(0.013, 0.010).passed is False
    assert judges.judge_compile_speed(0.008, 0.010).passed is True
    assert judges.judge_compile_fell_back(True).passed is False
    assert judges.judge_compile_fell_back(False).passed is True
    assert judges.judge_recompiles(1, 10).passed is False and judges.judge_recompiles(0, 10).passed is True
    assert judges.judge_fallbacks(2, 10).passed is False and judges.judge_fallbacks(0, 10).passed is True


def test_the_telemetry_judgements_can_fail_and_skip_what_nvml_does_not_report(judges):
    assert judges.judge_utilization(45.0).passed is False
    assert judges.judge_utilization(97.0).passed is True
    assert judges.judge_utilization(None).passed is None, "a MIG slice: NVML has no utilization"
    assert judges.judge_power(60.0, 60.0, 400.0).passed is False, "no more than idle while training"
    assert judges.judge_power(450.0, 60.0, 400.0).passed is False, "over the enforced limit"
    assert judges.judge_power(300.0, 60.0, 400.0).passed is True
    assert judges.judge_power(300.0, 60.0, None).passed is None
    assert judges.judge_energy(3000.0, 300.0, 15.0, "nvml-counter").passed is False, "0.67 of power x time"
    assert judges.judge_energy(4400.0, 300.0, 15.0, "nvml-counter").passed is True
    assert judges.judge_energy(4500.0, 300.0, 15.0, "power-x-time").passed is None, "1 by construction"


def test_the_latency_and_timm_judgements_can_fail(judges):
    assert judges.judge_latency(0.0050, 0.0040).passed is False, "host clock 25% over the events"
    assert judges.judge_latency(0.0041, 0.0040).passed is True
    assert judges.judge_timm("train (amp_fp16)", 500.0, 1000.0).passed is False
    assert judges.judge_timm("train (amp_fp16)", 905.0, 1000.0).passed is False, "10% behind timm fails now"
    assert judges.judge_timm("train (amp_bf16)", 970.0, 1000.0).passed is True
    assert judges.judge_timm("infer (amp_bf16)", 1000.0, 950.0).passed is True
    assert judges.judge_timm("infer (amp_bf16)", 1000.0, None).passed is False, "timm gave no figure"


def _set_values(cmd: list[str]) -> dict[str, str]:
    return dict(cmd[i + 1].split("=", 1) for i, arg in enumerate(cmd) if arg == "--set")


def test_timm_is_compared_like_with_like_in_fresh_interleaved_processes(acceptance, tmp_path):
    """Both sides run timm's own model (benchlib as ``timm:NAME``), at one batch, image size, precision
    (bf16 and fp16), channels_last and step counts, each in fresh processes alternating A B A B."""
    out = tmp_path / "t.csv"
    for precision, dtype in (("amp_bf16", "bfloat16"), ("amp_fp16", "float16")):
        timm = acceptance.timm_command(Path("benchmark.py"), "resnet50", 128, 224, precision, out)
        ours = acceptance.benchlib_command("resnet50", torch.device("cuda", 0), 128, 224, precision)
        assert timm[timm.index("--model") + 1] == "resnet50" and ours[ours.index("--model") + 1] == "timm:resnet50"
        assert timm[timm.index("-b") + 1] == ours[ours.index("--batch-size") + 1] == "128"
        assert timm[timm.index("--img-size") + 1] == ours[ours.index("--image-size") + 1] == "224"
        assert timm[timm.index("--amp-dtype") + 1] == dtype and f"precision={precision}" in ours
        assert "--channels-last" in timm and "memory_format=channels_last" in ours
        assert timm[timm.index("--num-bench-iter") + 1] == ours[ours.index("--steps") + 1]
        assert timm[timm.index("--num-warm-iter") + 1] == _set_values(ours)["warmup_steps"]
    assert acceptance.interleaved(2) == ["timm", "benchlib", "timm", "benchlib"]


def test_timm_and_benchlib_train_with_the_same_effective_settings(acceptance):
    """Not their flags: what each side's step would run with. timm's benchmark.py builds its optimizer with
    ``create_optimizer_v2(model, opt=..., lr=...)`` alone and trains AMP without a scaler; benchlib's side, from
    the settings its command sets, builds the optimizer and scaler its step uses. Same class, momentum,
    Nesterov, weight decay and learning rate, torch's own kernels, no scaler, and the same zero-initialised
    last batch norms of timm's model."""
    timm = pytest.importorskip("timm")
    from timm.optim import create_optimizer_v2

    from benchlib.engine.step import Trainer
    from benchlib.nets.user_models import build_user_model
    from benchlib.spec.settings import settings_from_mapping

    theirs_model = timm.create_model("resnet18", num_classes=10)
    theirs = create_optimizer_v2(theirs_model, opt="sgd", lr=1e-4)  # benchmark.py's very call
    for precision in ("amp_fp16", "amp_bf16"):
        cmd = acceptance.benchlib_command("resnet18", torch.device("cuda", 0), 32, 64, precision)
        values = {k: v for k, v in _set_values(cmd).items() if k not in ("synthetic_classes",)}
        s = settings_from_mapping({k: yaml.safe_load(v) for k, v in values.items()}, "benchlib side")
        ours_model = build_user_model("timm:resnet18", 10)
        trainer = Trainer.of(ours_model, ours_model, s, torch.device("cuda"))  # nothing runs: it is built
        assert type(trainer.optimizer) is type(theirs)
        for key in ("lr", "momentum", "nesterov", "weight_decay", "dampening"):
            assert trainer.optimizer.defaults.get(key) == theirs.defaults.get(key), (precision, key)
        assert _kernels_on_cuda(trainer.optimizer) == _kernels_on_cuda(theirs) == "foreach"
        assert trainer.scaler is None, "timm's benchmark.py trains AMP unscaled: so does this side"
        assert _last_norms(ours_model) == _last_norms(theirs_model) == {0.0}, "zero-initialised last batch norms"


def _kernels_on_cuda(opt: torch.optim.Optimizer) -> str:
    """The kernels an optimizer runs on CUDA tensors: torch resolves ``foreach=None`` to foreach there."""
    if opt.defaults.get("fused"):
        return "fused"
    return "foreach" if opt.defaults.get("foreach") in (None, True) else "for_loop"


def _last_norms(model: torch.nn.Module) -> set[float]:
    """The summed weights of each residual block's last batch norm (a BasicBlock's bn2, a Bottleneck's bn3)."""
    blocks = [m for m in model.modules() if type(m).__name__ in ("BasicBlock", "Bottleneck")]
    return {float((b.bn3 if hasattr(b, "bn3") else b.bn2).weight.abs().sum()) for b in blocks} if blocks else {-1.0}


def test_the_per_layer_judgement_can_fail(judges):
    above = judges.AboveRoof
    winograd = above("layer2.0.conv2", "forward", 1.25, ("sm80_xmma_fprop_winograd_f32f32_f32", "copy_kernel"))
    gemm = above("layer2.0.conv2", "forward", 1.25, ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32",))
    assert judges.judge_layers(0.82, 1.0, []).passed is True
    assert judges.judge_layers(1.30, 1.0, []).passed is False, "kernels counted twice: more than the step"
    assert judges.judge_layers(0.82, 1.2, []).passed is False, "a downsample credited with the main branch's FLOPs"
    assert judges.judge_layers(0.82, 1.0, [gemm] * 3).passed is False, "kernels credited to the wrong layer"
    assert judges.judge_layers(0.0, 1.0, []).passed is False, "no kernel attributed at all"
    assert judges.judge_layers(0.96, 1.0, [winograd] * 4).passed is True, "its own kernels are Winograd's"
    unexplained = judges.judge_layers(0.96, 1.0, [winograd] * 3 + [gemm])
    assert unexplained.passed is False and "implicit_gemm" in unexplained.detail, "a 3x3 shape is no evidence"
    too_far = above("layer2.0.conv2", "forward", 2.6, winograd.kernels)
    assert judges.judge_layers(0.96, 1.0, [too_far]).passed is False, "beyond what Winograd can explain"
    assert judges.tf32_kernels({("fc", "forward"): ["ampere_s1688gemm_128x128_ldg8_stages_32x1_nn"]}), "Ampere cuBLAS"
    assert not judges.tf32_kernels({("fc", "forward"): ["ampere_sgemm_128x64_nn", "ampere_h1688gemm_64x64_nn"]})
    leak = judges.tf32_kernels({("layer1.0.conv1", "backward"): ["sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32"],
                                ("fc", "forward"): ["ampere_sgemm_64x32_sliced1x4_tn"]})
    assert leak == ["layer1.0.conv1 backward: sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32"]
    assert judges.judge_layers(0.96, 1.0, [], leak).passed is False, "TF32 in strict fp32"


def test_the_side_stream_feed_judgement_can_fail(judges):
    assert judges.judge_device_feed(0.0, 6, 6).passed is True
    assert judges.judge_device_feed(3.5, 6, 6).passed is False, "a batch read before its copy ended"
    assert judges.judge_device_feed(0.0, 5, 6).passed is False, "a batch lost"
