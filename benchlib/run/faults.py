"""Fault injection for drills and tests: make a chosen configuration fail the way real runs fail.

Set ``BENCHLIB_FAULT=ACTION@TEXT`` in the environment (kernels inherit it): the first configuration whose
run_id contains TEXT then, before it is measured,

- ``raise``: raises in the notebook cell (a pair notebook that errors),
- ``exit``: ends the process at once with status 137, as the kernel OOM killer does (a dead kernel).

Nothing happens when the variable is unset. Used by ``tests/`` and ``benchmarks/fault_drill.sh``.
"""
from __future__ import annotations

import os

from ..errors import InjectedFault

ENV = "BENCHLIB_FAULT"
ACTIONS = ("raise", "exit")


def maybe_inject(run_id: str) -> None:
    spec = os.environ.get(ENV, "")
    if not spec:
        return
    action, _, text = spec.partition("@")
    if action not in ACTIONS or not text or text not in run_id:
        return
    if action == "raise":
        raise InjectedFault(f"injected fault ({ENV}={spec}) before {run_id}")
    os._exit(137)
