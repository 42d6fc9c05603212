"""Threads: an explicit setting, else the CPUs SLURM gave the task, else the affinity mask; the row says which."""
from __future__ import annotations

import os

import pytest
import torch

from benchlib.env.threads import apply_threads, choose_threads, usable_cpus
from benchlib.run.columns import measured_row
from benchlib.run.measure import measure
from benchlib.spec.settings import RunConfig


@pytest.mark.parametrize("setting,environ,expected", [
    (3, {"SLURM_CPUS_PER_TASK": "1"}, (3, "setting")),
    (None, {"SLURM_CPUS_PER_TASK": "1"}, (1, "slurm")),
    (None, {"SLURM_CPUS_PER_TASK": "8", "LOCAL_WORLD_SIZE": "2"}, (4, "slurm")),
    (None, {"SLURM_CPUS_PER_TASK": "1", "LOCAL_WORLD_SIZE": "2"}, (1, "slurm")),
    (None, {"SLURM_CPUS_PER_TASK": "lots"}, (usable_cpus(), "affinity")),
    (None, {}, (usable_cpus(), "affinity")),
])
def test_threads_come_from_the_setting_then_slurm_then_the_affinity_mask(setting, environ, expected):
    choice = choose_threads(setting, environ)
    assert (choice.threads, choice.source) == expected


def test_apply_threads_keeps_the_cpus_slurm_gave(monkeypatch):
    """Under SLURM without an affinity plugin the mask is the whole node: OMP_NUM_THREADS must stay SLURM's."""
    before = torch.get_num_threads()
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        assert apply_threads()[0] == 1
        assert os.environ["OMP_NUM_THREADS"] == "1"
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow
def test_a_row_records_its_threads_and_what_decided_them(monkeypatch, tiny_settings):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    before = torch.get_num_threads()
    row = measured_row(measure(RunConfig("t", "cpu", "squeezenet1_1", 8, tiny_settings)))
    assert (row["threads"], row["threads_source"]) == (1, "slurm")
    assert torch.get_num_threads() == before, "a configuration's threads end with it"
    explicit = measured_row(measure(RunConfig("t", "cpu", "squeezenet1_1", 8, tiny_settings.updated(threads=2))))
    assert (explicit["threads"], explicit["threads_source"]) == (2, "setting")
