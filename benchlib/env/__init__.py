"""The machine a configuration runs on: devices, CPU threads, data-parallel processes, the environment manifest.

The names below load their module on first use, so importing a torch-free module of this package (``threads``)
does not load torch.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"available_hardware": "devices", "device_name": "devices", "resolve_hardware": "devices",
          "synchronize": "devices", "collect_manifest": "manifest", "machine_name": "manifest",
          "manifest_id": "manifest", "apply_threads": "threads", "usable_cpus": "threads"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
