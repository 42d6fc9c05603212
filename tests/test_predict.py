"""`benchlib predict`: a study's per-layer tables carried to another machine's roofs, part by part, with a 90%
interval, and every input it cannot use refused in one line that names the command making it."""
from __future__ import annotations

import json
import math
import shlex

import pytest
from conftest import TINY

from benchlib.cli import main
from benchlib.roofline.measured import Ceilings
from benchlib.roofline.predict import METHOD, METHOD_LOG_SD, PredictError, missing_roofs, predict

KINDS = {"conv3x3": 100e9, "conv1x1": 90e9, "depthwise": 40e9, "matmul": 80e9}


def _ceilings(speed: float = 1.0, bandwidth: float = 1.0, kinds: dict[str, float] = KINDS, **kw) -> Ceilings:
    return Ceilings("cpu", "Some CPU", peak_flops_per_s={"fp32": 100e9 * speed},
                    bandwidth_bytes_per_s=20e9 * bandwidth, machine=kw.pop("machine", "here"),
                    kind_flops_per_s={k: {"fp32": v * speed} for k, v in kinds.items()},
                    kind_bandwidth_bytes_per_s={"dram": {"fp32": 20e9 * bandwidth},
                                                "cache": {"fp32": 60e9 * bandwidth}},
                    iqr_over_median={"conv3x3_fp32_s": 0.02, "add_fp32_134217728_s": 0.04}, **kw)


# a step of three parts that work (a 3x3 convolution at half its roof, a batch norm in DRAM, the optimizer) and
# two that do not (the wait for the batch, what no layer holds), plus the instrument's own cost
ROWS = [
    {"layer": "conv", "phase": "forward", "op_kind": "conv3x3", "flops": 1e9, "bytes": 4e6, "time_s": 0.020},
    {"layer": "bn", "phase": "forward", "op_kind": "elementwise", "flops": 0.0, "bytes": 2e8, "time_s": 0.015},
    {"layer": "(optimizer)", "phase": "optimizer", "op_kind": "elementwise", "flops": 0.0, "bytes": 1e8,
     "time_s": 0.010},
    {"layer": "(data wait)", "phase": "other", "op_kind": "elementwise", "time_s": 0.003},
    {"layer": "(unattributed)", "phase": "other", "op_kind": "elementwise", "time_s": 0.002},
    {"layer": "(timing)", "phase": "other", "op_kind": "elementwise", "time_s": 0.004},
]


def test_the_machine_itself_is_predicted_as_measured():
    here = _ceilings()
    p = predict(ROWS, 0.05, dtype="fp32", source=here, target=here)
    assert p.whole.value == pytest.approx(0.05) and p.whole.low < 0.05 < p.whole.high
    assert (p.parts["scale"] == 1.0).all() and "(timing)" not in set(p.parts["layer"])


def test_each_part_meets_its_own_kinds_roof_and_parts_without_work_carry_over():
    """Compute twice as fast, bandwidth the same: only the convolution halves; the whole moves by the parts'
    predicted sum over their measured sum (the instrument's cost cancels)."""
    p = predict(ROWS, 0.05, dtype="fp32", source=_ceilings(), target=_ceilings(speed=2.0))
    scale = dict(zip(p.parts["layer"], p.parts["scale"]))
    assert scale["conv"] == pytest.approx(0.5) and scale["bn"] == pytest.approx(1.0)
    assert scale["(data wait)"] == scale["(unattributed)"] == 1.0
    measured, predicted = 0.050, 0.040  # the working parts: 0.020 + 0.015 + 0.010 + 0.003 + 0.002
    assert p.whole.value == pytest.approx(0.05 * predicted / measured)
    slow_memory = predict(ROWS, 0.05, dtype="fp32", source=_ceilings(), target=_ceilings(bandwidth=0.5))
    scale = dict(zip(slow_memory.parts["layer"], slow_memory.parts["scale"]))
    assert scale["bn"] == pytest.approx(2.0) and scale["(optimizer)"] == pytest.approx(2.0)
    assert scale["conv"] == pytest.approx(1.0)  # 1 GFLOP over 4 MB: compute-bound on both


def test_the_interval_adds_the_runs_the_roofs_and_the_method_and_says_what_it_lacks():
    here = _ceilings()
    known = predict(ROWS, 0.05, dtype="fp32", source=here, target=here, run_log_sd=0.05)
    unknown = predict(ROWS, 0.05, dtype="fp32", source=here, target=here)
    assert known.log_sd["method"] == METHOD_LOG_SD["training step"] and 0 < known.log_sd["roofs"] < 0.05
    assert known.whole.high - known.whole.low > unknown.whole.high - unknown.whole.low
    assert not any("left out" in n for n in known.notes) and "left out of the interval" in unknown.notes[0]
    half = math.log(known.whole.high / known.whole.value)
    total = math.sqrt(0.05 ** 2 + known.log_sd["roofs"] ** 2 + METHOD_LOG_SD["training step"] ** 2)
    assert half == pytest.approx(1.6448536 * total)
    assert "carried over unchanged" in known.weakest


def test_a_target_without_a_roof_a_part_needs_is_refused_naming_it():
    bare = _ceilings(kinds={"matmul": 80e9})
    assert missing_roofs(bare, ROWS, "fp32") == ["conv3x3 fp32"]
    with pytest.raises(PredictError, match="no conv3x3 fp32 roof"):
        predict(ROWS, 0.05, dtype="fp32", source=_ceilings(), target=bare)
    assert missing_roofs(_ceilings(), ROWS, "bf16")[0] == "bf16 peak"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A real per-layer run (squeezenet1_1, 32 px) with its row and its folder's ceilings, and those ceilings as a
    target file of another machine, twice as fast in compute."""
    from benchlib.report.tables.explain_rows import layers_command
    from benchlib.run.record import record
    from benchlib.spec.settings import RunConfig, settings_from_mapping
    from benchlib.store.rows import read_results

    root = tmp_path_factory.mktemp("predict")
    s = settings_from_mapping({**TINY, "train_steps": 4}, "test")
    assert record(RunConfig("p", "cpu", "squeezenet1_1", 8, s), root / "study", progress=None)["status"] == "ok"
    (row,) = read_results([root / "study"]).to_dict("records")
    assert main(["-q", *shlex.split(layers_command(row))[1:], "--steps", "6", "--block", "3"]) == 0
    (ceilings,) = (root / "study" / "ceilings").glob("*.json")
    data = json.loads(ceilings.read_text())
    data["machine"] = "faster"
    for per_dtype in (data["peak_flops_per_s"], *data["kind_flops_per_s"].values()):
        for dtype in per_dtype:
            per_dtype[dtype] *= 2
    (root / "faster.json").write_text(json.dumps(data))
    return root


@pytest.mark.slow
def test_predict_prints_each_figure_with_its_interval_and_json_holds_the_parts(study, capsys):
    assert main(["predict", str(study / "study"), "--on", str(study / "faster.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == METHOD
    figures = {r["figure"]: r for r in out["rows"]}
    assert set(figures) == {"train_step_s", "train_samples_per_s", "latency_ms_p50"}
    step = figures["train_step_s"]
    assert step["low"] < step["predicted"] < step["high"] and step["predicted"] < step["measured"]
    assert figures["train_samples_per_s"]["predicted"] == pytest.approx(8 / step["predicted"])
    assert len(out["parts"]) == 2 and all(parts for parts in out["parts"].values())
    assert main(["predict", str(study / "study"), "--on", str(study / "faster.json"), "--parts"]) == 0
    text = capsys.readouterr().out
    assert "predicted on faster:cpu (90% intervals)" in text and "weakest:" in text and "largest first" in text


@pytest.mark.slow
@pytest.mark.parametrize("case, needle", [
    ("no layers", "no per-layer tables to predict from"),
    ("garbled", "not a benchlib ceilings file"),
    ("no kind", "no conv3x3 fp32 roof"),
    ("device", "its ceilings are of device cpu, not cuda"),
    ("unknown machine", "nor a machine of the machine cache"),
])
def test_inputs_it_cannot_use_are_refused_in_one_line(study, tmp_path, capsys, case, needle):
    folder, target, extra = study / "study", study / "faster.json", []
    if case == "no layers":
        folder = tmp_path / "empty"
        (folder / "rows").mkdir(parents=True)
    elif case == "garbled":
        target = tmp_path / "garbled.json"
        target.write_text("{not json")
    elif case == "no kind":
        data = json.loads((study / "faster.json").read_text())
        data["kind_flops_per_s"].pop("conv3x3")
        target = tmp_path / "no_kind.json"
        target.write_text(json.dumps(data))
    elif case == "device":
        extra = ["--device", "cuda"]
    else:
        target = "no-such-machine"
    assert main(["predict", str(folder), "--on", str(target), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert "benchlib roofline" in err[0] or "benchlib layers" in err[0], "it names the command that makes it"


GRID = {"study": "s", "hardware": ["cpu"], "models": ["resnet18"], "batch_sizes": [8]}


@pytest.mark.parametrize("extra, needle", [
    ({"predict_on": ["laptop.json"]}, "needs per-layer tables to predict from"),
    ({"predict_on": [3], "layers": True}, "key 'predict_on' has 3"),
    ({"predict_on": [" "], "layers": True}, "key 'predict_on' has ' '"),
])
def test_a_study_names_its_targets_as_text_and_only_with_per_layer_tables(extra, needle):
    from benchlib.errors import ConfigError
    from benchlib.spec.study import parse_study

    with pytest.raises(ConfigError, match=needle):
        parse_study({**GRID, **extra}, "p.yaml")
    cfg = parse_study({**GRID, "layers": True, "predict_on": ["laptop.json", "node7:cpu"]}, "p.yaml")
    assert cfg.predict_on == ("laptop.json", "node7:cpu") and parse_study(GRID, "p.yaml").predict_on == ()


def test_a_study_target_that_is_neither_a_file_nor_a_cached_machine_is_refused_before_it_runs(tmp_path):
    from benchlib.errors import ConfigError
    from benchlib.pipeline.predict import study_targets

    with pytest.raises(ConfigError, match="nor a machine of the machine cache"):
        study_targets([str(tmp_path / "nowhere")])
    with pytest.raises(ConfigError, match="no such ceilings file"):
        study_targets([str(tmp_path / "nowhere.json")])


def test_each_prediction_meets_the_targets_own_measurement_where_it_has_one():
    """Matched on the target's machine and device type, model, batch and variant; the measurement is the median of
    the target's ok runs, throughput the batch over it; rows of the source or a failed run do not count."""
    import pandas as pd

    from benchlib.report.tables.layers import against_measured

    base = {"machine": "here", "target": "laptop:cpu", "model": "resnet18", "batch_size": 8, "variant": "baseline"}
    predicted = pd.DataFrame([
        {**base, "figure": "train_step_s", "predicted": 0.20, "low": 0.15, "high": 0.26, "unit": "s"},
        {**base, "figure": "train_samples_per_s", "predicted": 40.0, "low": 30.8, "high": 53.3, "unit": "samples/s"},
        {**base, "figure": "latency_ms_p50", "predicted": 9.0, "low": 7.0, "high": 11.0, "unit": "ms"},
        {**base, "model": "resnet50", "figure": "train_step_s", "predicted": 1.0, "low": 0.8, "high": 1.2, "unit": "s"},
    ])
    row = {"model": "resnet18", "batch_size": 8, "variant": "baseline", "hardware": "cpu", "status": "ok",
           "latency_ms_p50": 12.0}
    rows = pd.DataFrame([{**row, "machine": "laptop", "train_step_s": s} for s in (0.24, 0.25, 0.30)]
                        + [{**row, "machine": "laptop", "train_step_s": 0.01, "status": "failed"},
                           {**row, "machine": "here", "train_step_s": 0.10}])
    out = against_measured(predicted, rows).set_index("figure")
    assert list(out.index) == ["train_step_s", "train_samples_per_s", "latency_ms_p50"]  # resnet50: not measured
    assert out.loc["train_step_s", "measured_there"] == 0.25 and out.loc["train_step_s", "runs_there"] == 3
    assert out.loc["train_step_s", "inside"] and not out.loc["latency_ms_p50", "inside"]
    assert out.loc["train_samples_per_s", "measured_there"] == pytest.approx(32.0)
    assert out.loc["train_step_s", "predicted_over_measured"] == pytest.approx(0.8)
    assert against_measured(predicted, rows[rows["machine"] == "here"]).empty
    itself = predicted.assign(target="here:cpu")
    assert against_measured(itself, rows).empty, "a target of the source's own name is not matched to its rows"


@pytest.mark.slow
def test_a_study_keeps_its_targets_and_its_predictions_and_the_summary_shows_them(study, tmp_path, monkeypatch):
    """The targets are copied into the results folder, the predictions written beside the rows for the summary
    (rewritten only when they change, so an unchanged page is reused), and a target the study drops goes."""
    import shutil

    from benchlib.pipeline.predict import keep_targets, save_predictions
    from benchlib.report.display import layers as shown
    from benchlib.roofline.measured import read_ceilings
    from benchlib.store.layout import ResultsLayout
    from benchlib.store.rows import read_results

    folder = tmp_path / "study"
    shutil.copytree(study / "study", folder)
    layout = ResultsLayout.of(folder)
    said: list[str] = []
    assert save_predictions(folder, said.append) is None and not layout.predictions_csv.exists()
    from benchlib.roofline.datasheet import datasheet_ceilings

    keep_targets(folder, [read_ceilings(study / "faster.json"), datasheet_ceilings("NVIDIA L4")])
    assert [p.name for p in layout.target_files()] == ["datasheet-NVIDIA-L4__cuda.json", "faster__cpu.json"]
    table = save_predictions(folder, said.append)
    assert set(table["figure"]) == {"train_step_s", "train_samples_per_s", "latency_ms_p50"} and len(table) == 6
    assert said[-1] == "predictions on faster:cpu: 3 figure(s)"
    stamp = layout.predictions_csv.stat().st_mtime_ns
    keep_targets(folder, [read_ceilings(study / "faster.json"), datasheet_ceilings("NVIDIA L4")])
    save_predictions(folder, said.append)
    assert layout.predictions_csv.stat().st_mtime_ns == stamp, "unchanged predictions are not rewritten"
    seen: list = []
    monkeypatch.setattr(shown, "display", seen.append)
    monkeypatch.setattr(shown.show, "display", seen.append)
    from benchlib.report.readback.layers import load_predictions

    shown.predictions(read_results([folder]), load_predictions([folder]))
    text = "\n".join(str(getattr(x, "data", "")) for x in seen)
    assert "## Predicted on other machines" in text and "Method: each part keeps" in text
    assert "faster:cpu" in text and "predicted there [90%]" in text and "rests most on assumption" in text
    keep_targets(folder, [])
    assert layout.target_files() == []


def test_a_layer_signature_rebuilds_the_layer_and_its_input():
    import torch
    from torch import nn

    from benchlib.nets.layer_shapes import layer_shapes, module_of

    net = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.ReLU(),
                        nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Flatten(), nn.Linear(8 * 4 * 4, 5))
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    shapes = layer_shapes(net.train(), x)
    assert set(shapes) == {"0", "2", "4"} and net.training, "read in eval, given back in train"
    assert shapes["0"] == "conv2d in=2x3x8x8 cl=1 out=8 k=3x3 s=2x2 p=1x1 d=1x1 g=1 bias=0"
    conv, shape, channels_last = module_of(shapes["2"])
    assert (conv.groups, conv.in_channels, conv.stride, conv.bias is not None, shape) == (8, 8, (1, 1), True,
                                                                                          (2, 8, 4, 4))
    linear, shape, _ = module_of(shapes["4"])
    assert (linear.in_features, linear.out_features, shape) == (128, 5, (2, 128))
    with pytest.raises(ValueError, match="not a layer signature"):
        module_of("conv2d in=2x3")


def test_a_shape_is_timed_forward_and_backward_and_kept_beside_the_ceilings(tmp_path):
    import torch

    from benchlib.roofline.shapes import read_shapes, save_shapes, shapes_path, time_shapes, wanted

    report = {"roof_dtype": "fp32", "shapes": {"a": "linear in=4x16 out=8 bias=1", "b": "linear in=4x16 out=8 bias=1"},
              "inference": {"shapes": {"a": "linear in=1x16 out=8 bias=1"}}}
    keys = wanted([report, report])
    assert keys == ["fp32 linear in=4x16 out=8 bias=1", "fp32 linear in=1x16 out=8 bias=1"]
    assert wanted([report], also=["bf16"])[:2] == ["fp32 linear in=4x16 out=8 bias=1",
                                                   "bf16 linear in=4x16 out=8 bias=1"]
    timed, left = time_shapes(keys, torch.device("cpu"))
    assert left == [] and all(t["forward_s"] > 0 and t["backward_s"] > 0 for t in timed.values())
    assert time_shapes(keys, torch.device("cpu"), budget_s=-1)[1] == keys, "a spent budget leaves them untimed"
    path = save_shapes(tmp_path, "box", "cpu", 2, timed)
    assert path == shapes_path(tmp_path / "ceilings" / "box__cpu.json") and read_shapes(path).keys() == timed.keys()
    path.write_text('{"format": 1, "times": []}')
    with pytest.raises(ValueError, match="not a benchlib shapes file"):
        read_shapes(path)


def test_a_layer_the_target_timed_alone_takes_that_time_and_the_rest_their_roofs():
    from benchlib.roofline.predict import Shapes

    timed = Shapes({"conv": "conv2d sig"}, {"fp32 conv2d sig": {"forward_s": 0.060, "backward_s": 0.1}})
    p = predict(ROWS, 0.05, dtype="fp32", source=_ceilings(), target=_ceilings(speed=2.0), shapes=timed)
    parts = p.parts.set_index("layer")
    assert parts.loc["conv", "predicted_s"] == pytest.approx(0.060)
    assert parts.loc["conv", "by"] == "its shape timed there"
    assert parts.loc["bn", "by"] == "roof" and parts.loc["(data wait)", "by"] == "carried unchanged"
    assert "carried by their own shapes timed on the target" in p.weakest
    assert p.whole.value == pytest.approx(0.05 * (0.060 + 0.015 + 0.010 + 0.005) / 0.050)
    assert timed.scale("conv", "backward", "bf16", 0.02) is None, "a shape timed in another dtype is not used"
    both = Shapes({"conv": "conv2d sig"}, {"fp32 conv2d sig": {"forward_s": 0.060, "backward_s": 0.1}},
                  {"fp32 conv2d sig": {"forward_s": 0.030, "backward_s": 0.1}})
    assert both.scale("conv", "forward", "fp32", 0.02) == pytest.approx(2.0), "timed on both: the ratio moves it"


def test_a_gpu_known_only_by_its_datasheet_is_a_target_with_a_wider_interval_and_says_so():
    from benchlib.pipeline.predict import target_ceilings
    from benchlib.roofline.predict import DATASHEET_LOG_SD

    sheet = target_ceilings("NVIDIA L4")
    assert sheet.device == "cuda" and sheet.method.startswith("datasheet, not measured")
    assert sheet.kind_flops_per_s["conv3x3"]["fp32"] == sheet.peak_flops_per_s["fp32"] == 30.3e12
    p = predict(ROWS, 0.05, dtype="fp32", source=_ceilings(), target=sheet)
    plain = predict(ROWS, 0.05, dtype="fp32", source=_ceilings(), target=_ceilings(speed=300, bandwidth=15))
    assert p.log_sd["datasheet"] == DATASHEET_LOG_SD and "datasheet" not in plain.log_sd
    assert any("datasheet, not measured" in n for n in p.notes)
    assert "cpu to cuda" in p.weakest


@pytest.mark.slow
def test_the_target_times_the_studys_shapes_and_predict_gives_those_layers_their_times(study, tmp_path, capsys):
    target = tmp_path / "target"
    assert main(["-q", "roofline", "--repeats", "3", "--results-dir", str(target), "--shapes-of",
                 str(study / "study")]) == 0
    (ceilings,) = (target / "ceilings").glob("*.json")
    assert (target / "shapes" / ceilings.name).is_file()
    capsys.readouterr()
    assert main(["predict", str(study / "study"), "--on", str(ceilings), "--parts"]) == 0
    text = capsys.readouterr().out
    assert "by its shape timed there" in text and "carried by their own shapes timed on the target" in text
    assert main(["predict", str(study / "study"), "--on", str(ceilings), "--parts", "--no-shapes"]) == 0
    assert "by its shape timed there" not in capsys.readouterr().out
    for args, needle in ((["--shapes-of", str(study / "study")], "--shapes-of needs --results-dir"),
                         (["--shapes-of", str(tmp_path / "none"), "--results-dir", str(target)], "no such results")):
        assert main(["roofline", *args]) == 2
        assert needle in capsys.readouterr().err


def test_a_step_is_predicted_in_another_precision_on_the_targets_roofs_of_it():
    """An fp32 step run under bf16 there: each part meets the target's bf16 roof (and a shape timed in bf16),
    the notes say what is carried as fp32; a target without a bf16 roof is refused naming it."""
    from benchlib.roofline.predict import Shapes

    fast = _ceilings()
    fast.peak_flops_per_s["bf16"] = 200e9
    for per_dtype in fast.kind_flops_per_s.values():
        per_dtype["bf16"] = per_dtype["fp32"] * 2
    for home in fast.kind_bandwidth_bytes_per_s.values():
        home["bf16"] = home["fp32"]
    p = predict(ROWS, 0.05, dtype="fp32", source=_ceilings(), target=fast, target_dtype="bf16")
    assert dict(zip(p.parts["layer"], p.parts["scale"]))["conv"] == pytest.approx(0.5) and p.dtype == "bf16"
    assert any("run in bf16" in n for n in p.notes)
    timed = Shapes({"conv": "sig"}, {"bf16 sig": {"forward_s": 0.004, "backward_s": 0.01}},
                   {"fp32 sig": {"forward_s": 0.010, "backward_s": 0.01}})
    assert timed.scale("conv", "forward", "fp32", 0.02, "bf16") == pytest.approx(0.4)
    with pytest.raises(PredictError, match="bf16 peak"):
        predict(ROWS, 0.05, dtype="fp32", source=_ceilings(), target=_ceilings(), target_dtype="bf16")
