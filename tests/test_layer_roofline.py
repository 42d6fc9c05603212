"""Each layer on the roofline (roofline/layers.py, pure), the traffic counted per layer (nets/layer_work.py) and
``benchlib layers`` end to end on a small resnet18."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
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
    code = main(["-q", "layers", "--model", "resnet18", "--data", "synthetic", "--batch-size", "8", "--image-size",
                 "32", "--steps", "2", "--block", "1", "--json", "--results-dir", str(tmp_path)])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    layers = pd.DataFrame(data["layers"])
    for column in ("layer", "kind", "phase", "flops", "bytes", "time_s", "roof_fraction", "bound", "share"):
        assert column in layers.columns
    assert set(layers["phase"]) == {"forward", "backward", "optimizer", "other"}
    assert data["flops_total"] == pytest.approx(data["model_flops"], rel=0.01)
    placed = layers[layers["layer"] != UNATTRIBUTED]
    assert placed["flops"].sum() == pytest.approx(data["model_flops"], rel=0.01)
    assert 0.5 < data["coverage"] < 1.5 and data["steps"] == 2
    forward = placed[placed["phase"] == "forward"].set_index("layer")
    assert forward.loc["layer1.0.conv1", "bound"] == "compute" and forward.loc["layer1.0.bn1", "bound"] == "memory"
    assert data["predicted_step_s"] > 0 and 0 < data["efficiency"]
    saved = list((tmp_path / "layers").glob("*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["layers"] == data["layers"]


@pytest.mark.parametrize("extra,said", [
    (["--set", "compile=default"], "a compiled model runs fused kernels that no layer owns; allowed: compile: off"),
    (["--block", "0"], "layers: steps 20 and block 0; allowed: integers >= 1"),
])
def test_what_layers_cannot_attribute_is_refused_in_one_line(tmp_path, capsys, extra, said):
    code = main(["layers", "--model", "resnet18", "--data", "synthetic", "--batch-size", "8", "--results-dir",
                 str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert code == 2 and said in err and err.strip().count("\n") == 0, err
