"""Rows as JSON: NaN and infinities as null, numpy scalars as Python values."""
from __future__ import annotations

from typing import Any


def finite(row: dict[str, Any]) -> bool:
    return not any(isinstance(v, float) and v != v for v in row.values())


def nan_to_none(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))) else v)
        for k, v in row.items()
    }


def plain(row: dict[str, Any]) -> dict[str, Any]:
    """numpy scalars as Python values, for JSON."""
    return {k: v.item() if hasattr(v, "item") else v for k, v in row.items()}
