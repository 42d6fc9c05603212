"""What a CUDA device is and whether this torch build can use it: kernels, precisions, memory, MIG.

Every answer is for one device index, the one a row targets, never "the current device": on a machine
with a T4 beside an A100, bf16 on ``cuda:1`` is a question about ``cuda:1``. Each ``*_problem`` returns one
line naming the GPU, what it lacks and what to do, or None when there is no problem, so the preflight can
refuse a study before any work.
"""
from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass

import torch

from .mig import is_mig_name

# Below this, a bandwidth copy fits in the last-level cache of current GPUs (up to 126 MiB on Blackwell
# parts, 50 MiB on H100): its figure would be cache bandwidth, not the DRAM roof the roofline needs.
MIN_COPY_BYTES = 256 * 2**20
# The share of the free memory the ceilings' buffers may take: the caching allocator, cuBLAS workspaces
# and fragmentation need the rest.
FREE_SHARE = 0.5
# TF32 tensor cores and native bf16 start at this compute capability (Ampere): the one place it is stated.
TF32_BF16_CAPABILITY = (8, 0)
# Which wheels carry kernels for which GPUs (PyTorch's CUDA support matrix, release 2.14): the CUDA 13 wheels
# on PyPI from Turing on, the CUDA 12.6 "legacy" wheels from Maxwell to Hopper.
DEFAULT_CUDA_LOWEST = (7, 5)
LEGACY_CUDA_LOWEST = (5, 0)
LEGACY_CUDA_INDEX = "https://download.pytorch.org/whl/cu126"


@dataclass(frozen=True)
class GpuFacts:
    """One CUDA device as torch sees it."""

    index: int
    name: str
    capability: tuple[int, int]
    total_bytes: int
    free_bytes: int

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"

    @property
    def mig(self) -> bool:
        """A MIG slice (``NVIDIA A100-SXM4-40GB MIG 1g.5gb``): a fraction of the GPU's SMs and memory."""
        return is_mig_name(self.name)

    @property
    def form(self) -> str:
        """``mig``, ``sxm``, ``pcie`` or ``unknown``: the ceilings and datasheet ranges differ between them."""
        upper = self.name.upper()
        if self.mig:
            return "mig"
        if "SXM" in upper or "HBM3" in upper:  # H100/H200 SXM name themselves by their memory
            return "sxm"
        if "PCIE" in upper or "NVL" in upper:
            return "pcie"
        return "unknown"

    def label(self) -> str:
        return f"cuda:{self.index} ({self.name}, {self.sm})"


def free_bytes_in_child(index: int) -> int | None:
    """Free memory of ``cuda:index`` read by a short-lived child process (None where it cannot be read): asking
    torch here would leave a CUDA context, and its memory, on the GPU for as long as this process lives (a
    study's parent waits for hours while its notebooks measure). For where NVML cannot answer."""
    code = f"import torch; print(torch.cuda.mem_get_info({int(index)})[0])"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        return int(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def gpu_facts(index: int, free_bytes: int | None = None) -> GpuFacts:
    """Facts of ``cuda:index``; its free memory as the driver reports it now unless ``free_bytes`` is given
    (read elsewhere, e.g. through NVML: asking torch creates a CUDA context on the device)."""
    props = torch.cuda.get_device_properties(index)
    if free_bytes is None:
        free_bytes = int(torch.cuda.mem_get_info(index)[0])
    return GpuFacts(index=index, name=str(props.name), capability=(int(props.major), int(props.minor)),
                    total_bytes=int(props.total_memory), free_bytes=int(free_bytes))


def _archs(prefix: str, arch_list: list[str]) -> list[tuple[int, int]]:
    """``sm_86`` / ``compute_90`` entries as (major, minor); arch-specific ``sm_90a`` entries run only on their
    own part and are left out of the compatibility rule."""
    out = []
    for arch in arch_list:
        m = re.fullmatch(rf"{prefix}_(\d+)(\d)", arch)
        if m:
            out.append((int(m.group(1)), int(m.group(2))))
    return out


def arch_problem(gpu: GpuFacts, arch_list: list[str] | None = None) -> str | None:
    """Why this torch build cannot run kernels on ``gpu`` (None when it can).

    A cubin for ``sm_XY`` runs on a GPU of the same major version and a minor of Y or more; PTX for
    ``compute_XY`` is compiled by the driver for any GPU of capability X.Y or more. A build with neither
    fails inside the first kernel with "no kernel image is available", deep in a configuration.
    """
    archs = list(torch.cuda.get_arch_list() if arch_list is None else arch_list)
    if not archs:
        return None  # a build that does not say (not CUDA): let the run decide
    major, minor = gpu.capability
    if any(m == major and n <= minor for m, n in _archs("sm", archs)):
        return None
    if any((m, n) <= gpu.capability for m, n in _archs("compute", archs)):
        return None
    sms = sorted(_archs("sm", archs))
    has = f"sm_{sms[0][0]}{sms[0][1]} to sm_{sms[-1][0]}{sms[-1][1]}" if sms else ", ".join(archs)
    cuda = torch.version.cuda or "?"
    return (f"{gpu.label()}: this torch {torch.__version__} (CUDA {cuda}) has no kernels for {gpu.sm} (it has "
            f"{has}); {build_for(gpu)}")


def build_for(gpu: GpuFacts) -> str:
    """What to install for a GPU the default wheels leave out: PyTorch's CUDA 12.6 wheels, its "legacy" build
    through 2.14, carry kernels for Maxwell (sm_50) to Hopper (sm_90); the CUDA 13 wheels on PyPI start at
    Turing (sm_75). Below sm_50 no current build runs."""
    if gpu.capability < LEGACY_CUDA_LOWEST:
        return f"no current torch build has kernels for {gpu.sm}: use a GPU of compute capability 5.0 or newer"
    if gpu.capability < DEFAULT_CUDA_LOWEST:
        return (f"install PyTorch's CUDA 12.6 build of the same torch: make install TORCH_INDEX={LEGACY_CUDA_INDEX} "
                f"(in a fresh .venv), or pip install torch torchvision --index-url {LEGACY_CUDA_INDEX}")
    return f"install a newer torch whose torch.cuda.get_arch_list() includes {gpu.sm}"


def precision_problem(gpu: GpuFacts, precision: str) -> str | None:
    """Why ``precision`` (``bf16``, ``amp_bf16``, ``tf32``) has no native support on ``gpu`` (None when it has)."""
    if precision in ("bf16", "amp_bf16", "tf32") and gpu.capability < TF32_BF16_CAPABILITY:
        what = "TF32 tensor cores" if precision == "tf32" else "native bf16"
        instead = "fp32 (TF32 off)" if precision == "tf32" else "amp_fp16"
        return f"{gpu.label()} has no {what} (needs compute capability 8.0+); use {instead}"
    return None


def compile_problem(gpu: GpuFacts) -> str | None:
    """Why torch.compile cannot generate kernels for ``gpu`` (its triton backend needs capability 7.0+)."""
    if gpu.capability < (7, 0):
        return f"{gpu.label()}: torch.compile's triton backend needs compute capability 7.0+; use compile: off"
    return None


def copy_bytes_for(gpu: GpuFacts, wanted: int) -> int:
    """Bytes for each of the bandwidth test's two buffers: ``wanted``, or what ``FREE_SHARE`` of the free memory
    holds; ValueError (one line) when that is under ``MIN_COPY_BYTES``."""
    fits = int(gpu.free_bytes * FREE_SHARE) // 2
    if fits >= wanted:
        return wanted
    if fits < MIN_COPY_BYTES:
        raise ValueError(
            f"{gpu.label()}: {gpu.free_bytes / 2**30:.2f} GiB free of {gpu.total_bytes / 2**30:.1f} GiB; the "
            f"bandwidth ceiling needs two buffers of at least {MIN_COPY_BYTES // 2**20} MiB (larger than the GPU's "
            "cache) in half the free memory: free memory (other processes on this GPU: nvidia-smi) or use a "
            "larger MIG slice")
    return fits


def matmul_size_for(gpu: GpuFacts, wanted: int, element_bytes: int) -> int:
    """The square size of the compute ceiling's three matrices: ``wanted``, or the largest multiple of 256
    whose matrices fit in ``FREE_SHARE`` of the free memory (at least 256)."""
    budget = gpu.free_bytes * FREE_SHARE
    n = wanted
    while n > 256 and 3 * n * n * element_bytes > budget:
        n -= 256
    return n


def tf32_in_effect(device: torch.device) -> bool:
    """Whether the TF32 flags change anything on ``device``: CUDA with tensor cores of capability 8.0+ (on a T4
    or a V100 the flag is accepted and matmuls stay fp32, so the row's roof must be fp32's)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device.index or 0) >= TF32_BF16_CAPABILITY
