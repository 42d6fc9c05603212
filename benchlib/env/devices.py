"""One code path for cpu, cuda, cuda:N and mps: resolving, checking and synchronizing devices."""
from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType

import torch

from ..errors import DeviceNotPresentError
from ..spec.vocab import HARDWARE_CHOICES, cuda_index, is_valid_hardware_name
from .gpu import TF32_BF16_CAPABILITY


def available_hardware() -> list[str]:
    """Hardware names present on this machine, most capable first."""
    names: list[str] = []
    if torch.cuda.is_available():
        names += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if mps_available():
        names.append("mps")
    names.append("cpu")
    return names


def mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_hardware(name: str) -> str:
    """Turn a hardware name into a present one (``auto`` picks cuda, then mps, then cpu).

    Raises DeviceNotPresentError naming what this machine has, so a study fails before any work.
    """
    if not is_valid_hardware_name(name):
        raise DeviceNotPresentError(f"unknown hardware '{name}'; allowed: {HARDWARE_CHOICES}")
    if name == "auto":
        return available_hardware()[0]
    if name == "cpu":
        return name
    if name == "mps":
        if not mps_available():
            raise DeviceNotPresentError(
                f"hardware 'mps' is not present on this machine; available: {', '.join(available_hardware())}"
            )
        return name
    index = cuda_index(name)
    assert index is not None
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        raise DeviceNotPresentError(
            f"hardware '{name}' is not present on this machine; available: {', '.join(available_hardware())}"
        )
    return name


def accelerator() -> ModuleType | None:
    """``torch.accelerator``, one interface to CUDA, MPS and the other backends, where this torch has it (2.6+).

    None on older torch: the callers fall back to CUDA's and MPS's own calls.
    """
    return getattr(torch, "accelerator", None)


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device``: call at timed-region boundaries only."""
    if device.type == "cpu":
        return
    generic = accelerator()
    if generic is not None:
        generic.synchronize(device)
    elif device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def device_name(device: torch.device) -> str:
    """A human name for the device (GPU model, or the CPU model string)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple MPS ({platform.machine()})"
    return cpu_model_name()


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_bf16_supported() -> bool:
    """oneDNN's own check for native bf16 kernels; True when torch cannot tell (run it rather than refuse).

    ``BENCHLIB_CPU_BF16=off`` (or ``on``) overrides the answer, in this process and those it starts: it lets a
    user and the suite see what a CPU without bf16 kernels gives, on a CPU that has them.
    """
    forced = os.environ.get("BENCHLIB_CPU_BF16")
    if forced in ("on", "off"):
        return forced == "on"
    check = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else True
    except RuntimeError:
        return True


def _cuda_bf16_supported(index: int) -> bool:
    """Native bf16 on ``cuda:index`` (capability 8.0+), asked of that device, not of the current one."""
    if not torch.cuda.is_available():
        return True  # cannot check without the device: let the run decide
    return torch.cuda.get_device_capability(index) >= TF32_BF16_CAPABILITY


def _mps_bf16_supported() -> bool:
    if not mps_available():
        return True
    return bool(torch.backends.mps.is_macos_or_newer(14, 0))


def bf16_supported(device: str | torch.device) -> bool:
    """Whether ``device`` (cpu, cuda, cuda:N, mps) runs bf16 natively; without it bf16 is slow emulation."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return _cuda_bf16_supported(dev.index or 0)
    return {"cpu": _cpu_bf16_supported, "mps": _mps_bf16_supported}.get(dev.type, lambda: True)()


def device_scope(device: torch.device) -> AbstractContextManager[object]:
    """Make ``device`` the current device of its backend for a block: events, streams and allocations default
    to it.

    Without it, an event recorded without a stream on ``cuda:1`` records on idle ``cuda:0`` and step times
    become launch times. ``torch.accelerator.device_index`` does it for any backend from torch 2.8; before,
    CUDA's own context (MPS has one device: nothing to choose).
    """
    if device.type == "cpu":
        return nullcontext()
    generic = accelerator()
    if generic is not None and hasattr(generic, "device_index"):
        return generic.device_index(device.index)
    if device.type == "cuda":
        return torch.cuda.device(device)
    return nullcontext()


def cuda_uuids(indices: Sequence[int]) -> list[str]:
    """UUIDs of CUDA devices by torch index, to find the same GPUs in NVML (whose order may differ)."""
    return [str(torch.cuda.get_device_properties(i).uuid) for i in indices]
