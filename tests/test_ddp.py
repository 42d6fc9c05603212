"""Data-parallel training through torchrun: gloo with 2 processes on CPU."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import seed_ceilings

from benchlib.cli import main
from benchlib.report.tables.comparisons import scaling_table
from benchlib.store.rows import read_results, read_samples

COMMON = ["run", "--model", "resnet18", "--data", "synthetic", "--batch-size", "64", "--steps", "3",
          "--set", "warmup_steps=0", "--set", "synthetic_samples=256", "--set", "latency_repeats=3",
          "--set", "latency_budget_s=0", "--set", "infer_warmup_batches=1", "--json"]


def _run(out, capfd, *extra):
    """``benchlib run`` called in this process (a process's start is about 4 s here); with --nproc-per-node it
    launches torchrun as a user's command does, and the ranks print to this process's descriptors."""
    seed_ceilings(out)
    capfd.readouterr()
    code = main([*COMMON, "--results-dir", str(out), *extra])
    captured = capfd.readouterr()
    assert code == 0, captured.err[-3000:]
    lines = [ln for ln in captured.out.splitlines() if ln.startswith("{")]
    assert len(lines) == 1, "only rank 0 prints its row"
    row = json.loads(lines[0])
    losses = read_samples(out, row)
    return row, losses[losses["series"] == "loss"]["value"].tolist()


@pytest.mark.notebook
def test_gloo_two_processes_train_agree_and_write_one_row(tmp_path, capfd):
    single, single_losses = _run(tmp_path, capfd)
    ddp, ddp_losses = _run(tmp_path, capfd, "--nproc-per-node", "2")
    assert ddp["world_size"] == 2 and ddp["per_rank_batch_size"] == 32 and ddp["distributed_backend"] == "gloo"
    assert ddp["ddp_weights_in_sync"] is True
    assert single["world_size"] == 1 and single["ddp_weights_in_sync"] is None
    assert ddp["run_id"] == single["run_id"].replace("__seed0", "__ddp2__seed0")
    assert len(list((tmp_path / "rows").glob("*.json"))) == 2, "one row per run, side by side in one folder"
    scaling = scaling_table(read_results([tmp_path]), "world_size").set_index("world_size")
    # the speedup is the quotient of the figures the table prints beside it (each run's samples over its summed
    # steps, from its samples file): the ratio and the figures shown are one measurement
    assert scaling.loc[2, "speedup"] == pytest.approx(scaling.loc[2, "train_samples_per_s"]
                                                      / scaling.loc[1, "train_samples_per_s"])
    assert scaling.loc[2, "ci_low"] <= scaling.loc[2, "speedup"] <= scaling.loc[2, "ci_high"]
    assert len(ddp_losses) == len(single_losses) == 3
    # same initial weights and the same global batches; BatchNorm normalizes per rank, hence a tolerance
    for a, b in zip(ddp_losses, single_losses):
        assert a == pytest.approx(b, rel=0.05)
    assert ddp["train_samples_per_s"] > 0


@pytest.mark.gpu
@pytest.mark.notebook
def test_nccl_two_gpus(tmp_path):
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    out = tmp_path / "nccl"
    proc = subprocess.run([sys.executable, "-m", "benchlib", *COMMON, "--device", "cuda", "--results-dir", str(out),
                           "--nproc-per-node", "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][0])
    assert row["distributed_backend"] == "nccl" and row["world_size"] == 2 and row["ddp_weights_in_sync"] is True
    assert row["gpu_util_pct_mean"] is not None, "telemetry covers the GPUs"


@pytest.mark.notebook
@pytest.mark.parametrize("fault, rank", [("setup", "1"), ("step", "1"), ("step", "0")],
                         ids=["rank1-in-setup", "rank1-mid-training", "rank0-mid-training"])
@pytest.mark.slow
def test_a_rank_that_fails_stops_the_others_and_leaves_a_failure_row(tmp_path, fault, rank, monkeypatch):
    """One rank fails (in set-up, or inside training while the other waits in DDP's all-reduce): no rank waits
    out the collective timeout, the job ends non-zero, and rank 0 writes one row naming the failed rank."""
    import time

    for key, value in {"BENCHLIB_FAULT": f"{fault}@resnet18", "BENCHLIB_FAULT_RANK": rank,
                       "BENCHLIB_DIST_TIMEOUT_S": "120"}.items():
        monkeypatch.setenv(key, value)  # for the ranks torchrun starts (this process only launches them)
    seed_ceilings(tmp_path)
    t0 = time.monotonic()
    code = main([*COMMON, "--results-dir", str(tmp_path), "--nproc-per-node", "2"])
    assert time.monotonic() - t0 < 100, "no rank waited out the collective timeout"
    assert code != 0
    rows = read_results([tmp_path])
    assert len(rows) == 1 and rows.loc[0, "status"] == "failed"
    error = rows.loc[0, "error"]
    assert f"on rank {rank}" in error and "InjectedFault" in error
    if rank != "0":
        assert error.startswith(f"RankFailed: another data-parallel rank failed: rank {rank} of 2 on ")
