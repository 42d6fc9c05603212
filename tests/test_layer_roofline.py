"""Each layer on the roofline (roofline/layers.py, pure), the traffic counted per layer (nets/layer_work.py) and
``benchlib layers`` end to end on a small resnet18."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
from conftest import host_load, quiet_check
from torch import nn

from benchlib.cli import main
from benchlib.nets.layer_work import OPTIMIZER, UNATTRIBUTED, count_layer_work
from benchlib.roofline.layers import LAYER_COLUMNS, layer_roofline, median_per_step, predicted_step_s, roof_time_s

PEAK, BANDWIDTH = 100e9, 10e9  # ridge at 10 FLOPs per byte


def _times(*rows):
    return pd.DataFrame([dict(zip(("layer", "phase", "calls", "time_us"), r)) for r in rows])


def test_each_layer_sits_on_the_side_of_the_ridge_its_intensity_puts_it():
    times = _times(("conv", "forward", 1, 2000.0), ("bn", "forward", 1, 500.0), ("fc", "backward", 1, 50.0),
                   (UNATTRIBUTED, "other", 1, 400.0))
    flops = {("conv", "forward"): 100_000_000, ("bn", "forward"): 0, ("fc", "backward"): 1_000_000}
    moved = {("conv", "forward"): 1_000_000.0, ("bn", "forward"): 2_000_000.0, ("fc", "backward"): 1_000_000.0}
    table = layer_roofline(times, flops, moved, {"conv": "Conv2d", "bn": "BatchNorm2d", "fc": "Linear"},
                           step_s=0.004, peak_flops_per_s=PEAK, bandwidth_bytes_per_s=BANDWIDTH, cache_bytes=1_500_000)
    assert list(table.columns) == list(LAYER_COLUMNS)
    rows = table.set_index("layer")
    conv, bn, fc = rows.loc["conv"], rows.loc["bn"], rows.loc["fc"]
    assert conv["bound"] == "compute" and conv["intensity_flops_per_byte"] == 100.0
    assert conv["roof_time_s"] == pytest.approx(1e-3) and conv["roof_fraction"] == pytest.approx(0.5)
    assert conv["achieved_flops_per_s"] == pytest.approx(50e9) and conv["roof_flops_per_s"] == PEAK
    # no counted arithmetic: memory-bound at intensity 0, its fraction the bandwidth it reached
    assert bn["bound"] == "memory" and bn["intensity_flops_per_byte"] == 0
    assert bn["roof_time_s"] == pytest.approx(2e-4) and bn["roof_fraction"] == pytest.approx(0.4)
    # 1 FLOP per byte: left of the ridge; faster than DRAM allows, and it fits in the cache: flagged both ways
    assert fc["bound"] == "memory" and fc["roof_fraction"] == pytest.approx(2.0) and fc["above_roof"]
    assert fc["cache_resident"]
    assert not conv["above_roof"] and not bn["cache_resident"]
    rest = rows.loc[UNATTRIBUTED]
    assert rest["share"] == pytest.approx(0.1) and math.isnan(rest["roof_time_s"]) and math.isnan(rest["flops"])
    assert predicted_step_s(table) == pytest.approx(1e-3 + 2e-4 + 1e-4)
    assert roof_time_s(0, 0, PEAK, BANDWIDTH) == 0


def test_the_median_over_steps_counts_a_step_without_the_layer_as_zero():
    steps = [_times(("a", "forward", 1, 10.0), ("b", "forward", 2, 4.0)), _times(("a", "forward", 1, 30.0)),
             _times(("a", "forward", 1, 20.0), ("b", "forward", 2, 6.0))]
    table = median_per_step(steps).set_index(["layer", "phase"])
    assert table.loc[("a", "forward"), "time_us"] == 20.0
    assert table.loc[("b", "forward"), "time_us"] == 4.0 and table.loc[("b", "forward"), "calls"] == 2


def test_traffic_is_each_ops_inputs_and_outputs_and_a_view_moves_nothing():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3))
    work = count_layer_work(model, torch.randn(2, 4), 3)
    # addmm(bias, x, W.t()): bias 3 + x 8 + W 12 read, out 6 written; the transpose is a view
    assert work.elements[("0", "forward")] == 3 + 8 + 12 + 6
    assert work.flops[("0", "forward")] == 2 * 2 * 4 * 3


@pytest.mark.parametrize("momentum,per_parameter", [(0.0, 3), (0.9, 8)])
def test_the_optimizers_step_is_a_row_of_its_own_counted_in_steady_state(momentum, per_parameter):
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(5))
    x = torch.randn(2, 3, 8, 8)
    model(x)
    params = sum(p.numel() for p in model.parameters())
    work = count_layer_work(model, x, 5, optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1,
                                                                           momentum=momentum, foreach=True))
    # foreach SGD: p += -lr * g reads p and g, writes p; with momentum the buffer is scaled, added to and read
    assert work.elements[(OPTIMIZER, "optimizer")] == per_parameter * params
    assert work.flops.get((OPTIMIZER, "optimizer"), 0) == 0


def test_layers_json_has_the_columns_the_checks_and_flops_that_sum_to_the_models(tmp_path, capsys):
    with host_load() as window:
        code = main(["-q", "layers", "--model", "resnet18", "--data", "synthetic", "--batch-size", "8",
                     "--image-size", "32", "--steps", "2", "--block", "1", "--json", "--results-dir", str(tmp_path)])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    layers = pd.DataFrame(data["layers"])
    for column in ("layer", "kind", "phase", "flops", "bytes", "time_s", "roof_fraction", "bound", "share"):
        assert column in layers.columns
    assert set(layers["phase"]) == {"forward", "backward", "optimizer", "other"}
    assert data["flops_total"] == pytest.approx(data["model_flops"], rel=0.01)
    placed = layers[layers["layer"] != UNATTRIBUTED]
    assert placed["flops"].sum() == pytest.approx(data["model_flops"], rel=0.01)
    assert data["steps"] == 2
    with quiet_check(window):  # profiled and plain steps of two each: load that comes and goes lands on one side
        assert 0.5 < data["coverage"] < 1.5, data["coverage"]
    forward = placed[placed["phase"] == "forward"].set_index("layer")
    assert forward.loc["layer1.0.conv1", "bound"] == "compute" and forward.loc["layer1.0.bn1", "bound"] == "memory"
    assert data["predicted_step_s"] > 0 and 0 < data["efficiency"]
    saved = list((tmp_path / "layers").glob("*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["layers"] == data["layers"]


def test_a_quantized_variant_splits_the_int8_copy_it_serves_not_the_float_model(tmp_path, capsys):
    """The batch-1 forward of ``quantization=static_int8`` is the int8 copy's (fused, quantized modules), timed
    per layer and placed on no roof: no int8 roof is measured, and an fp32 one would misplace it."""
    code = main(["-q", "layers", "--model", "resnet18", "--data", "synthetic", "--batch-size", "8", "--image-size",
                 "32", "--steps", "2", "--block", "1", "--json", "--results-dir", str(tmp_path),
                 "--set", "quantization=static_int8"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    (saved,) = (tmp_path / "layers").glob("*.json")
    forward = pd.DataFrame(json.loads(saved.read_text())["inference"]["layers"]).set_index("layer")
    assert forward.loc["layer1.0.conv1", "kind"] == "ConvReLU2d"  # batch norm folded, ReLU fused: the int8 graph
    assert "layer1.0.bn1" not in forward.index and forward["bound"].isna().all()
    assert any("int8 copy the variant serves" in n for n in data["notes"])


@pytest.mark.parametrize("extra,said", [
    (["--set", "compile=default"], "a compiled model runs fused kernels that no layer owns; allowed: compile: off"),
    (["--block", "0"], "layers: steps 20 and block 0; allowed: integers >= 1"),
])
def test_what_layers_cannot_attribute_is_refused_in_one_line(tmp_path, capsys, extra, said):
    code = main(["layers", "--model", "resnet18", "--data", "synthetic", "--batch-size", "8", "--results-dir",
                 str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert code == 2 and said in err and err.strip().count("\n") == 0, err


def test_a_study_asks_for_layers_with_a_flag_and_a_bad_value_is_one_line():
    from benchlib.errors import ConfigError
    from benchlib.spec.study import parse_study

    raw = {"study": "s", "hardware": ["cpu"], "models": ["resnet18"], "batch_sizes": [8]}
    assert parse_study({**raw, "layers": True}, "s.yaml").layers and not parse_study(raw, "s.yaml").layers
    with pytest.raises(ConfigError, match="s.yaml: key 'layers' is 'yes'; allowed: true or false"):
        parse_study({**raw, "layers": "yes"}, "s.yaml")


def _saved_report(tmp_path):
    """A per-layer report as `benchlib layers` saves it, with figures written here rather than measured."""
    from benchlib.run.layers import LayerReport
    from benchlib.store.layout import ResultsLayout

    times = _times(("layer4.0.conv1", "backward", 1, 6000.0), ("layer4.0.conv1", "forward", 1, 2000.0),
                   ("layer4.0.bn1", "forward", 1, 1500.0), (OPTIMIZER, "optimizer", 1, 1000.0),
                   (UNATTRIBUTED, "other", 1, 500.0))
    flops = {("layer4.0.conv1", "backward"): 400_000_000, ("layer4.0.conv1", "forward"): 200_000_000,
             ("layer4.0.bn1", "forward"): 0, (OPTIMIZER, "optimizer"): 0}
    moved = {("layer4.0.conv1", "backward"): 3e7, ("layer4.0.conv1", "forward"): 1.5e7,
             ("layer4.0.bn1", "forward"): 4e6, (OPTIMIZER, "optimizer"): 2e7}
    table = layer_roofline(times, flops, moved, {"layer4.0.conv1": "Conv2d", "layer4.0.bn1": "BatchNorm2d",
                                                 OPTIMIZER: "SGD"}, step_s=0.011, peak_flops_per_s=PEAK,
                           bandwidth_bytes_per_s=BANDWIDTH, cache_bytes=2**20)
    report = LayerReport(run_id="cpu__resnet18__bs8", table=table, step_s=0.011, instrumented_step_s=0.0115,
                         coverage=10.5 / 11, predicted_step_s=predicted_step_s(table), flops_total=6e8, model_flops=6e8,
                         roof_dtype="fp32", peak_flops_per_s=PEAK, bandwidth_bytes_per_s=BANDWIDTH, element_bytes=4,
                         steps=5, about={"model": "resnet18", "device": "cpu", "batch_size": 8, "machine": "vm",
                                         "cache_bytes": 2**20}, notes=["a note"])
    path = ResultsLayout.of(tmp_path).layers_path("vm", report.run_id)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(report.to_json()))
    return report


def test_the_summary_reads_a_saved_table_back_and_says_which_layers_lose_the_most(tmp_path):
    from benchlib.report.figures.layers import layer_roofline as figure
    from benchlib.report.findings.work import layer_sentences
    from benchlib.report.readback.layers import load_layer_reports
    from benchlib.report.tables.layers import by_kind, lost_time

    _saved_report(tmp_path)
    (loaded,) = load_layer_reports([tmp_path])
    assert loaded["model"] == "resnet18" and list(loaded["table"].columns) == list(LAYER_COLUMNS)
    worst = lost_time(loaded["table"])
    assert worst["layer"].iloc[0] == "layer4.0.conv1" and worst["phase"].iloc[0] == "backward"
    assert UNATTRIBUTED not in set(worst["layer"])  # the rest has no roof to lose time against
    kinds = by_kind(loaded["table"])
    assert kinds.iloc[0][["kind", "phase", "bound"]].tolist() == ["Conv2d", "backward", "compute"]
    (line,) = layer_sentences([loaded], groups=2)
    assert line.startswith("resnet18 on cpu (bs8), layer by layer: the roofline predicts a ")
    assert "Conv2d backward pass (1 layer(s), compute-bound) takes 100% of the backward pass at 66.7% of its roof" \
        in line, line
    fig = figure(loaded, tmp_path / "figures")
    assert len(list((tmp_path / "figures").glob("layers_*.png"))) == 1 and len(fig.axes) == 2


@pytest.mark.gpu
def test_on_a_gpu_each_layer_holds_the_kernels_it_launched(tmp_path):
    from benchlib.run.layers import measure_layers
    from benchlib.spec.settings import RunConfig, RunSettings

    settings = RunSettings.of(dataset="synthetic", image_size=32, synthetic_samples=256, train_steps=4, warmup_steps=2)
    report = measure_layers(RunConfig("gpu", "cuda", "resnet18", 16, settings), tmp_path, steps=4, block=2)
    table = report.table.set_index(["layer", "phase"])
    assert table.loc[("layer1.0.conv1", "forward"), "time_s"] > 0 and table.loc[("fc", "backward"), "time_s"] > 0
    assert 0 < report.coverage <= 1.05, "a kernel counted under two layers would pass the step"
    assert report.flops_total == pytest.approx(report.model_flops, rel=0.01)
    compute = report.table[report.table["bound"] == "compute"]
    assert not compute["above_roof"].astype(bool).any(), compute[compute["above_roof"].astype(bool)]


def test_a_forward_is_profiled_layer_by_layer_with_what_ran_outside_every_layer():
    """``run.layers.profile_forward``: the per-layer view of inference (how the int8 batch-1 slow path was found:
    a quantized model's quantize/dequantize and residual adds run outside every layer)."""
    from benchlib.run.layers import profile_forward

    class Residual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.relu = nn.Conv2d(3, 3, 3, padding=1), nn.ReLU()

        def forward(self, x):
            return self.relu(self.conv(x)) + x  # the add is in no leaf

    times, outside, step_us = profile_forward(Residual().eval(), torch.randn(1, 3, 8, 8), calls=3, warmup=1)
    assert set(times["layer"]) == {"conv", "relu", UNATTRIBUTED} and (times["calls"] >= 1).all()
    assert dict(zip(times["layer"], times["kind"]))["conv"] == "Conv2d"
    assert "aten::add" in set(outside["operator"]) and "aten::conv2d" not in set(outside["operator"])
    assert step_us > 0 and times["time_us"].sum() == pytest.approx(step_us, rel=0.5)


def test_a_precision_without_a_measured_roof_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    from benchlib.roofline.measured import Ceilings
    from benchlib.run import layers as run_layers

    # The CPU runs bf16 as far as the knobs can tell, but its ceilings hold no bf16 roof: this is the ceilings'
    # refusal, on every CPU (without bf16 kernels the knobs' own refusal would come first)
    monkeypatch.setenv("BENCHLIB_CPU_BF16", "on")
    no_bf16 = Ceilings("cpu", "cpu", peak_flops_per_s={"fp32": 1e11}, bandwidth_bytes_per_s=1e10,
                       skipped_dtypes={"bf16": "no native bf16 on this cpu"})
    monkeypatch.setattr(run_layers, "ensure_ceilings", lambda *args, **kwargs: no_bf16)
    code = main(["layers", "--model", "resnet18", "--data", "synthetic", "--batch-size", "8", "--results-dir",
                 str(tmp_path), "--set", "precision=amp_bf16"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "layers: no measured bf16 roof on cpu (no native bf16 on this cpu); allowed: a precision whose roof " \
           "was measured here: fp32" in err


def test_a_precision_this_cpu_cannot_run_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BENCHLIB_CPU_BF16", "off")  # a CPU without bf16 kernels, on every CPU
    code = main(["layers", "--model", "resnet18", "--data", "synthetic", "--batch-size", "8", "--results-dir",
                 str(tmp_path), "--set", "precision=amp_bf16"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "has no bf16 kernels (oneDNN reports bf16 unsupported); allowed: precision fp32" in err


def test_each_layer_is_judged_by_the_roof_of_its_kind():
    """A depthwise convolution reaches a fraction of the 3x3's FLOP/s on any machine: judged by the whole roof
    it reads memory-bound at 20%, by its own kind's compute-bound at 50%; a cache-resident batch norm meets
    the cache's bandwidth, not DRAM's."""
    from benchlib.nets.op_kinds import op_kind

    assert [op_kind(m) for m in (torch.nn.Conv2d(8, 8, 3), torch.nn.Conv2d(8, 16, 1),
                                 torch.nn.Conv2d(8, 8, 3, groups=8), torch.nn.Conv2d(8, 8, 7, groups=2),
                                 torch.nn.Linear(4, 2), torch.nn.BatchNorm2d(8))] == [
        "conv3x3", "conv1x1", "depthwise", "conv3x3", "matmul", "elementwise"]
    roofs = {("depthwise", False): (20e9, 10e9), ("elementwise", True): (400e9, 50e9)}
    times = _times(("dw", "forward", 1, 4000.0), ("bn", "forward", 1, 100.0))
    flops, moved = {("dw", "forward"): 40e6, ("bn", "forward"): 0}, {("dw", "forward"): 8e6, ("bn", "forward"): 1e6}
    whole = layer_roofline(times, flops, moved, {}, step_s=0.01, peak_flops_per_s=400e9,
                           bandwidth_bytes_per_s=10e9, cache_bytes=2**20).set_index("layer")
    assert whole.loc["dw", "bound"] == "memory" and whole.loc["dw", "roof_fraction"] == pytest.approx(0.2)
    table = layer_roofline(times, flops, moved, {}, step_s=0.01, peak_flops_per_s=400e9, bandwidth_bytes_per_s=10e9,
                           cache_bytes=2**20, op_kinds={"dw": "depthwise", "bn": "elementwise"},
                           roof_of=lambda kind, resident: roofs.get((kind, resident), (400e9, 10e9))).set_index("layer")
    assert table.loc["dw", "op_kind"] == "depthwise" and not table.loc["dw", "cache_resident"]
    assert table.loc["dw", "bound"] == "compute" and table.loc["dw", "roof_fraction"] == pytest.approx(0.5)
    assert table.loc["bn", "cache_resident"] and table.loc["bn", "roof_time_s"] == pytest.approx(1e6 / 50e9)


def test_a_configurations_repeats_give_one_sentence_from_its_median_run_and_variants_are_named(tmp_path):
    """Eight repeats of two variants once gave sixteen like sentences, none saying which variant it was."""
    from benchlib.report.findings.work import layer_sentences
    from benchlib.report.readback.layers import configurations, load_layer_reports, median_run

    _saved_report(tmp_path)
    (loaded,) = load_layer_reports([tmp_path])
    predicted = loaded["predicted_step_s"]
    runs = [{**loaded, "variant": variant, "run_id": f"{variant}-{seed}", "step_s": predicted * factor}
            for variant, factors in (("cpu-default", (4, 2, 3)), ("cpu-channels-last", (5, 6)))
            for seed, factor in enumerate(factors)]
    groups = configurations(runs)
    assert [[r["run_id"] for r in g] for g in groups] == [["cpu-default-1", "cpu-default-2", "cpu-default-0"],
                                                           ["cpu-channels-last-0", "cpu-channels-last-1"]]
    assert median_run(groups[0])["run_id"] == "cpu-default-2" and median_run(groups[1])["run_id"].endswith("-0")
    default, channels_last = layer_sentences(runs)
    assert default.startswith("resnet18 on cpu (bs8, cpu-default), layer by layer: ")
    assert "(efficiency 33.3%;" in default and "the median of 3 runs" in default
    assert "efficiencies 25.0%-50.0%" in default, default
    assert channels_last.startswith("resnet18 on cpu (bs8, cpu-channels-last), layer by layer: ")
    assert "(efficiency 20.0%;" in channels_last and "the median of 2 runs" in channels_last
    (one,) = layer_sentences([loaded])
    assert "runs" not in one.split("profiled steps)")[1].split(".")[0]  # one run: no range
