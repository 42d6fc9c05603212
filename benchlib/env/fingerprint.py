"""What a measurement of the machine depends on: its name, CPU model and count, the device, torch and driver.

Ceilings and the noise floor are kept per machine (``store.machine_cache``) under this fingerprint: another
machine under the same name, another CPU allotment, a new torch or driver, or a new version of the method
(``method``) measures them again.
"""
from __future__ import annotations

import torch

from .devices import cpu_model_name, device_name
from .manifest import driver_version, machine_name
from .threads import usable_cpus


def fingerprint(device: torch.device, method: str) -> dict[str, str]:
    """The conditions a measurement of ``device`` by ``method`` holds for, as strings (a JSON record's)."""
    out = {"machine": machine_name(), "cpu_model": cpu_model_name(), "cpus": str(usable_cpus()),
           "device_name": device_name(device), "torch": torch.__version__}
    if device.type == "cuda":
        out["driver"] = str(driver_version()[0])
    out["method"] = method
    return out
