"""The one roof a page shows per machine and device, and every row placed under it at report time.

A row's roof columns are written when it is measured, under the roof known then; a roof measured again
later (a row landed above it, or a study's end) may have risen since. A page shows the results folders'
ceilings files as they are now, so every row is placed again under that roof here, by the placement that
recorded it (``roofline.model.place_workload``): the tables, sentences and figures of one page read one roof
per device, never a row's older one. A row whose machine and device have no ceilings file is placed under
none (its roof columns empty), as the page draws none for it.
"""
from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from ...roofline.measured import Ceilings, best_of, load_ceilings
from ...roofline.model import place_workload, roof_dtype
from ...store.schema import finite_float

# The columns that depend on the roof (the achieved FLOP/s do not: they are the row's own measurement).
ROOF_DEPENDENT = ("roof_dtype", "roof_peak_flops_per_s", "roof_bandwidth_bytes_per_s", "train_roof_flops_per_s",
                  "roof_fraction", "infer_roof_flops_per_s", "infer_roof_fraction", "above_roof")


def ceilings_device(hardware: str) -> str:
    """The ceilings file's device name for a row's hardware ('cuda' runs on cuda:0)."""
    return "cuda:0" if hardware == "cuda" else hardware


def page_ceilings(results_dirs: Iterable[str]) -> list[Ceilings]:
    """The ceilings a page shows: one per machine and device (several folders' files of one device merged, the
    higher of each figure kept: a roof is a maximum), in the order they were found."""
    groups: dict[tuple[str, str], list[Ceilings]] = {}
    for c in load_ceilings(results_dirs):
        groups.setdefault((c.machine, c.device), []).append(c)
    return [found[0] if len(found) == 1 else best_of(found) for found in groups.values()]


def _is_true(value: object) -> bool:
    return value is True or (not isinstance(value, str) and finite_float(value) == 1.0)


def placed(df: pd.DataFrame, ceilings: Iterable[Ceilings]) -> pd.DataFrame:
    """``df`` with every row's roof columns those of the roof the page shows for its machine and device."""
    if df.empty or "machine" not in df or "hardware" not in df:
        return df
    roofs = {(c.machine, c.device): c for c in ceilings}
    records = []
    for _, row in df.iterrows():
        hardware = str(row["hardware"])
        roof = roofs.get((str(row["machine"]), ceilings_device(hardware)))
        if roof is None:
            records.append(dict.fromkeys(ROOF_DEPENDENT))
            continue
        dtype = roof_dtype(str(row.get("precision") or "fp32"), hardware.split(":")[0], _is_true(row.get("tf32")),
                           None if pd.isna(row.get("quantization")) else str(row.get("quantization")))
        p = place_workload(roof.peak_flops_per_s, roof.bandwidth_bytes_per_s, dtype,
                           train_flops_per_s=finite_float(row.get("achieved_train_flops_per_s")),
                           train_intensity=finite_float(row.get("train_arithmetic_intensity")),
                           infer_flops_per_s=finite_float(row.get("achieved_infer_flops_per_s")),
                           infer_intensity=finite_float(row.get("arithmetic_intensity")))
        records.append({"roof_dtype": p.dtype, "roof_peak_flops_per_s": p.peak_flops_per_s,
                        "roof_bandwidth_bytes_per_s": p.bandwidth_bytes_per_s,
                        "train_roof_flops_per_s": p.train.roof_flops_per_s, "roof_fraction": p.train.fraction,
                        "infer_roof_flops_per_s": p.infer.roof_flops_per_s, "infer_roof_fraction": p.infer.fraction,
                        "above_roof": p.above})
    roof_frame = pd.DataFrame(records, index=df.index, columns=list(ROOF_DEPENDENT))
    out = df.copy()
    for column in ROOF_DEPENDENT:
        out[column] = roof_frame[column]
    return out
