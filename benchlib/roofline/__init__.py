"""Rooflines: the pure model, ceilings measured on this machine, vendor datasheet figures beside them."""
from .cache import ensure_ceilings, load_ceilings, save_ceilings
from .ceilings import Ceilings, best_of, measure_ceilings, measure_ceilings_robust
from .datasheet import DATASHEET, datasheet_for
from .model import (
           Placement,
           above_roof,
           place_on_roof,
           ridge_point_flops_per_byte,
           roof_dtype,
           roof_flops_per_s,
           roof_fraction,
)

__all__ = [
    "DATASHEET",
    "Ceilings",
    "Placement",
    "above_roof",
    "best_of",
    "datasheet_for",
    "ensure_ceilings",
    "load_ceilings",
    "measure_ceilings",
    "measure_ceilings_robust",
    "place_on_roof",
    "ridge_point_flops_per_byte",
    "roof_dtype",
    "roof_flops_per_s",
    "roof_fraction",
    "save_ceilings",
]
