"""CPU thread settings, applied before torch's first parallel call.

The default is the number of CPUs this process may run on (``os.sched_getaffinity``: what SLURM,
taskset or a container grants), not ``os.cpu_count()``.
"""
from __future__ import annotations

import os
import warnings

import torch


def usable_cpu_ids() -> list[int]:
    """The CPUs (core numbers as /proc/stat names them) the process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def usable_cpus() -> int:
    """CPUs the process may use."""
    return len(usable_cpu_ids())


def default_threads() -> int:
    """Threads per process: the usable CPUs shared among the data-parallel processes of this node."""
    return max(1, usable_cpus() // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def apply_threads(intra_op: int | None = None, inter_op: int | None = None) -> tuple[int, int]:
    """Set torch's intra- and inter-op thread counts and the OpenMP/MKL environment for children.

    Call first thing in a process or kernel: inter-op threads cannot change once parallel work ran;
    then the value in force is kept and a warning says so. Returns (intra_op, inter_op) in force.
    """
    intra = intra_op or default_threads()
    os.environ["OMP_NUM_THREADS"] = str(intra)
    os.environ["MKL_NUM_THREADS"] = str(intra)
    torch.set_num_threads(intra)
    if inter_op is not None and inter_op != torch.get_num_interop_threads():
        try:
            torch.set_num_interop_threads(inter_op)
        except RuntimeError:
            warnings.warn(
                f"inter-op threads stay {torch.get_num_interop_threads()}: set them before any parallel torch work",
                stacklevel=2,
            )
    return torch.get_num_threads(), torch.get_num_interop_threads()
