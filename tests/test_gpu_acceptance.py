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


def test_every_check_gives_a_verdict_with_its_figure(acceptance, tmp_path, capsys):
    out = tmp_path / "acceptance.json"
    code = acceptance.main(["--allow-cpu", "--quick", "--out", str(out), "--device", "cpu"])
    report = json.loads(out.read_text())
    names = [c["name"] for c in report["checks"]]
    assert code == (0 if report["passed"] else 1)
    assert len(report["checks"]) >= len(acceptance.CHECKS), "at least one verdict per check"
    assert "step timer: sum of step_s / host clock" in names and "ceiling fp32" in names
    for c in report["checks"]:
        assert set(c) == {"name", "figure", "unit", "expected", "passed", "detail"}
        assert c["passed"] in (True, False, None) and c["expected"]
    judged = [c for c in report["checks"] if c["passed"] is not None]
    assert judged and all(c["figure"] is not None for c in judged)
    assert "checks not failed" in capsys.readouterr().out
