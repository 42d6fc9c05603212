"""The environment manifest: every condition a result depends on, recorded once per machine."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from .._version import __version__
from ..errors import one_line
from .devices import available_hardware, cpu_model_name
from .tf32 import float32_matmul_precision, tf32_enabled
from .threads import slurm_cpus, usable_cpus


def machine_name() -> str:
    """Name of this machine in results: $BENCHLIB_MACHINE, else the host name."""
    return os.environ.get("BENCHLIB_MACHINE") or socket.gethostname()


def process_uid() -> str:
    """This process, told apart from every other: host, pid and the process's start time.

    Rows measured in one process share its allocator, thread placement and CPU speed, so their steps can be
    compared with each other; rows of different processes differ by the machine's run-to-run noise too.
    """
    return _PROCESS_UID


_PROCESS_UID = f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}"


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _cuda_section() -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"cuda_available": False}
    section: dict[str, Any] = {
        "cuda_available": True,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version(),
        "gpus": [
            {"index": i, "name": torch.cuda.get_device_name(i),
             "total_memory_bytes": torch.cuda.get_device_properties(i).total_memory,
             "capability": ".".join(map(str, torch.cuda.get_device_capability(i)))}
            for i in range(torch.cuda.device_count())
        ],
    }
    section["driver_version"], error = driver_version()
    if error:
        section["driver_version_error"] = error
    return section


def driver_version() -> tuple[str | None, str | None]:
    """(the NVIDIA driver's version, or None and why not): NVML missing or not permitted is no failure."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return str(pynvml.nvmlSystemGetDriverVersion()), None
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:
        return None, one_line(exc)


def collect_manifest() -> dict[str, Any]:
    """Every condition a result depends on (docs/measurement.md, \"Conditions\")."""
    # imported here, not above: a study's driver process reads machine_name() but never builds a model, and
    # torchvision's import (torch._dynamo with it) is 1.5 s of every such process; a measuring process has it
    import torchvision
    manifest: dict[str, Any] = {
        "benchlib_version": __version__,
        "git_commit": _git_commit(),
        "machine": machine_name(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cpu_model": cpu_model_name(),
        "cpu_count_logical": os.cpu_count(),
        "cpus_usable": usable_cpus(),
        "slurm_cpus_per_task": slurm_cpus(),  # the CPUs SLURM gave the task (None outside SLURM)
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "mkldnn_available": torch.backends.mkldnn.is_available(),
        "hardware_available": available_hardware(),
        # The process's defaults; each configuration sets its variant's own (the row's tf32, cudnn_benchmark).
        "default_tf32_matmul": tf32_enabled("matmul"),
        "default_tf32_cudnn": tf32_enabled("cudnn"),
        "default_cudnn_benchmark": torch.backends.cudnn.benchmark,
        "default_float32_matmul_precision": float32_matmul_precision(),
    }
    manifest.update(_cuda_section())
    return manifest


def manifest_id(manifest: dict[str, Any]) -> str:
    """Short content hash: rows point to their manifest file by it."""
    blob = json.dumps(manifest, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
