"""Hooks run before each timed step: the public seam for tools that run benchlib beside other processes.

A tool that runs benchlib in lockstep with another process (each step alone, in turn) or probes what a part of
the harness costs needs a moment before every step, outside its timer. ``before_step(hook)`` registers
``hook(kind)``, called before each training step (``"train"``: the training loop's and ``benchlib layers``')
and each timed forward (``"forward"``: a latency sample, a batch-1 forward of ``benchlib layers``), before its
data wait and its timer start. None is registered by default, and then a step pays one empty loop.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

STEP_KINDS = ("train", "forward")
StepHook = Callable[[str], Any]  # called with the kind of step about to start; what it returns is not read
_HOOKS: list[StepHook] = []


def before_step(hook: StepHook) -> Callable[[], None]:
    """Call ``hook(kind)`` before every timed step of this process from now on (``kind``: ``STEP_KINDS``);
    returns the function that removes it."""
    _HOOKS.append(hook)

    def remove() -> None:
        if hook in _HOOKS:
            _HOOKS.remove(hook)
    return remove


def step_starts(kind: str) -> None:
    """What each timed loop calls before a step's data wait and timer: every registered hook, in order."""
    for hook in list(_HOOKS):
        hook(kind)
