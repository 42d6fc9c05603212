"""The one fake layer for what this CPU machine lacks: CUDA devices as torch reports them, and NVML.

Tests of the GPU path run here without a GPU, so they see only what benchlib asks of torch and NVML: how
many devices, each one's name, compute capability, memory and UUID, the architectures the build carries,
and NVML's counters. ``fake_cuda`` and ``FakeNvml`` answer those questions for the GPUs a test describes
(patched for that test only); anything that would run a kernel still fails, as it should on CPU. Figures
here are a part's published shape (name, capability, memory) or round test values, never a measured speed.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pynvml
import torch

GIB = 2**30
# torch 2.14.1's CUDA 13 wheels, as `torch.cuda.get_arch_list()` prints them (kernels from sm_75 on).
CUDA13_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]


@dataclass(frozen=True)
class FakeGpu:
    name: str
    capability: tuple[int, int]
    total_gib: float
    free_gib: float | None = None  # None: all of it

    @property
    def total_bytes(self) -> int:
        return int(self.total_gib * GIB)

    @property
    def free_bytes(self) -> int:
        return int((self.total_gib if self.free_gib is None else self.free_gib) * GIB)


T4 = FakeGpu("Tesla T4", (7, 5), 15.0)
V100 = FakeGpu("Tesla V100-SXM2-16GB", (7, 0), 16.0)
P100 = FakeGpu("Tesla P100-PCIE-16GB", (6, 0), 16.0)
A100_SXM = FakeGpu("NVIDIA A100-SXM4-80GB", (8, 0), 80.0)
A100_MIG_1G = FakeGpu("NVIDIA A100-SXM4-40GB MIG 1g.5gb", (8, 0), 4.75)
H100_SXM = FakeGpu("NVIDIA H100 80GB HBM3", (9, 0), 79.2)
H100_PCIE = FakeGpu("NVIDIA H100 PCIe", (9, 0), 79.6)


def _index(device: object = None) -> int:
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    d = torch.device(device) if isinstance(device, str) else device
    return int(getattr(d, "index", None) or 0)


def fake_cuda(monkeypatch, *gpus: FakeGpu, arch_list: list[str] | None = None, cuda_version: str = "13.0") -> None:
    """``torch.cuda`` reports ``gpus`` (cuda:0, cuda:1, ...) and a build with ``arch_list`` for this test."""
    archs = list(CUDA13_ARCHS if arch_list is None else arch_list)

    def gpu(device: object = None) -> FakeGpu:
        i = _index(device)
        if not 0 <= i < len(gpus):
            raise RuntimeError(f"CUDA error: invalid device ordinal {i}")
        return gpus[i]

    def properties(device: object = None) -> SimpleNamespace:
        g = gpu(device)
        return SimpleNamespace(name=g.name, major=g.capability[0], minor=g.capability[1],
                               total_memory=g.total_bytes, uuid=f"GPU-fake-{_index(device)}",
                               multi_processor_count=1)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(gpus))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(gpus))
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: gpu(device).name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: gpu(device).capability)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (gpu(device).free_bytes,
                                                                          gpu(device).total_bytes))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(archs))
    monkeypatch.setattr(torch.version, "cuda", cuda_version)


class FakeNvml:
    """Three GPUs whose NVML order differs from CUDA's; each reports its UUID, an energy counter and a power
    draw (100 W)."""

    uuids = {0: "GPU-CCC", 1: "GPU-aaa", 2: "GPU-bbb"}

    def install(self, monkeypatch) -> FakeNvml:
        monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
        monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 3)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: SimpleNamespace(index=i))
        monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: self.uuids[h.index])
        monkeypatch.setattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption", lambda h: 1000 * (h.index + 1))
        rates = SimpleNamespace(gpu=50, memory=10)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", lambda h: rates)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: SimpleNamespace(used=1))
        monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", lambda h: 100_000)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetTemperature", lambda h, sensor: 40)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetClockInfo", lambda h, clock: 1000)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
        return self

    def with_mig(self, monkeypatch, gpu: int, slices: list[str]) -> FakeNvml:
        """GPU ``gpu`` in MIG mode with slices of these UUIDs (``MIG-...``, as NVML reports them)."""
        top_uuid = pynvml.nvmlDeviceGetUUID

        def uuid_of(h):
            return slices[h.slot] if getattr(h, "slot", None) is not None else top_uuid(h)

        def mig_handle(h, j):
            if h.index != gpu or j >= len(slices):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
            return SimpleNamespace(index=h.index, slot=j)

        monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", uuid_of)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetMigMode", lambda h: (int(h.index == gpu), int(h.index == gpu)))
        monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxMigDeviceCount", lambda h: 7 if h.index == gpu else 0)
        monkeypatch.setattr(pynvml, "nvmlDeviceGetMigDeviceHandleByIndex", mig_handle)
        return self
