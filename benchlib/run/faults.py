"""Fault injection for drills and tests: make a chosen configuration fail the way real runs fail.

Set ``BENCHLIB_FAULT=ACTION@TEXT`` in the environment (kernels inherit it; several faults comma-separated,
``raise@squeezenet1_1__bs8,exit@resnet18``): the first configuration whose run_id contains TEXT then, before
it is measured,

- ``raise``: raises in the notebook cell (a pair notebook that errors),
- ``exit``: ends the process at once with status 137, as the kernel OOM killer does (a dead kernel),
- ``setup``: raises while the configuration is set up, on data-parallel rank ``$BENCHLIB_FAULT_RANK``
  only (every rank when unset): one rank that fails while the others wait for it.
- ``step``: raises when the training loop asks for its second batch, on rank ``$BENCHLIB_FAULT_RANK``
  only (every rank when unset): one rank that fails mid-training while the others are inside a
  gradient all-reduce.

Nothing happens when the variable is unset. Used by ``tests/`` and ``benchmarks/fault_drill.sh``.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..errors import InjectedFault

ENV = "BENCHLIB_FAULT"
RANK_ENV = "BENCHLIB_FAULT_RANK"
FAULT_AT_BATCH = 1  # the step fault: the second batch (the first step ran, DDP's buckets are built)


def _armed(run_id: str, actions: tuple[str, ...]) -> str | None:
    """The first fault of ``actions`` whose text the run id contains; None when no fault is armed for it."""
    for spec in os.environ.get(ENV, "").split(","):
        action, _, text = spec.strip().partition("@")
        if action in actions and text and text in run_id:
            return action
    return None


def maybe_inject(run_id: str) -> None:
    """Before a configuration of a pair: the ``raise`` and ``exit`` faults."""
    action = _armed(run_id, ("raise", "exit"))
    if action == "raise":
        raise InjectedFault(f"injected fault ({ENV}={os.environ[ENV]}) before {run_id}")
    if action == "exit":
        os._exit(137)


def maybe_inject_setup(run_id: str, rank: int) -> None:
    """While a configuration is set up: the ``setup`` fault, on one data-parallel rank or all."""
    if _armed(run_id, ("setup",)) and _rank_wanted(rank):
        raise InjectedFault(f"injected fault ({ENV}={os.environ[ENV]}) in the set-up of {run_id} on rank {rank}")


def _rank_wanted(rank: int) -> bool:
    wanted = os.environ.get(RANK_ENV)
    return wanted is None or int(wanted) == rank


class _FailingLoader:
    """A training loader that raises when asked for batch :data:`FAULT_AT_BATCH` (everything else passes)."""

    def __init__(self, loader: Any, message: str) -> None:
        self._loader, self._message = loader, message

    def __getattr__(self, name: str) -> Any:  # sampler, dataset, batch_size: the real loader's
        return getattr(self._loader, name)

    def __len__(self) -> int:
        return len(self._loader)

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(self._loader):
            if i == FAULT_AT_BATCH:
                raise InjectedFault(self._message)
            yield batch


def maybe_failing_loader(loader: Any, run_id: str, rank: int) -> Any:
    """The training loader, or (the ``step`` fault, on its rank) one that fails mid-training."""
    if _armed(run_id, ("step",)) and _rank_wanted(rank):
        return _FailingLoader(loader, f"injected fault ({ENV}={os.environ[ENV]}) in training step "
                                      f"{FAULT_AT_BATCH + 1} of {run_id} on rank {rank}")
    return loader
