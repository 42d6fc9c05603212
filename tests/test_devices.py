"""Waiting for a device and making it current: through ``torch.accelerator`` where the torch has it, through
CUDA's and MPS's own calls before (the floor, 2.5), and never for the CPU."""
from __future__ import annotations

import pytest
import torch
from fakes import FakeAccelerator

from benchlib.env.devices import device_scope, synchronize

CUDA1, MPS, CPU = torch.device("cuda", 1), torch.device("mps"), torch.device("cpu")


@pytest.mark.parametrize("version, device, expected", [
    ((2, 6), CUDA1, [("accelerator.synchronize", CUDA1)]),
    ((2, 6), MPS, [("accelerator.synchronize", MPS)]),
    ((2, 5), CUDA1, [("cuda.synchronize", CUDA1)]),
    ((2, 5), MPS, [("mps.synchronize", None)]),
    ((2, 6), CPU, []),
    ((2, 5), CPU, []),
])
def test_synchronize_waits_through_torch_accelerator_where_torch_has_it(monkeypatch, version, device, expected):
    fake = FakeAccelerator(version).install(monkeypatch)
    synchronize(device)
    assert fake.calls == expected, "the run's own device, by the one call its torch offers"


@pytest.mark.parametrize("version, device, expected", [
    ((2, 8), CUDA1, [("accelerator.device_index", 1)]),
    ((2, 8), MPS, [("accelerator.device_index", None)]),  # one MPS device: no index, nothing switched
    ((2, 6), CUDA1, [("cuda.device", CUDA1)]),  # torch.accelerator without device_index: CUDA's own context
    ((2, 5), CUDA1, [("cuda.device", CUDA1)]),
    ((2, 6), MPS, []),
    ((2, 8), CPU, []),
])
def test_device_scope_makes_the_runs_device_current_by_the_generic_call_from_torch_2_8(monkeypatch, version, device,
                                                                                       expected):
    fake = FakeAccelerator(version).install(monkeypatch)
    with device_scope(device):
        pass
    assert fake.calls == expected
