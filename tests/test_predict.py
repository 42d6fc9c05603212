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
    assert known.log_sd["method"] == METHOD_LOG_SD and 0 < known.log_sd["roofs"] < 0.05
    assert known.whole.high - known.whole.low > unknown.whole.high - unknown.whole.low
    assert not any("left out" in n for n in known.notes) and "left out of the interval" in unknown.notes[0]
    half = math.log(known.whole.high / known.whole.value)
    total = math.sqrt(0.05 ** 2 + known.log_sd["roofs"] ** 2 + METHOD_LOG_SD ** 2)
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
