"""MIG slices by name: a pure function on device names, with no torch, so reading a datasheet (the report's
roofline pages) needs no GPU stack."""
from __future__ import annotations


def is_mig_name(name: str) -> bool:
    """Whether a device name is a MIG slice's (``NVIDIA A100-SXM4-40GB MIG 1g.5gb``): a fraction of a GPU."""
    return " MIG " in f" {' '.join(name.upper().split())} "
