"""One code path for cpu, cuda, cuda:N and mps: resolving, checking and synchronizing devices."""
from __future__ import annotations

import platform
import re

import torch

from .errors import DeviceNotPresentError

HARDWARE_CHOICES = "cpu, cuda, cuda:N, mps, auto"
_CUDA_RE = re.compile(r"^cuda(?::(\d+))?$")


def available_hardware() -> list[str]:
    """Hardware names present on this machine, most capable first."""
    names: list[str] = []
    if torch.cuda.is_available():
        names += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        names.append("mps")
    names.append("cpu")
    return names


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def is_valid_hardware_name(name: str) -> bool:
    return name in ("cpu", "mps", "auto") or bool(_CUDA_RE.match(name))


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
        if not _mps_available():
            raise DeviceNotPresentError(f"hardware 'mps' is not present on this machine; available: {', '.join(available_hardware())}")
        return name
    match = _CUDA_RE.match(name)
    assert match is not None
    index = int(match.group(1) or 0)
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        raise DeviceNotPresentError(
            f"hardware '{name}' is not present on this machine; available: {', '.join(available_hardware())}"
        )
    return name


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device``: call at timed-region boundaries only."""
    if device.type == "cuda":
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
