"""Fault injection for drills and tests: make a chosen configuration fail the way real runs fail.

Set ``BENCHLIB_FAULT=ACTION@TEXT`` in the environment (kernels inherit it): the first configuration whose
run_id contains TEXT then, before it is measured,

- ``raise``: raises in the notebook cell (a pair notebook that errors),
- ``exit``: ends the process at once with status 137, as the kernel OOM killer does (a dead kernel),
- ``setup``: raises while the configuration is set up, on data-parallel rank ``$BENCHLIB_FAULT_RANK``
  only (every rank when unset): one rank that fails while the others wait for it.

Nothing happens when the variable is unset. Used by ``tests/`` and ``benchmarks/fault_drill.sh``.
"""
from __future__ import annotations

import os

from ..errors import InjectedFault

ENV = "BENCHLIB_FAULT"
RANK_ENV = "BENCHLIB_FAULT_RANK"
ACTIONS = ("raise", "exit", "setup")


def _armed(run_id: str, actions: tuple[str, ...]) -> str | None:
    spec = os.environ.get(ENV, "")
    action, _, text = spec.partition("@")
    return action if action in actions and text and text in run_id else None


def maybe_inject(run_id: str) -> None:
    """Before a configuration of a pair: the ``raise`` and ``exit`` faults."""
    action = _armed(run_id, ("raise", "exit"))
    if action == "raise":
        raise InjectedFault(f"injected fault ({ENV}={os.environ[ENV]}) before {run_id}")
    if action == "exit":
        os._exit(137)


def maybe_inject_setup(run_id: str, rank: int) -> None:
    """While a configuration is set up: the ``setup`` fault, on one data-parallel rank or all."""
    wanted = os.environ.get(RANK_ENV)
    if _armed(run_id, ("setup",)) and (wanted is None or int(wanted) == rank):
        raise InjectedFault(f"injected fault ({ENV}={os.environ[ENV]}) in the set-up of {run_id} on rank {rank}")
