"""The GPU session script (``benchmarks/gpu_session.py``, its plumbing in ``gpu_harness.py``): on the CPU in a
subprocess (one JSON line a finding, every section present, the watch file, exit 0, a section that raises logged
and the next one run), and its pure parts: the idle gaps of a device timeline, the gap factorial's cells and
effects, the batch the preflight's refusal names, NVML's clock-event reasons, the watch on a fake NVML, a command
killed at its timeout and a section stopped past its budget."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from fakes import GIB, FakeGpu, FakeNvml, fake_cuda

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPT = BENCHMARKS / "gpu_session.py"
SECTIONS = ("predict", "fused_sgd", "timm_gap", "conv_kernels", "cli_gpu_amp", "small_memory", "bf16_profile")


@pytest.fixture(scope="module")
def session():
    sys.path.insert(0, str(BENCHMARKS))  # the script imports its sibling gpu_judges.py, as it does when run
    spec = importlib.util.spec_from_file_location("gpu_session", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_session"] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))
        for name in ("gpu_session", "gpu_harness", "gpu_judges"):
            sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def harness(session):
    """The session's plumbing (``benchmarks/gpu_harness.py``), as the script imported it."""
    return sys.modules["gpu_harness"]


def _run(out: Path, *args: str, fail: str = "") -> tuple[subprocess.CompletedProcess, list[dict]]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(BENCHMARKS.parent))
    env["BENCHLIB_GPU_SESSION_FAIL"] = fail
    done = subprocess.run([sys.executable, str(SCRIPT), "--allow-cpu", "--quick", "--device", "cpu", "--out",
                           str(out), *args], capture_output=True, text=True, env=env, timeout=300)
    lines = (out / "findings.jsonl").read_text().splitlines() if (out / "findings.jsonl").exists() else []
    return done, [json.loads(line) for line in lines]  # each line valid JSON on its own


@pytest.mark.slow
def test_every_section_runs_on_the_cpu_and_leaves_its_findings(tmp_path):
    done, findings = _run(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    by_section = {s: [f for f in findings if f["section"] == s] for s in SECTIONS}
    for section, found in by_section.items():
        assert found, f"no finding of {section}"
        end = [f for f in found if f["finding"] == "section end"]
        assert len(end) == 1 and end[0]["outcome"] == "ok", (section, found[-3:])
    assert all(set(f) >= {"section", "finding", "t_s"} for f in findings)
    assert findings[-1]["finding"] == "end" and set(findings[-1]["outcome"]) == set(SECTIONS)

    fused = {f["optimizer"]: f for f in by_section["fused_sgd"] if f["finding"].startswith("weights after")}
    assert fused["for_loop again"]["bit_identical"], "the control: for_loop twice, bit for bit"
    assert fused["benchlib fused"]["bit_identical"] and fused["benchlib fused, allocator dirtied"]["bit_identical"]
    zeroed = [f for f in by_section["fused_sgd"] if f["finding"].startswith("momentum") and
              f["optimizer"].startswith("benchlib fused")]
    assert zeroed and all(f["buffers"] == f["of_params"] and f["nonzero"] == 0 for f in zeroed)
    skipped = [f for s in SECTIONS for f in by_section[s] if "skipped" in f]
    assert any(f["section"] == "small_memory" and f["skipped"].startswith("needs CUDA") for f in skipped)
    assert any(f["finding"] == "host syncs per fp16 step" and f["skipped"].startswith("needs CUDA") for f in skipped)

    cells = [f for f in by_section["timm_gap"] if f["finding"] == "cell"]
    assert {f["side"] for f in cells} == {"benchlib", "bare"} and all(f["median_ms"] > 0 for f in cells)
    convs = [f for f in by_section["conv_kernels"] if f["finding"] == "convolution"]
    assert convs and all(f["kernels"] and f["tflop_per_s"] > 0 for f in convs), [
        (f["shape"], f["kernels"], f["tflop_per_s"]) for f in convs]
    assert any(f["shape"].endswith("(the roof) 32ch 8px") and f["over_roof"] == 1.0 for f in convs)
    row = next(f for f in by_section["cli_gpu_amp"] if f["finding"] == "gpu-amp row")
    assert row["rc"] == 2 and row["stderr_lines"] == 1 and row["refusal"].startswith("benchlib: error:")
    killed = next(f for f in by_section["small_memory"] if f["finding"] == "ballast killed")
    assert killed["pid_alive"] is False

    watch = (tmp_path / "watch.jsonl").read_text().splitlines()
    assert watch == [] or all("no NVML" in json.loads(line) or "sm_clock_mhz" in json.loads(line) for line in watch)


@pytest.mark.slow
def test_a_section_that_raises_is_a_finding_and_the_next_one_runs(tmp_path):
    done, findings = _run(tmp_path, "--only", "fused_sgd,conv_kernels", fail="fused_sgd")
    assert done.returncode == 0, done.stderr[-2000:]
    error = [f for f in findings if f["section"] == "fused_sgd" and f["finding"] == "error"]
    assert len(error) == 1 and "injected" in error[0]["error"] and error[0]["where"]
    assert not [f for f in findings if f["section"] == "fused_sgd" and f["finding"].startswith("weights")]
    assert [f for f in findings if f["section"] == "conv_kernels" and f["finding"] == "convolution"]
    assert findings[-1]["outcome"] == {"fused_sgd": "error", "conv_kernels": "ok"}


def test_a_section_the_budget_cannot_hold_is_skipped_with_the_reason(session, tmp_path):
    assert session.main(["--allow-cpu", "--device", "cpu", "--budget-s", "0", "--out", str(tmp_path)]) == 0
    findings = [json.loads(line) for line in (tmp_path / "findings.jsonl").read_text().splitlines()]
    skipped = {f["section"]: f["skipped"] for f in findings if f["finding"] == "skipped"}
    assert set(skipped) == set(SECTIONS) and all(v.startswith("budget: ") for v in skipped.values())
    assert findings[-1]["outcome"] == dict.fromkeys(SECTIONS, "skipped")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the one-line answer is for machines without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_in_its_findings(session, capsys, tmp_path):
    assert session.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no CUDA device" in out
    (finding,) = [json.loads(line) for line in (tmp_path / "findings.jsonl").read_text().splitlines()]
    assert finding["section"] == "session" and finding["skipped"].startswith("no CUDA device")


def test_an_unknown_section_is_refused_in_one_line(session, capsys, tmp_path):
    assert session.main(["--only", "fused_sgd,timm", "--out", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "unknown section timm; allowed: predict, fused_sgd, timm_gap" in said


def test_idle_gaps_count_only_stretches_no_kernel_covers(session):
    kernels = [(0.0, 10.0, "a"), (12.0, 20.0, "b"), (5.0, 15.0, "c"), (40.0, 50.0, "d"), (53.0, 60.0, "e"),
               (100.0, 101.0, "f")]
    gaps, busy = session.idle_gaps(kernels, min_us=5.0)
    assert [(g.start_us, g.us, g.before, g.after) for g in gaps] == [(20.0, 20.0, "b", "d"), (60.0, 40.0, "e", "f")]
    assert busy == 20.0 + 10.0 + 7.0 + 1.0, "the 3 us between d and e is busy time's neighbour, not a gap"
    assert session.idle_gaps([]) == ([], 0.0)


def test_the_gap_factorial_holds_every_combination_and_each_sides_own_cell(session):
    full = session.gap_cells(["fp16", "bf16"], [True, False], full=True)
    assert len(full) == len(set(full)) == 3 * 2 * 2 * 2, "fp16 with and without a scaler, bf16 without"
    assert not [c for c in full if c.precision == "bf16" and c.scaler]
    assert set(session.NATIVE.values()) <= set(full)
    one_at_a_time = session.gap_cells(["bf16"], [True, False], full=False)
    own = session.natives(["bf16"], [True, False])
    assert own["benchlib"] in one_at_a_time and own["bare"] in one_at_a_time
    base = own["benchlib"]
    assert all(sum(getattr(c, f) != getattr(base, f) for f in session.FACTORS) == 1
               for c in one_at_a_time if c not in own.values())
    assert session.gap_cells(["fp16"], [None], full=True)[0].zero_init_last is None, "no timm: one init"


def test_each_factors_effect_is_the_geometric_mean_of_its_pairs(session):
    base = session.Cell("fp16", True, "fused", True, "nchw")
    cells = session.gap_cells(["fp16"], [True], full=True)
    medians = {}
    for cell in cells:  # foreach 10% slower, the bare loop 2x, the rest costs nothing
        ms = 10.0 * (1.1 if cell.optimizer == "foreach" else 1.0)
        medians[("benchlib", cell)] = ms
        medians[("bare", cell)] = 2 * ms
    effects = {(e["factor"], e["side"]): e for e in session.main_effects(medians)}
    assert effects[("optimizer", "benchlib")]["ratio"] == pytest.approx(1.1)
    assert effects[("optimizer", "bare")]["pairs"] == 4
    assert effects[("scaler", "benchlib")]["ratio"] == pytest.approx(1.0)
    assert effects[("side", "both")]["ratio"] == pytest.approx(2.0) and effects[("side", "both")]["pairs"] == 8
    assert ("precision", "benchlib") not in effects, "no bf16 cell: no pair"
    medians[("benchlib", replace(base, scaler=False, precision="bf16"))] = 5.0
    effects = {(e["factor"], e["side"]): e for e in session.main_effects(medians)}
    assert effects[("precision", "benchlib")]["ratio"] == pytest.approx(0.5), "bf16 against fp16 without a scaler"
    assert effects[("precision", "benchlib")]["pairs"] == 1


def test_the_allowed_batch_is_read_from_the_preflights_own_refusal(session, monkeypatch):
    from benchlib.errors import ConfigError
    from benchlib.nets.memory_floor import training_floor_bytes
    from benchlib.run.preflight import check_gpu_memory
    from benchlib.spec.settings import RunConfig, RunSettings

    fake_cuda(monkeypatch, FakeGpu("NVIDIA H100 80GB HBM3", (9, 0), 79.2, free_gib=15.0))  # as the ballast leaves it
    settings = RunSettings.of(dataset="synthetic", image_size=224, synthetic_classes=1000)
    with pytest.raises(ConfigError) as exc:  # resnet18: the session asks of resnet50, the line is the same
        check_gpu_memory([RunConfig("s", "cuda:0", "resnet18", 4096, settings)], "command line")
    fits = session._allowed_batch(str(exc.value))
    assert fits is not None and training_floor_bytes("resnet18", 224, 1000, fits, 4) <= 15 * GIB
    assert training_floor_bytes("resnet18", 224, 1000, fits + 1, 4) > 15 * GIB
    assert session._allowed_batch("benchlib: error: something else") is None


def test_clock_event_reasons_are_named_bit_by_bit(harness):
    table = {1: "GpuIdle", 4: "SwPowerCap", 8: "HwSlowdown"}
    assert harness.reason_names(4 | 8, table) == ["SwPowerCap", "HwSlowdown"]
    assert harness.reason_names(0, table) == []
    assert harness.reason_names(1 | 0x800, table) == ["GpuIdle", "0x800"], "a bit this pynvml does not name"
    real = harness.reason_table()
    assert real.get(4) == "SwPowerCap" and real.get(0x40) == "HwThermalSlowdown"


def test_the_watch_samples_each_gpu_into_its_file_with_the_section_running(harness, monkeypatch, tmp_path):
    import pynvml

    FakeNvml.two_boards().install(monkeypatch)  # the second board answers no power (NotSupported)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", lambda h: 4 | 0x40)
    watch = harness.Watch(tmp_path / "watch.jsonl", time.monotonic(), None, interval_s=0.01)
    watch.section = "timm_gap"
    time.sleep(0.2)
    watch.stop()
    lines = [json.loads(line) for line in (tmp_path / "watch.jsonl").read_text().splitlines()]
    samples = [r for r in lines if "sm_clock_mhz" in r]
    assert {r["gpu"] for r in samples} == {0, 1} and all(r["sm_clock_mhz"] == 1400 for r in samples)
    assert all(r["reasons"] == ["SwPowerCap", "HwThermalSlowdown"] for r in samples)
    assert {r["power_w"] for r in samples if r["gpu"] == 0} == {150.0}
    unreadable = [r for r in lines if "gpu_unreadable" in r]
    assert unreadable == [{"t_s": unreadable[0]["t_s"], "gpu": 1, "gpu_unreadable": "power",
                           "why": unreadable[0]["why"]}], "said once, then no longer asked"
    assert {r["power_w"] for r in samples if r["gpu"] == 1} == {None}
    summary = watch.summary("timm_gap")
    assert summary["samples"] >= 2 and summary["reasons_seen"] == ["HwThermalSlowdown", "SwPowerCap"]
    assert summary["temp_c_max"] == 61


def test_a_command_past_its_timeout_is_killed_with_its_group(harness):
    t0 = time.monotonic()
    done = harness.run_command([sys.executable, "-c", "import subprocess, sys, time; "
                                "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                                "print('started', flush=True); time.sleep(60)"], timeout_s=2)
    assert done.rc is None and "started" in done.stdout and time.monotonic() - t0 < 30


def test_a_section_past_its_budget_is_interrupted(harness):
    t0 = time.monotonic()
    with pytest.raises(harness.SectionOverrun):
        with harness.hard_stop(0.2):
            try:
                time.sleep(10)
            except Exception:  # a section's own handler does not keep it
                pytest.fail("SectionOverrun caught as an Exception")
    assert time.monotonic() - t0 < 5


def test_findings_are_strict_json(harness, tmp_path):
    findings = harness.FindingsFile(tmp_path / "f.jsonl", time.monotonic())
    findings.write({"section": "s", "finding": "f", "ratio": float("inf"), "nan": float("nan"), "shape": (1, 2),
                    "dtype": object()})
    findings.close()
    record = json.loads((tmp_path / "f.jsonl").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert record["ratio"] == "inf" and record["nan"] == "nan" and record["shape"] == [1, 2]


def test_the_rounds_that_fit_are_estimated_from_a_warm_block_not_the_cold_one(session):
    """A cell's first block autotunes cuDNN (here 60 s); the others take 1 s. 48 blocks a round at the slowest
    would never fit a second round in 5 minutes; at the warm median one does."""
    blocks = [(True, 60.0)] + [(i % 2 == 0, 1.0) for i in range(1, 48)]
    warm = session.warm_block_s(blocks)
    assert warm == 1.0 and 25.0 + warm * 48 < 300.0 < 25.0 + max(t for _, t in blocks) * 48
    assert session.warm_block_s([(True, 60.0)]) == 60.0, "nothing warm yet: the slowest stands in"
    assert session.warm_block_s([]) == 0.0


def test_each_round_reverses_the_cells_order_so_no_cell_always_runs_last(session):
    cells = ["fp16 a", "fp16 b", "bf16 a", "bf16 b"]
    assert session.round_order(cells, 0) == cells and session.round_order(cells, 1) == cells[::-1]
    assert {session.round_order(cells, r)[-1] for r in range(4)} == {"bf16 b", "fp16 a"}


def test_weights_are_judged_within_a_tolerance_not_bit_for_bit(session):
    """CUDA's fused SGD updates in double and rounds once: a few ulps from the for-loop kernels is a pass, a
    visible difference or a NaN is not; bit identity is said, not judged."""
    import torch

    b = [torch.linspace(-1, 1, 101), torch.full((3,), 0.5)]
    ulps = [torch.nextafter(t, torch.full_like(t, 2.0)) for t in b]
    near = session.compare_weights(ulps, b)
    assert near["within_tolerance"] and not near["bit_identical"] and near["finite"]
    far = session.compare_weights([b[0] * 1.001, b[1]], b)
    assert not far["within_tolerance"]
    bad = session.compare_weights([torch.full((101,), float("nan")), b[1]], b)
    assert not bad["finite"] and not bad["within_tolerance"]


def test_each_finding_carries_its_rule_and_verdict_and_the_session_ends_with_them(session):
    weights = {"finding": "weights after 3 steps against for_loop", "optimizer": "benchlib fused",
               "within_tolerance": True}
    assert session.verdict(weights) == {"rule": session.RULES[weights["finding"]][0], "passed": True}
    syncs = {"finding": "host syncs per fp16 step", "optimizer": "fused", "syncs": 2}
    assert session.verdict(syncs)["passed"] is False
    assert session.verdict({**syncs, "optimizer": "foreach"})["passed"] is None, "foreach is the control"
    assert session.verdict({"finding": "block", "median_ms": 3.0}) == {}, "informational: no verdict"
    lines = sys.modules["gpu_harness"].verdict_lines([("a: rule", True), ("b: rule", False), ("c: rule", None)])
    assert lines == ["PASS       a: rule", "FAIL       b: rule", "NOT JUDGED c: rule"]


# what a lent GPU's image lacks and benchlib's single configuration must not need (benchmarks/gpu_wheels.sh)
NOT_ON_THE_IMAGE = ("papermill", "nbconvert", "nbformat", "IPython", "optuna", "ipykernel", "jupyter_client")
BLOCKER = r"""
import runpy, sys
class _NotOnTheImage:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not on the GPU image)")
        return None
BLOCKED = set(sys.argv[1].split(","))
sys.meta_path.insert(0, _NotOnTheImage())
sys.argv = [sys.argv[0], *sys.argv[2:]]
runpy.run_module("benchlib", run_name="__main__")
"""


@pytest.mark.slow
def test_one_configuration_runs_without_what_the_gpu_image_lacks(tmp_path):
    """`benchlib run` of one configuration with papermill, nbconvert, nbformat, IPython and optuna unimportable,
    as on the lent GPU's image: nothing of the notebook machinery is needed to measure and record a row."""
    done = subprocess.run([sys.executable, "-c", BLOCKER, ",".join(NOT_ON_THE_IMAGE), "run", "--model", "resnet18",
                           "--data", "synthetic", "--batch-size", "4", "--image-size", "32", "--steps", "2",
                           "--set", "warmup_steps=1", "--set", "latency_repeats=3", "--set", "latency_budget_s=0",
                           "--set", "synthetic_samples=16", "--results-dir", str(tmp_path), "--json"],
                          capture_output=True, text=True, cwd=BENCHMARKS.parent, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(BENCHMARKS.parent)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["status"] == "ok"


def test_the_gpu_amp_row_is_judged_by_where_it_ran(session):
    on_gpu = {"finding": "gpu-amp row", "cuda": True, "rc": 0, "loss_finite": True}
    assert session.verdict(on_gpu)["passed"] is True
    assert session.verdict({**on_gpu, "rc": 2, "stderr_lines": 1})["passed"] is False, "a GPU must run it"
    assert session.verdict({**on_gpu, "cuda": False, "rc": 2, "stderr_lines": 1})["passed"] is True
