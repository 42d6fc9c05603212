"""NVIDIA's management library (NVML): one way to open it and pick the GPUs, for telemetry and energy alike.

NVML names GPUs by its own index (PCI bus order); a source that cannot be read is recorded with a reason
rather than raised, so a machine without NVML still measures everything else.
"""
from __future__ import annotations

__all__ = ["NvmlDevices", "is_permanent", "nvml_reason", "pynvml", "visible_nvml_indices"]

import os
from collections.abc import Sequence
from typing import Any

from ..errors import one_line

try:  # nvidia-ml-py is a dependency, but a broken install must not break CPU measurements
    import pynvml
except ImportError:  # pragma: no cover - exercised only where the package is absent
    pynvml = None


def nvml_reason(exc: BaseException) -> str:
    """A short reason naming the NVML error class (e.g. ``NVMLError_NotSupported: Not Supported``)."""
    return one_line(exc)


def is_permanent(exc: BaseException) -> bool:
    """NotSupported / NoPermission will not change during a run: stop asking (each call costs time)."""
    if pynvml is None:
        return True
    permanent = tuple(getattr(pynvml, n) for n in ("NVMLError_NotSupported", "NVMLError_NoPermission",
                                                    "NVMLError_FunctionNotFound") if hasattr(pynvml, n))
    return isinstance(exc, permanent)


def visible_nvml_indices(cuda_visible_devices: str | None, device_count: int) -> list[int] | None:
    """NVML indices named by ``CUDA_VISIBLE_DEVICES`` when it is a plain list of integers, else None (all).

    Like CUDA, the list ends at the first index that names no device (so "-1" hides every GPU).
    NVML counts in PCI bus order, CUDA in its own order unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
    """
    if cuda_visible_devices is None:
        return None
    items = [s.strip() for s in cuda_visible_devices.split(",") if s.strip()]
    if not items:
        return []
    if not all(s.lstrip("-").isdigit() for s in items):
        return None  # UUIDs or MIG names: do not guess the mapping
    out: list[int] = []
    for s in items:
        i = int(s)
        if i < 0 or i >= device_count:
            break
        if i not in out:
            out.append(i)
    return out


def normal_uuid(uuid: str | bytes) -> str:
    """A GPU or MIG UUID as both NVML ("GPU-8e1d...", "MIG-90a4...") and torch ("8e1d...") can be compared:
    bare, lower case."""
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    text = text.strip().lower()
    return text[4:] if text.startswith(("gpu-", "mig-")) else text


def _mig_handles(parent: Any) -> list[Any]:
    """The MIG devices of a GPU in MIG mode (none otherwise, or where NVML cannot tell)."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(parent)
        if current != getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        count = int(pynvml.nvmlDeviceGetMaxMigDeviceCount(parent))
    except pynvml.NVMLError:
        return []
    out = []
    for j in range(count):
        try:
            out.append(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, j))
        except pynvml.NVMLError:
            continue  # an empty slot
    return out


def mig_slice_key(board: int, slot: int) -> int:
    """The key (and ``gpu<key>_`` column prefix) of a second MIG slice of GPU ``board``: 100 x (board + 1) +
    its slot, beyond any board index, so two slices of one GPU are two sets of figures."""
    return 100 * (board + 1) + slot


class NvmlDevices:
    """NVML initialized once and a handle per chosen GPU (by NVML index); ``missing`` says what is not there.

    Choose the GPUs by ``uuids`` (what torch reports for the devices a run uses: CUDA's order and NVML's
    can differ, under ``CUDA_DEVICE_ORDER=FASTEST_FIRST`` or with mixed GPUs), or by NVML index
    (``gpu_indices``); with neither, the GPUs ``CUDA_VISIBLE_DEVICES`` names (when plain integers), else all.
    Call :meth:`close` (or use ``with``) to shut NVML down again.
    """

    def __init__(self, gpu_indices: Sequence[int] | None = None, *, uuids: Sequence[str] | None = None):
        self.handles: dict[int, Any] = {}
        self.missing: dict[str, str] = {}
        self.mig: set[int] = set()  # handles that are MIG slices (keyed by their GPU's index)
        self._initialized = False
        if pynvml is None:
            self.missing["gpu"] = "NVML unavailable: nvidia-ml-py (pynvml) is not installed"
            return
        try:
            pynvml.nvmlInit()
            self._initialized = True
            count = int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            self.missing["gpu"] = f"NVML unavailable: {nvml_reason(exc)}"
            self.close()
            return
        if uuids is not None:
            self._by_uuid([normal_uuid(u) for u in uuids], count)
        else:
            for i in self._choose(gpu_indices, count):
                try:
                    self.handles[i] = pynvml.nvmlDeviceGetHandleByIndex(i)
                except pynvml.NVMLError as exc:
                    self.missing[f"gpu{i}"] = f"no handle: {nvml_reason(exc)}"
        if not self.handles and "gpu" not in self.missing:
            self.missing["gpu"] = "no visible GPU" if count else "NVML reports no GPU"

    def _by_uuid(self, wanted: list[str], count: int) -> None:
        """Handles of the GPUs whose UUIDs are ``wanted``, keyed by their NVML index.

        torch names a MIG slice by the slice's own UUID, which no top-level NVML device carries: the slices
        of each GPU in MIG mode are searched too, and a slice found is keyed by its GPU's index and listed
        in ``mig`` (NVML reads its board's power and energy, not the slice's: those are left unmeasured).
        A second slice of the same GPU (two ranks of one job on two slices of one board) is keyed by
        :func:`mig_slice_key`, so neither slice's figures overwrite the other's.
        """
        found: set[str] = set()
        for i in range(count):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = normal_uuid(pynvml.nvmlDeviceGetUUID(handle))
            except pynvml.NVMLError:
                continue
            if uuid in wanted:
                self.handles[i] = handle
                found.add(uuid)
                continue
            for slot, mig in enumerate(_mig_handles(handle) if set(wanted) - found else []):
                try:
                    mig_uuid = normal_uuid(pynvml.nvmlDeviceGetUUID(mig))
                except pynvml.NVMLError:
                    continue
                if mig_uuid in wanted and mig_uuid not in found:
                    key = i if i not in self.handles else mig_slice_key(i, slot)
                    self.handles[key] = mig
                    self.mig.add(key)
                    found.add(mig_uuid)
        lost = [u for u in wanted if u not in found]
        if lost:
            self.missing["gpu_uuid"] = f"no NVML device has UUID {', '.join(lost)}"

    def _choose(self, gpu_indices: Sequence[int] | None, count: int) -> list[int]:
        if gpu_indices is not None:
            bad = [i for i in gpu_indices if not 0 <= i < count]
            if bad:
                self.missing["gpu_indices"] = f"NVML has {count} GPU(s); no GPU {bad}"
            return [i for i in gpu_indices if 0 <= i < count]
        visible = visible_nvml_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), count)
        return list(range(count)) if visible is None else visible

    def close(self) -> None:
        if self._initialized:
            self._initialized = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass

    def __enter__(self) -> NvmlDevices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def free_bytes(uuid: str) -> int | None:
    """Free memory of the GPU (or MIG slice) torch names ``uuid``, read through NVML; None where NVML cannot tell.

    Unlike ``torch.cuda.mem_get_info`` it creates no CUDA context: a study's parent process, which only
    checks the GPUs before its notebooks start, would otherwise hold a context's memory for hours.
    """
    with NvmlDevices(uuids=[uuid]) as devices:
        if not devices.handles:
            return None
        try:
            return int(pynvml.nvmlDeviceGetMemoryInfo(next(iter(devices.handles.values()))).free)
        except pynvml.NVMLError:
            return None
