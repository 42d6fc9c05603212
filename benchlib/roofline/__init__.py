"""Rooflines: the pure model, ceilings measured on this machine, vendor datasheet figures beside them.

The names below load their module on first use: a report reads and draws saved ceilings (``measured``,
``model``) without importing torch, which only measuring them (``ceilings``, ``cache``) needs.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"ensure_ceilings": "cache", "save_ceilings": "cache", "load_ceilings": "measured", "Ceilings": "measured",
          "best_of": "measured", "measure_ceilings": "ceilings", "measure_ceilings_robust": "ceilings",
          "DATASHEET": "datasheet", "datasheet_for": "datasheet", "Placement": "model", "above_roof": "model",
          "place_on_roof": "model", "ridge_point_flops_per_byte": "model", "roof_dtype": "model",
          "roof_flops_per_s": "model", "roof_fraction": "model"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
