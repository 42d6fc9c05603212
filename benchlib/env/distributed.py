"""Data-parallel training across processes launched by torchrun (DistributedDataParallel).

NCCL on GPUs, gloo on CPU. The configured batch size is the GLOBAL batch: each of the ``world_size``
ranks trains on ``batch_size / world_size`` samples per step; rank 0 measures, evaluates and writes the row.
"""
from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..errors import ConfigError


@dataclass(frozen=True)
class DistInfo:
    rank: int
    local_rank: int
    world_size: int
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_world_size() -> int:
    """How many processes torchrun started for this run (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_by_torchrun() -> bool:
    return launched_world_size() > 1


TIMEOUT_ENV = "BENCHLIB_DIST_TIMEOUT_S"
# A rank that raises tells the others at once (env/rank_watch.py); this bounds the wait for one that hangs or
# whose node died without a word: the others give up on a collective after this long.
DEFAULT_TIMEOUT_S = 300.0


def timeout() -> datetime.timedelta:
    """How long a collective may wait for a silent rank before every rank gives up ($BENCHLIB_DIST_TIMEOUT_S)."""
    return datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)))


def init(device: torch.device) -> DistInfo | None:
    """Join the process group torchrun set up (None when not launched by torchrun).

    Each GPU rank binds its own device (``cuda:LOCAL_RANK``) before the group forms, and collectives
    time out after :func:`timeout` instead of NCCL's ten minutes, so one silent rank does not hang the rest.
    """
    if not launched_by_torchrun():
        return None
    if device.type == "cuda" and device.index is not None and device.index != 0:
        raise ConfigError(f"hardware '{device}' with several processes: each process takes cuda:LOCAL_RANK; "
                          "allowed: hardware cuda (or CUDA_VISIBLE_DEVICES to choose the GPUs)")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(local_rank)
            dist.init_process_group(backend=backend, timeout=timeout(), device_id=torch.device("cuda", local_rank))
        else:
            dist.init_process_group(backend=backend, timeout=timeout())
    return DistInfo(dist.get_rank(), local_rank, dist.get_world_size(), backend)


def rank_device(hardware_device: torch.device, info: DistInfo | None) -> torch.device:
    """Each rank drives its own GPU (cuda:LOCAL_RANK); CPU ranks share the CPU."""
    if info is not None and hardware_device.type == "cuda":
        torch.cuda.set_device(info.local_rank)
        return torch.device("cuda", info.local_rank)
    return hardware_device


def local_world_size() -> int:
    """Processes torchrun started on this node (1 without torchrun)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def local_peer_pids(info: DistInfo | None) -> list[int]:
    """The process ids of the other ranks on this machine (a collective: every rank calls it).

    Their CPU is the run's own: without them a data-parallel row reads its own ranks as interference.
    """
    if info is None:
        return []
    mine = (socket.gethostname(), os.getpid())
    everyone: list[tuple[str, int] | None] = [None] * info.world_size
    dist.all_gather_object(everyone, mine)
    return [entry[1] for entry in everyone if entry is not None and entry[0] == mine[0] and entry != mine]


def per_rank_batch(global_batch: int, info: DistInfo | None) -> int:
    if info is None:
        return global_batch
    if global_batch % info.world_size:
        raise ConfigError(f"batch_size {global_batch} does not split over {info.world_size} processes; "
                          f"allowed: multiples of {info.world_size}")
    return global_batch // info.world_size


def weights_in_sync(model: torch.nn.Module, info: DistInfo | None) -> bool | None:
    """True when every rank holds the same weights after training (what DDP's all-reduce guarantees)."""
    if info is None:
        return None
    checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).sum().reshape(1)
    checksum = checksum.to(next(model.parameters()).device)
    gathered = [torch.zeros_like(checksum) for _ in range(info.world_size)]
    dist.all_gather(gathered, checksum)
    return bool(all(torch.allclose(g, gathered[0], rtol=1e-9, atol=1e-6) for g in gathered))


def barrier(info: DistInfo | None) -> None:
    if info is not None:
        dist.barrier()


