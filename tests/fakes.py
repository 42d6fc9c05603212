"""The one fake layer for what this CPU machine lacks: CUDA devices as torch reports them, NVML (or its
absence), torch's device-generic API and device events, and the process group torchrun sets up (its
key-value store and the collectives benchlib calls).

Tests of the GPU path run here without a GPU, so they see only what benchlib asks of torch and NVML: how
many devices, each one's name, compute capability, memory and UUID, the architectures the build carries,
NVML's counters, and which of torch's calls (generic or per backend) synchronize and time a device.
``fake_cuda``, ``FakeNvml`` and ``FakeAccelerator`` answer those questions for the GPUs and the torch
version a test describes (patched for that test only); anything that would run a kernel still fails, as it
should on CPU. Figures here are a part's published shape (name, capability, memory) or round test values,
never a measured speed.
"""
from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
import torch
import torch.distributed as dist

from benchlib.env import gpu as gpu_env

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
    # a child process would find no fake: it answers what the fake GPU has free
    monkeypatch.setattr(gpu_env, "free_bytes_in_child", lambda index: gpu(index).free_bytes)
    monkeypatch.setattr(torch.version, "cuda", cuda_version)


class FakeNvml:
    """NVML answering for ``count`` GPUs, each figure a function of the GPU's NVML index.

    The default: three GPUs whose NVML order differs from CUDA's (their UUIDs), each with an energy counter
    and a 100 W draw, all visible. ``uuids`` names the GPUs by NVML index (``fake_cuda``'s ``GPU-fake-N``
    names CUDA's cuda:N, in any order). ``two_boards()``: the telemetry test's two GPUs with figures that
    differ per board, the second without a power reading (NotSupported, like some boards and vGPUs). A figure
    function returning None answers NotSupported (an energy counter of None: a board before Volta).
    ``energy_mj`` holds each counter (a test moves it); ``calls`` counts init, shutdown and the per-GPU
    utilization and power queries.
    """

    uuids = {0: "GPU-CCC", 1: "GPU-aaa", 2: "GPU-bbb"}

    def __init__(self, count: int = 3, *, util: Callable[[int], tuple[int, int]] = lambda i: (50, 10),
                 memory_used_bytes: Callable[[int], int] = lambda i: 1, memory_total_bytes: int = 16 * 2**30,
                 power_mw: Callable[[int], int | None] = lambda i: 100_000,
                 temperature_c: Callable[[int], int] = lambda i: 40,
                 sm_clock_mhz: Callable[[int], int] = lambda i: 1000,
                 energy_mj: Callable[[int], int | None] = lambda i: 1000 * (i + 1), energy_step_mj: int = 0,
                 visible: str | None = "0,1,2", uuids: dict[int, str] | None = None,
                 power_instant_mw: Callable[[int], int | None] = lambda i: None) -> None:
        self.count, self.visible = count, visible
        if uuids is not None:
            self.uuids = dict(uuids)
        self.util, self.memory_used_bytes, self.memory_total_bytes = util, memory_used_bytes, memory_total_bytes
        self.power_mw, self.temperature_c, self.sm_clock_mhz = power_mw, temperature_c, sm_clock_mhz
        self.power_instant_mw = power_instant_mw  # None: a driver without the instant field (before 530)
        self.energy_mj = {i: energy_mj(i) for i in range(count)}
        self.energy_step_mj = energy_step_mj  # added at every read: a counter that moves
        self.calls: dict[str, int] = {}

    @classmethod
    def two_boards(cls) -> FakeNvml:
        return cls(2, util=lambda i: (40 + 20 * i, 10 + i), memory_used_bytes=lambda i: (i + 1) * 2**30,
                   power_mw=lambda i: None if i == 1 else 150_000, temperature_c=lambda i: 60 + i,
                   sm_clock_mhz=lambda i: 1400, energy_mj=lambda i: 1_000_000 * (i + 1), energy_step_mj=15_000,
                   visible=None)

    def _n(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    @staticmethod
    def _supported(value: Any) -> Any:
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def install(self, monkeypatch) -> FakeNvml:
        def energy(h: SimpleNamespace) -> int:
            if self.energy_mj[h.index] is not None:
                self.energy_mj[h.index] += self.energy_step_mj
            return self._supported(self.energy_mj[h.index])

        def util(h: SimpleNamespace) -> SimpleNamespace:
            self._n(f"util{h.index}")
            gpu, memory = self.util(h.index)
            return SimpleNamespace(gpu=gpu, memory=memory)

        def power(h: SimpleNamespace) -> int:
            self._n(f"power{h.index}")
            return self._supported(self.power_mw(h.index))

        def fields(h: SimpleNamespace, ids: list[int]) -> list[SimpleNamespace]:
            assert ids == [pynvml.NVML_FI_DEV_POWER_INSTANT]
            self._n(f"power_instant{h.index}")
            mw = self.power_instant_mw(h.index)
            status = pynvml.NVML_SUCCESS if mw is not None else pynvml.NVML_ERROR_NOT_SUPPORTED
            return [SimpleNamespace(nvmlReturn=status, value=SimpleNamespace(uiVal=mw or 0))]

        def temperature(h: SimpleNamespace, sensor: int) -> int:
            assert sensor == pynvml.NVML_TEMPERATURE_GPU
            return self.temperature_c(h.index)

        def clock(h: SimpleNamespace, which: int) -> int:
            assert which == pynvml.NVML_CLOCK_SM
            return self.sm_clock_mhz(h.index)

        answers = {
            "nvmlInit": lambda: self._n("init"), "nvmlShutdown": lambda: self._n("shutdown"),
            "nvmlDeviceGetCount": lambda: self.count,
            "nvmlDeviceGetHandleByIndex": lambda i: SimpleNamespace(index=i),
            "nvmlDeviceGetUUID": lambda h: self.uuids[h.index],
            "nvmlDeviceGetTotalEnergyConsumption": energy, "nvmlDeviceGetUtilizationRates": util,
            "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(total=self.memory_total_bytes,
                                                                 used=self.memory_used_bytes(h.index), free=0),
            "nvmlDeviceGetPowerUsage": power, "nvmlDeviceGetFieldValues": fields,
            "nvmlDeviceGetTemperature": temperature,
            "nvmlDeviceGetClockInfo": clock,
        }
        for name, answer in answers.items():
            monkeypatch.setattr(pynvml, name, answer)
        if self.visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", self.visible)
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


@pytest.fixture
def no_nvml(monkeypatch):
    """A machine without NVIDIA's driver: NVML's library is not found, so ``nvmlInit`` raises.

    A fixture in a test module as ``no_nvml = fakes.no_nvml`` (pytest finds it by that name).
    """
    def fail():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)


class FakeEvent:
    """A timing event of any of torch's classes (``torch.Event``, CUDA's, MPS's): each ``record`` lands in
    ``calls`` with the stream it was given, and any two recorded events are 2 ms apart."""

    def __init__(self, calls: list[tuple[str, object]], enable_timing: bool = False) -> None:
        assert enable_timing, "a timing event: elapsed_time needs enable_timing=True"
        self.calls = calls

    def record(self, stream: object = None) -> None:
        self.calls.append(("record", stream))

    def elapsed_time(self, end: FakeEvent) -> float:
        return 2.0


@dataclass
class FakeAccelerator:
    """torch's device-generic API as ``torch_version`` has it, beside the per-backend calls it replaces.

    ``torch.accelerator`` (``synchronize``, ``current_stream``) came in 2.6, ``torch.accelerator.device_index``
    in 2.8; ``torch.Event`` is there throughout (2.4+). Every call, generic or per backend (CUDA's and MPS's
    synchronize, CUDA's device context and current stream, the three event classes), lands in ``calls`` as
    (what was called, its device), so a test sees which path ran; streams are strings naming the API and
    the device they were asked for, and events are :class:`FakeEvent`.
    """

    torch_version: tuple[int, int] = (2, 8)
    calls: list[tuple[str, object]] = field(default_factory=list)

    def _log(self, name: str, device: object = None) -> None:
        self.calls.append((name, device))

    def _event_class(self, name: str) -> Callable[..., FakeEvent]:
        def make(device: object = None, *, enable_timing: bool = False) -> FakeEvent:
            self._log(name, device)
            return FakeEvent(self.calls, enable_timing)
        return make

    def _context(self, name: str, device: object) -> nullcontext[None]:
        self._log(name, device)
        return nullcontext()

    def install(self, monkeypatch) -> FakeAccelerator:
        per_backend = {
            (torch.cuda, "synchronize"): lambda device=None: self._log("cuda.synchronize", device),
            (torch.cuda, "current_stream"): lambda device=None: f"cuda stream of {device}",
            (torch.cuda, "device"): lambda device: self._context("cuda.device", device),
            (torch.cuda, "Event"): self._event_class("cuda.Event"),
            (torch.mps, "synchronize"): lambda: self._log("mps.synchronize"),
            (torch.mps.event, "Event"): self._event_class("mps.Event"),
            (torch, "Event"): self._event_class("Event"),
        }
        for (module, name), answer in per_backend.items():
            monkeypatch.setattr(module, name, answer)
        if self.torch_version < (2, 6):
            monkeypatch.delattr(torch, "accelerator", raising=False)
            return self
        generic = SimpleNamespace(  # a module of its own: the floor's torch (2.5) has none to patch
            synchronize=lambda device=None: self._log("accelerator.synchronize", device),
            current_stream=lambda device=None: f"accelerator stream of {device}")
        if self.torch_version >= (2, 8):
            generic.device_index = lambda index: self._context("accelerator.device_index", index)
        monkeypatch.setattr(torch, "accelerator", generic, raising=False)
        return self


class FakeStore:
    """torchrun's key-value store as every rank sees it (one dict, shared by the ranks a test plays)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str | bytes) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        return self.data[key]

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def wait(self, keys: list[str], timeout: datetime.timedelta) -> None:
        deadline = time.monotonic() + timeout.total_seconds()
        while not self.check(keys):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Socket Timeout: wait for {keys}")  # what DistStoreError says (a RuntimeError)
            time.sleep(0.01)


@dataclass
class FakeProcessGroup:
    """One rank of a group torchrun launched: its environment, and ``torch.distributed`` answering as that rank.

    ``calls`` records what was asked of the group (init's arguments, the collectives) so a test sees what a
    real NCCL or gloo group would have been asked; collectives return this rank's own values, as a group
    whose other ranks agree would, or, with ``peer_offset``, the other ranks' tensors off by that much (ranks
    that disagree).
    """

    rank: int = 0
    world_size: int = 2
    local_rank: int | None = None
    local_world_size: int | None = None
    store: FakeStore = field(default_factory=FakeStore)
    calls: list[tuple[str, dict]] = field(default_factory=list)
    initialized: bool = False
    peer_offset: float = 0.0

    def install(self, monkeypatch) -> FakeProcessGroup:
        local = self.rank if self.local_rank is None else self.local_rank
        for key, value in {"WORLD_SIZE": self.world_size, "RANK": self.rank, "LOCAL_RANK": local,
                           "LOCAL_WORLD_SIZE": self.local_world_size or self.world_size,
                           "MASTER_ADDR": "fake-host", "MASTER_PORT": 29500}.items():
            monkeypatch.setenv(key, str(value))

        def init_process_group(backend=None, **kwargs):
            self.calls.append(("init_process_group", {"backend": backend, **kwargs}))
            self.initialized = True

        def record(name):
            def call(*args, **kwargs):
                self.calls.append((name, {"args": args, **kwargs}))
            return call

        def all_gather(out, tensor, **kwargs):
            self.calls.append(("all_gather", kwargs))
            for i, t in enumerate(out):
                t.copy_(tensor if i == self.rank else tensor + self.peer_offset)

        def all_gather_object(out, obj, **kwargs):
            self.calls.append(("all_gather_object", kwargs))
            out[:] = [obj] * len(out)

        monkeypatch.setattr(dist, "init_process_group", init_process_group)
        monkeypatch.setattr(dist, "is_initialized", lambda: self.initialized)
        monkeypatch.setattr(dist, "get_rank", lambda group=None: self.rank)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: self.world_size)
        monkeypatch.setattr(dist, "all_reduce", record("all_reduce"))
        monkeypatch.setattr(dist, "barrier", record("barrier"))
        monkeypatch.setattr(dist, "all_gather", all_gather)
        monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
        monkeypatch.setattr(dist, "destroy_process_group", lambda group=None: setattr(self, "initialized", False))
        monkeypatch.setattr(dist, "TCPStore", lambda host, port, **kwargs: self.store)
        monkeypatch.setattr(torch.cuda, "set_device", record("cuda.set_device"))
        return self

    def called(self, name: str) -> list[dict]:
        return [kwargs for n, kwargs in self.calls if n == name]
