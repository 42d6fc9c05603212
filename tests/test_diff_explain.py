"""`benchlib diff --explain` on two tiny results folders measured for real: rows by `record`, per-layer tables by
the very `benchlib layers` command the explanation names for a row without one."""
from __future__ import annotations

import json
import shlex
import shutil

import numpy as np
import pytest
from conftest import TINY

from benchlib.cli import main
from benchlib.env.manifest import machine_name
from benchlib.report.findings.claims import unsupported
from benchlib.report.tables.explain import PART_COLUMNS
from benchlib.report.tables.explain_rows import layers_command
from benchlib.run.record import record
from benchlib.spec.settings import RunConfig, settings_from_mapping
from benchlib.store.noise_floor import NoiseFloor, save_noise_floor
from benchlib.store.rows import read_results

pytestmark = pytest.mark.slow  # two tiny rows and two per-layer tables: about a minute on a 2-core VM

SETTINGS = {**TINY, "train_steps": 4, "latency_repeats": 8}


def _floor(folder) -> None:
    """A noise floor written, not measured (a calibration takes minutes): single runs within about 29%."""
    base = np.exp(np.array([-1.2, -0.5, 0.0, 0.5, 1.2]) * 0.045)
    floor = NoiseFloor(machine=machine_name(), measured_utc="2026-11-25T00:00:00Z", torch="", configuration="test",
                       values={1: {"train_step_s": tuple(0.15 * base), "latency_ms_p50": tuple(5 * base),
                                   "infer_samples_per_s": tuple(900 * base)},
                               2: {"train_step_s": tuple(0.09 * base ** 1.5), "latency_ms_p50": tuple(3 * base ** 1.5),
                                   "infer_samples_per_s": tuple(1400 * base ** 1.5)}}, minutes=0.0)
    save_noise_floor(floor, folder)


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    """A: squeezenet1_1 at 32 px; B: at 96 px (nine times the pixels, several times slower); each one run with
    its per-layer table from `benchlib layers`. C: a row of A's settings with no per-layer table."""
    root = tmp_path_factory.mktemp("explain")
    for name, px in (("a", 32), ("b", 96), ("c", 32)):
        s = settings_from_mapping({**SETTINGS, "image_size": px}, "test")  # typed as a command line types them
        row = record(RunConfig("d", "cpu", "squeezenet1_1", 8, s), root / name, progress=None)
        assert row is not None and row["status"] == "ok", row
        _floor(root / name)
    for name in ("a", "b"):
        (row,) = read_results([root / name]).to_dict("records")
        words = shlex.split(layers_command(row))
        assert main(["-q", *words[1:], "--steps", "6", "--block", "3"]) == 0
        assert len(list((root / name / "layers").glob("*.json"))) == 1, "the command's run id is the row's"
    shutil.rmtree(root / "c" / "ceilings", ignore_errors=True)
    return root


def test_diff_explain_json_splits_the_step_and_its_causes_agree_with_the_verdict(sides, capsys):
    a, b = str(sides / "a"), str(sides / "b")
    assert main(["diff", a, b, "--ignore", "image_size", "--metric", "train_step_s", "--explain", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    (row,) = payload["rows"]
    assert payload["explain_missing"] == []
    found = {r["metric"]: r for r in payload["explain"]}
    assert set(found) == {"train_step_s", "forward_bs1_s"}
    step = found["train_step_s"]
    assert {"metric", "delta_s", "coverage", "parts", "causes"} <= set(step)
    if not step["explained"]:  # a verdict that claims nothing, or per-layer steps the host drowned: no causes
        assert step["why"] and step["parts"] == [] and step["causes"] == [], step
        assert row["verdict"] not in ("faster", "slower") or any(
            w in step["why"] for w in ("noise floor", "holds 0", "other way")), step["why"]
        return
    assert step["explained"] and step["parts"], step["why"]
    assert set(PART_COLUMNS) <= set(step["parts"][0])
    assert step["coverage"] == pytest.approx(sum(p["delta_s"] for p in step["parts"]) / step["delta_s"])
    assert ("within 0.9-1.1" in step["summary"]) == (0.9 <= step["coverage"] <= 1.1)
    names = {(p["layer"], p["phase"]) for p in step["parts"]}
    assert {("(optimizer)", "optimizer"), ("(unattributed)", "other"), ("(data wait)", "other")} <= names
    assert any(phase == "backward" for _, phase in names) and any(phase == "forward" for _, phase in names)
    sign = 1 if row["verdict"] == "slower" else -1  # slower: B takes more time
    assert np.sign(step["delta_s"]) == sign
    assert 1 <= len(step["causes"]) <= 3
    words = {"(optimizer)": "the optimizer's step", "(unattributed)": "what no layer holds",
             "(data wait)": "waiting for the batch"}
    named = {words.get(p["layer"], f"{p['layer']} {p['phase']}"): p for p in step["parts"]}
    shares = []
    for cause in step["causes"]:  # the largest parts moving the way the whole moved, their interval clear of 0
        part = named[cause.split(": ")[0]]
        assert np.sign(part["delta_s"]) == sign, (cause, part)
        assert not np.isfinite(part["ci_low"]) or part["ci_low"] > 0 or part["ci_high"] < 0, (cause, part)
        shares.append(part["share"])
        assert unsupported(cause) is None and " of " in cause and "%)" in cause
    assert shares == sorted(shares, reverse=True)
    for part in step["parts"]:
        if np.isfinite(part["ci_low"]):
            assert part["ci_low"] <= part["delta_s"] <= part["ci_high"], part


def test_diff_explain_markdown_has_the_whole_and_the_causes(sides, capsys):
    a, b = str(sides / "a"), str(sides / "b")
    assert main(["diff", a, b, "--ignore", "image_size", "--metric", "train_step_s", "--explain",
                 "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "### Why B differs from A, layer by layer" in out
    assert "- training step: B less A " in out and "- batch-1 forward: B less A " in out
    assert ("the parts sum to" in out) or ("not explained" in out)


def test_rows_without_a_layer_table_are_named_with_the_command_that_measures_them(sides, capsys):
    a, c = str(sides / "a"), str(sides / "c")
    assert main(["diff", a, c, "--metric", "train_step_s", "--explain"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "has no per-layer table" in ln]
    assert len(lines) == 1 and lines[0].startswith("B: ") and f"`benchlib layers --results-dir {c} " in lines[0]
    assert "--set train_steps=4" in lines[0] and "(in a study: `layers: true`)" in lines[0]


def test_compare_explain_returns_the_parts_as_a_dataframe(tmp_path):
    """`benchlib.compare(..., explain=True)`: each side measured, then layer by layer, the parts come back."""
    from torch import nn

    import benchlib
    from benchlib.report.tables.explain import PART_COLUMNS

    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(8, 5))
    results = tmp_path / "results"
    parts = benchlib.compare(net, variants=["cpu-default", {"name": "cpu-channels-last", "memory_format":
                                                           "channels_last"}],
                             hardware="cpu", batch_sizes=[8], image_size=32, steps=4, results_dir=str(results),
                             settings={"latency_repeats": 6, "latency_budget_s": 0}, metrics=["train_step_s"],
                             explain=True, layer_steps=4, progress=None)
    assert len(list((results / "layers").glob("*.json"))) == 2  # one per side
    assert {"side", "baseline", "metric", "whole_delta_s", "coverage", "explained", "why"} <= set(parts.columns)
    assert set(parts["side"]) == {"cpu-channels-last"} and set(parts["baseline"]) == {"cpu-default"}
    assert set(parts["metric"]) == {"train_step_s", "forward_bs1_s"}
    comparison = parts.attrs["comparison"]
    assert list(comparison["metric"]) == ["train_step_s"] and comparison["verdict"].iloc[0]
    (label,) = parts.attrs["causes"]
    assert label == "cpu-channels-last against cpu-default (cpu, bs8)"
    for _, grp in parts.groupby("metric"):
        if bool(grp["explained"].iloc[0]):
            assert set(PART_COLUMNS) <= set(grp.columns) and grp["layer"].notna().all()
            assert grp["coverage"].iloc[0] == pytest.approx(grp["delta_s"].sum() / grp["whole_delta_s"].iloc[0])
        else:
            assert len(grp) == 1 and grp["why"].iloc[0], grp  # the whole, and why nothing is split


def test_the_baseline_is_the_first_variant_listed_whatever_order_the_rows_come_back_in(tmp_path, monkeypatch):
    """The results folder hands rows back in no set order; the baseline is still the first variant named."""
    from torch import nn

    import benchlib
    from benchlib.pipeline import compare as compare_module

    real = compare_module.run_benchmark
    monkeypatch.setattr(compare_module, "run_benchmark",
                        lambda plan, *a, **k: real(plan, *a, **k).iloc[::-1].reset_index(drop=True))
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(4, 3))
    table_names: list[list[str]] = []
    one_thread = {"name": "one-thread", "threads": 1}
    for order in (["cpu-default", one_thread], [one_thread, "cpu-default"]):
        table = benchlib.compare(net, variants=order, hardware="cpu", batch_sizes=[4], image_size=16, steps=2,
                                 results_dir=str(tmp_path / str(len(table_names))), metrics=["train_step_s"],
                                 settings={"latency_repeats": 3, "latency_budget_s": 0}, progress=None)
        names = [v if isinstance(v, str) else v["name"] for v in order]
        table_names.append(names)
        assert set(table["baseline"]) == {names[0]} and set(table["side"]) == {names[1]}, table
