"""CPU thread settings, applied before torch's first parallel call.

How many intra-op threads a process uses is decided, in this order, by an explicit ``threads`` setting,
the CPUs SLURM gave the task (``SLURM_CPUS_PER_TASK``: without an affinity plugin the task may still see
every CPU of the node), and the CPUs this process may run on (``os.sched_getaffinity``: what taskset, a
container or SLURM's task/affinity grants), never ``os.cpu_count()``. Each row records which one decided.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import torch

# Which rule decided a process's threads (the row's ``threads_source`` column).
THREAD_SOURCES: tuple[str, ...] = ("setting", "slurm", "affinity")
SLURM_CPUS_ENV = "SLURM_CPUS_PER_TASK"


def usable_cpu_ids() -> list[int]:
    """The CPUs (core numbers as /proc/stat names them) the process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def usable_cpus() -> int:
    """CPUs the process may use."""
    return len(usable_cpu_ids())


def slurm_cpus(environ: Mapping[str, str] | None = None) -> int | None:
    """The CPUs SLURM gave this task (``--cpus-per-task``), or None outside SLURM or when it was not asked."""
    value = (os.environ if environ is None else environ).get(SLURM_CPUS_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) >= 1 else None


@dataclass(frozen=True)
class ThreadChoice:
    """Intra-op threads for this process and the rule that decided them (one of :data:`THREAD_SOURCES`)."""

    threads: int
    source: str


def choose_threads(setting: int | None = None, environ: Mapping[str, str] | None = None) -> ThreadChoice:
    """An explicit setting, else SLURM's CPUs per task, else the affinity mask.

    SLURM's and the mask's CPUs are shared among the data-parallel processes of the node (torchrun's
    ``LOCAL_WORLD_SIZE``); an explicit setting is per process as given.
    """
    env = os.environ if environ is None else environ
    if setting is not None:
        return ThreadChoice(setting, "setting")
    local = max(1, int(env.get("LOCAL_WORLD_SIZE", "1") or 1))
    granted = slurm_cpus(env)
    if granted is not None:
        return ThreadChoice(max(1, granted // local), "slurm")
    return ThreadChoice(max(1, usable_cpus() // local), "affinity")


def default_threads() -> int:
    """Threads per process when no setting names them: SLURM's CPUs per task, else the affinity mask."""
    return choose_threads(None).threads


def apply_threads(intra_op: int | None = None, inter_op: int | None = None) -> tuple[int, int]:
    """Set torch's intra- and inter-op thread counts and the OpenMP/MKL environment for children.

    ``intra_op`` None follows :func:`choose_threads`. Call first thing in a process or kernel: inter-op
    threads cannot change once parallel work ran; then the value in force is kept and a warning says so.
    Returns (intra_op, inter_op) in force.
    """
    intra = choose_threads(intra_op).threads
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


_CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"
_SIZE_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


def _size_bytes(text: str) -> int:
    """``48K`` / ``2048K`` / ``32M`` as sysfs writes cache sizes; 0 for what it cannot read."""
    number, unit = (text[:-1], _SIZE_UNITS[text[-1]]) if text[-1:] in _SIZE_UNITS else (text, 1)
    return int(number) * unit if number.isdigit() else 0


def last_level_cache_bytes(cache_dir: str = _CACHE_DIR) -> int | None:
    """The size of the CPU's last-level cache as Linux describes it (None elsewhere): tensors that fit in it
    move faster than the DRAM bandwidth the roofline assumes."""
    best: tuple[int, int] | None = None
    try:
        entries = sorted(os.listdir(cache_dir))
    except OSError:
        return None
    for entry in entries:
        try:
            with open(os.path.join(cache_dir, entry, "level")) as f:
                level = int(f.read().strip())
            with open(os.path.join(cache_dir, entry, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        size = _size_bytes(text)
        if size and (best is None or level > best[0]):
            best = (level, size)
    return best[1] if best else None
