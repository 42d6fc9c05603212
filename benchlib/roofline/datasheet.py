"""Vendor datasheet figures, drawn beside measured roofs and labelled as such: never a substitute for a measurement.

Dense figures only: where a sheet prints the "with sparsity" number (A100 and later), the dense figure is
half of it. Tensor-core figures are for fp32 accumulation where a card differs (GeForce runs fp16 with
fp32 accumulate at half the fp16-accumulate rate); that is the mode a torch matmul uses. A dtype absent
from an entry is one the vendor does not state for that part; a device we are not sure of is omitted.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..env.gpu import is_mig_name

TERA = 1e12
GIGA = 1e9

# Data, one entry per part: the entries look alike on purpose (the same four figures and a source each).
DATASHEET: dict[str, dict[str, Any]] = {
    "NVIDIA T4": {
        "peak_flops_per_s": {"fp32": 8.1 * TERA, "fp16": 65 * TERA},
        "bandwidth_bytes_per_s": 320 * GIGA,
        "source": "vendor datasheet (NVIDIA T4 datasheet; fp16 = mixed-precision tensor cores)",
    },
    "NVIDIA P100 (PCIe 16GB)": {
        "peak_flops_per_s": {"fp32": 9.3 * TERA, "fp16": 18.7 * TERA},
        "bandwidth_bytes_per_s": 732 * GIGA,
        "source": "vendor datasheet (NVIDIA Tesla P100 PCIe datasheet; no tensor cores)",
    },
    "NVIDIA V100 (SXM2)": {
        "peak_flops_per_s": {"fp32": 15.7 * TERA, "fp16": 125 * TERA},
        "bandwidth_bytes_per_s": 900 * GIGA,
        "source": "vendor datasheet (NVIDIA Tesla V100 datasheet, SXM2; fp16 = tensor performance)",
    },
    "NVIDIA A100 (SXM4 80GB)": {
        "peak_flops_per_s": {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "fp16": 312 * TERA, "bf16": 312 * TERA},
        "bandwidth_bytes_per_s": 2039 * GIGA,
        "source": "vendor datasheet (NVIDIA A100 datasheet, SXM4 80GB; dense tensor-core figures)",
    },
    "NVIDIA A100 (PCIe 80GB)": {
        "peak_flops_per_s": {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "fp16": 312 * TERA, "bf16": 312 * TERA},
        "bandwidth_bytes_per_s": 1935 * GIGA,
        "source": "vendor datasheet (NVIDIA A100 datasheet, PCIe 80GB; dense tensor-core figures)",
    },
    "NVIDIA A10": {
        "peak_flops_per_s": {"fp32": 31.2 * TERA, "tf32": 62.5 * TERA, "fp16": 125 * TERA, "bf16": 125 * TERA},
        "bandwidth_bytes_per_s": 600 * GIGA,
        "source": "vendor datasheet (NVIDIA A10 datasheet; dense = half the sparsity figure)",
    },
    "NVIDIA H100 (PCIe)": {
        "peak_flops_per_s": {"fp32": 51 * TERA, "tf32": 378 * TERA, "fp16": 756 * TERA, "bf16": 756 * TERA},
        "bandwidth_bytes_per_s": 2.0 * TERA,
        "source": "vendor datasheet (NVIDIA H100 datasheet, PCIe; dense = half the sparsity figure)",
    },
    "NVIDIA H100 (SXM5)": {
        "peak_flops_per_s": {"fp32": 67 * TERA, "tf32": 494.7 * TERA, "fp16": 989.4 * TERA, "bf16": 989.4 * TERA},
        "bandwidth_bytes_per_s": 3.35 * TERA,
        "source": "vendor datasheet (NVIDIA H100 datasheet / Hopper whitepaper, SXM5; dense = half the sparsity "
                  "figure)",
    },
    "NVIDIA H200 (SXM)": {
        "peak_flops_per_s": {"fp32": 67 * TERA, "tf32": 494.7 * TERA, "fp16": 989.4 * TERA, "bf16": 989.4 * TERA},
        "bandwidth_bytes_per_s": 4.8 * TERA,
        "source": "vendor datasheet (NVIDIA H200 datasheet, SXM; dense = half the sparsity figure)",
    },
    "NVIDIA L4": {
        "peak_flops_per_s": {"fp32": 30.3 * TERA, "tf32": 60 * TERA, "fp16": 121 * TERA, "bf16": 121 * TERA},
        "bandwidth_bytes_per_s": 300 * GIGA,
        "source": "vendor datasheet (NVIDIA L4 datasheet; dense = half the sparsity figure)",
    },
    "NVIDIA RTX A6000": {
        "peak_flops_per_s": {"fp32": 38.7 * TERA, "tf32": 77.4 * TERA, "fp16": 154.8 * TERA, "bf16": 154.8 * TERA},
        "bandwidth_bytes_per_s": 768 * GIGA,
        "source": "vendor datasheet (NVIDIA RTX A6000 datasheet / Ampere GA102 whitepaper; dense tensor figures)",
    },
    "NVIDIA GeForce RTX 3090": {
        "peak_flops_per_s": {"fp32": 35.6 * TERA, "tf32": 35.6 * TERA, "fp16": 71 * TERA, "bf16": 71 * TERA},
        "bandwidth_bytes_per_s": 936 * GIGA,
        "source": "vendor datasheet (NVIDIA Ampere GA102 whitepaper; dense tensor figures, fp32 accumulate)",
    },
    "NVIDIA GeForce RTX 4090": {
        "peak_flops_per_s": {"fp32": 82.6 * TERA, "tf32": 82.6 * TERA, "fp16": 165.2 * TERA, "bf16": 165.2 * TERA},
        "bandwidth_bytes_per_s": 1008 * GIGA,
        "source": "vendor datasheet (NVIDIA Ada Lovelace whitepaper; dense tensor figures, fp32 accumulate)",
    },
    "NVIDIA GeForce GTX 1660 Ti": {
        "peak_flops_per_s": {"fp32": 5.4 * TERA},
        "bandwidth_bytes_per_s": 288 * GIGA,
        "source": "vendor datasheet (NVIDIA spec page: 1536 CUDA cores x 1770 MHz boost x 2; 12 Gbps x 192-bit)",
    },
    "Apple M1": {
        "peak_flops_per_s": {"fp32": 2.6 * TERA},
        "bandwidth_bytes_per_s": 68.25 * GIGA,
        "source": "vendor datasheet (Apple M1 announcement, 8-core GPU; LPDDR4X-4266 x 128-bit)",
    },
    "Apple M2": {
        "peak_flops_per_s": {"fp32": 3.6 * TERA},
        "bandwidth_bytes_per_s": 100 * GIGA,
        "source": "vendor datasheet (Apple M2 announcement, 10-core GPU)",
    },
    # "Apple M3 Pro" is omitted: Apple states its bandwidth (150 GB/s) but no GPU FLOP/s figure.
}

# How a torch device name maps to an entry: each pattern must also reject the sibling parts with other
# figures (H100 PCIe/NVL, A100 40GB/PCIe, V100 PCIe, RTX 3090 Ti, L40, M1 Pro/Max/Ultra, ...).
_DATASHEET_PATTERNS: dict[str, re.Pattern[str]] = {
    "NVIDIA T4": re.compile(r"\bT4\b"),
    "NVIDIA P100 (PCIe 16GB)": re.compile(r"\bP100\b.*\bPCI-?E\b.*\b16\s?GB\b"),
    "NVIDIA V100 (SXM2)": re.compile(r"\bV100\b.*\bSXM2\b"),
    "NVIDIA A100 (SXM4 80GB)": re.compile(r"\bA100\b.*\bSXM4?\b.*\b80\s?GB\b"),
    "NVIDIA A100 (PCIe 80GB)": re.compile(r"\bA100\b(?=.*\bPCIE\b)(?=.*\b80\s?GB\b)"),
    "NVIDIA A10": re.compile(r"\bA10\b(?!\d)(?!G\b)"),
    "NVIDIA H100 (PCIe)": re.compile(r"\bH100\b.*\bPCIE\b"),
    "NVIDIA H100 (SXM5)": re.compile(r"\bH100\b(?!.*\b(PCIE|NVL)\b)"),
    "NVIDIA H200 (SXM)": re.compile(r"\bH200\b(?!.*\b(NVL|PCIE)\b)"),
    "NVIDIA L4": re.compile(r"\bL4\b"),
    "NVIDIA RTX A6000": re.compile(r"\bRTX\s+A6000\b"),
    "NVIDIA GeForce RTX 3090": re.compile(r"\bRTX\s+3090\b(?!.*\b(TI|LAPTOP)\b)"),
    "NVIDIA GeForce RTX 4090": re.compile(r"\bRTX\s+4090\b(?!\s*D\b)(?!.*\bLAPTOP\b)"),
    "NVIDIA GeForce GTX 1660 Ti": re.compile(r"\bGTX\s+1660\s+TI\b(?!.*\b(MAX-Q|LAPTOP)\b)"),
    "Apple M1": re.compile(r"\bAPPLE\s+M1\b(?!\s*(PRO|MAX|ULTRA)\b)"),
    "Apple M2": re.compile(r"\bAPPLE\s+M2\b(?!\s*(PRO|MAX|ULTRA)\b)"),
}


def datasheet_for(device_name: str) -> dict[str, Any] | None:
    """The datasheet entry for a torch device name ("NVIDIA H100 80GB HBM3", "Tesla T4"), or None (also for a
    MIG slice, ``NVIDIA A100-SXM4-80GB MIG 1g.10gb``).

    The returned copy carries ``"name"`` (the DATASHEET key) so a plot can label the roof it draws.
    """
    text = " ".join(device_name.replace("_", " ").split()).upper()
    if is_mig_name(text):  # a MIG slice has a fraction of the part's SMs and bandwidth: no sheet states it
        return None
    for key, entry in DATASHEET.items():
        pattern = _DATASHEET_PATTERNS.get(key)
        if text == key.upper() or (pattern is not None and pattern.search(text)):
            return {"name": key, **json.loads(json.dumps(entry))}
    return None

