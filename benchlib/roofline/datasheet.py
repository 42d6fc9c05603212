"""Vendor datasheet figures, drawn beside measured roofs and labelled as such: never a substitute for a measurement.

Dense figures only: where a sheet prints the "with sparsity" number (A100 and later), the dense figure is
half of it. Tensor-core figures are for fp32 accumulation where a card differs (GeForce runs fp16 with
fp32 accumulate at half the fp16-accumulate rate); that is the mode a torch matmul uses. A dtype absent
from an entry is one the vendor does not state for that part; a device we are not sure of is omitted.

``form`` names the board (``sxm`` or ``pcie``, as ``GpuFacts.form`` reads it from the device name) where a
family comes in several with different figures, so a PCIe part never gets an SXM sheet. ``memory_gb`` is
the memory a MIG part's profiles divide: a slice's figures are its parent's scaled by its share of the
part's compute and memory slices (``slice_datasheet``), which its name states (``MIG 3g.20gb``).
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..env.mig import is_mig_name
from ..spec.vocab import COMPUTE_KINDS
from .measured import Ceilings

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
        "form": "pcie",
    },
    "NVIDIA V100 (SXM2)": {
        "peak_flops_per_s": {"fp32": 15.7 * TERA, "fp16": 125 * TERA},
        "bandwidth_bytes_per_s": 900 * GIGA,
        "source": "vendor datasheet (NVIDIA Tesla V100 datasheet, SXM2; fp16 = tensor performance)",
        "form": "sxm",
    },
    "NVIDIA A100 (SXM4 80GB)": {
        "peak_flops_per_s": {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "fp16": 312 * TERA, "bf16": 312 * TERA},
        "bandwidth_bytes_per_s": 2039 * GIGA,
        "source": "vendor datasheet (NVIDIA A100 datasheet, SXM4 80GB; dense tensor-core figures)",
        "form": "sxm", "memory_gb": 80,
    },
    "NVIDIA A100 (SXM4 40GB)": {
        "peak_flops_per_s": {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "fp16": 312 * TERA, "bf16": 312 * TERA},
        "bandwidth_bytes_per_s": 1555 * GIGA,
        "source": "vendor datasheet (NVIDIA A100 datasheet, 40GB HBM2 column: 1,555 GB/s; dense tensor-core figures)",
        "form": "sxm", "memory_gb": 40,
    },
    "NVIDIA A100 (PCIe 40GB)": {
        "peak_flops_per_s": {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "fp16": 312 * TERA, "bf16": 312 * TERA},
        "bandwidth_bytes_per_s": 1555 * GIGA,
        "source": "vendor datasheet (NVIDIA A100 PCIe datasheet, 40GB HBM2: 1,555 GB/s; dense tensor-core figures)",
        "form": "pcie", "memory_gb": 40,
    },
    "NVIDIA A100 (PCIe 80GB)": {
        "peak_flops_per_s": {"fp32": 19.5 * TERA, "tf32": 156 * TERA, "fp16": 312 * TERA, "bf16": 312 * TERA},
        "bandwidth_bytes_per_s": 1935 * GIGA,
        "source": "vendor datasheet (NVIDIA A100 datasheet, PCIe 80GB; dense tensor-core figures)",
        "form": "pcie", "memory_gb": 80,
    },
    "NVIDIA A10": {
        "peak_flops_per_s": {"fp32": 31.2 * TERA, "tf32": 62.5 * TERA, "fp16": 125 * TERA, "bf16": 125 * TERA},
        "bandwidth_bytes_per_s": 600 * GIGA,
        "source": "vendor datasheet (NVIDIA A10 datasheet; dense = half the sparsity figure)",
    },
    # AWS's variant of the A10 (G5 instances), not on NVIDIA's public datasheets: the figures NVIDIA gave AWS
    # for it, as AWS and its users quote them (80 SMs at 1.71 GHz boost: 35 TFLOP/s fp32; tensor cores at
    # the GeForce GA102 rate, TF32 equal to fp32 and fp16/bf16 twice it, dense with fp32 accumulate).
    "NVIDIA A10G": {
        "peak_flops_per_s": {"fp32": 35 * TERA, "tf32": 35 * TERA, "fp16": 70 * TERA, "bf16": 70 * TERA},
        "bandwidth_bytes_per_s": 600 * GIGA,
        "source": "vendor datasheet (NVIDIA A10G figures as published for AWS EC2 G5; 24 GB GDDR6, 600 GB/s)",
    },
    "NVIDIA H100 (PCIe)": {
        "peak_flops_per_s": {"fp32": 51 * TERA, "tf32": 378 * TERA, "fp16": 756 * TERA, "bf16": 756 * TERA},
        "bandwidth_bytes_per_s": 2.0 * TERA,
        "source": "vendor datasheet (NVIDIA H100 datasheet, PCIe; dense = half the sparsity figure)",
        "form": "pcie", "memory_gb": 80,
    },
    # The H100 datasheet's NVL column is per GPU since its 2024 revision (60 fp32, 835 TF32 and 1,671 fp16/bf16
    # TFLOP/s with sparsity, 94 GB at 3.9 TB/s); the launch sheet printed the bridged pair (188 GB, 7.8 TB/s).
    "NVIDIA H100 (NVL)": {
        "peak_flops_per_s": {"fp32": 60 * TERA, "tf32": 417.5 * TERA, "fp16": 835.5 * TERA, "bf16": 835.5 * TERA},
        "bandwidth_bytes_per_s": 3.9 * TERA,
        "source": "vendor datasheet (NVIDIA H100 datasheet, NVL column, per GPU; dense = half the sparsity figure)",
        "form": "pcie", "memory_gb": 94,
    },
    "NVIDIA H100 (SXM5)": {
        "peak_flops_per_s": {"fp32": 67 * TERA, "tf32": 494.7 * TERA, "fp16": 989.4 * TERA, "bf16": 989.4 * TERA},
        "bandwidth_bytes_per_s": 3.35 * TERA,
        "source": "vendor datasheet (NVIDIA H100 datasheet / Hopper whitepaper, SXM5; dense = half the sparsity "
                  "figure)",
        "form": "sxm", "memory_gb": 80,
    },
    "NVIDIA H200 (SXM)": {
        "peak_flops_per_s": {"fp32": 67 * TERA, "tf32": 494.7 * TERA, "fp16": 989.4 * TERA, "bf16": 989.4 * TERA},
        "bandwidth_bytes_per_s": 4.8 * TERA,
        "source": "vendor datasheet (NVIDIA H200 datasheet, SXM; dense = half the sparsity figure)",
        "form": "sxm", "memory_gb": 141,
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
    "NVIDIA A100 (SXM4 40GB)": re.compile(r"\bA100\b.*\bSXM4?\b.*\b40\s?GB\b"),
    "NVIDIA A100 (PCIe 80GB)": re.compile(r"\bA100\b(?=.*\bPCIE\b)(?=.*\b80\s?GB\b)"),
    "NVIDIA A100 (PCIe 40GB)": re.compile(r"\bA100\b(?=.*\bPCIE\b)(?=.*\b40\s?GB\b)"),
    "NVIDIA A10": re.compile(r"\bA10\b(?!\d)(?!G\b)"),
    "NVIDIA A10G": re.compile(r"\bA10G\b"),
    "NVIDIA H100 (PCIe)": re.compile(r"\bH100\b.*\bPCIE\b"),
    "NVIDIA H100 (NVL)": re.compile(r"\bH100\b.*\bNVL\b"),
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


def _normal(device_name: str) -> str:
    return " ".join(device_name.replace("_", " ").split()).upper()


def datasheet_for(device_name: str, form: str | None = None) -> dict[str, Any] | None:
    """The datasheet entry for a torch device name ("NVIDIA H100 80GB HBM3", "Tesla T4"), or None (also for a
    MIG slice, ``NVIDIA A100-SXM4-80GB MIG 1g.10gb``: see ``slice_datasheet``).

    ``form`` (``GpuFacts.form``: ``sxm``, ``pcie``) rules out entries of another board, whatever the name
    matched. The returned copy carries ``"name"`` (the DATASHEET key) so a plot can label the roof it draws.
    """
    text = _normal(device_name)
    if is_mig_name(text):  # a MIG slice has a fraction of the part's SMs and bandwidth: not the part's figures
        return None
    for key, entry in DATASHEET.items():
        if form in ("sxm", "pcie") and entry.get("form", form) != form:
            continue
        pattern = _DATASHEET_PATTERNS.get(key)
        if text == key.upper() or (pattern is not None and pattern.search(text)):
            return {"name": key, **json.loads(json.dumps(entry))}
    return None


# MIG on A100, H100 and H200 divides the part into 7 compute slices and 8 memory slices (NVIDIA's MIG user
# guide); a profile ``Ng.Mgb`` holds N compute slices and the memory slices that make up M GB. In MIG mode
# the 7 slices hold fewer SMs than the whole part (A100: 98 of 108), so N/7 slightly overstates a slice's
# compute; the ranges' low ends leave room for that.
MIG_COMPUTE_SLICES = 7
MIG_MEMORY_SLICES = 8
_MIG_PROFILE = re.compile(r"\bMIG\s+(\d+)G\.(\d+)GB\b")


def mig_parent_name(device_name: str) -> str:
    """The whole part's name in a slice's (``NVIDIA A100-SXM4-40GB`` in ``NVIDIA A100-SXM4-40GB MIG 1g.5gb``)."""
    return re.split(r"\s+MIG\s+", device_name.strip(), maxsplit=1, flags=re.IGNORECASE)[0]


def mig_shares(device_name: str, memory_gb: float) -> tuple[float, float] | None:
    """(share of the compute, share of the memory bandwidth) a slice holds of a part with ``memory_gb``, from
    its profile name; None where the name states no ``Ng.Mgb`` profile (a compute instance inside a slice,
    ``MIG 1c.3g.20gb``, shares its slice's bandwidth) or one that does not fit the part."""
    m = _MIG_PROFILE.search(_normal(device_name))
    if m is None or memory_gb <= 0:
        return None
    compute = int(m.group(1))
    eighths = int(m.group(2)) / memory_gb * MIG_MEMORY_SLICES  # 5 GB of 40: one memory slice
    memory = round(eighths)
    if not (1 <= compute <= MIG_COMPUTE_SLICES and 1 <= memory <= MIG_MEMORY_SLICES and abs(eighths - memory) < 0.2):
        return None
    return compute / MIG_COMPUTE_SLICES, memory / MIG_MEMORY_SLICES


def slice_datasheet(device_name: str, parent_form: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """A MIG slice's figures: its parent part's, compute scaled by its compute share and bandwidth by its
    memory share, with how they were scaled; or None and why the share is unknown."""
    parent = datasheet_for(mig_parent_name(device_name), parent_form)
    if parent is None:
        return None, f"a MIG slice of a part with no datasheet here ({mig_parent_name(device_name)})"
    shares = mig_shares(device_name, float(parent.get("memory_gb", 0)))
    if shares is None:
        return None, f"a MIG slice of {parent['name']} whose share of it its name does not state"
    compute, memory = shares
    how = (f"{parent['name']} scaled to the slice: {compute * MIG_COMPUTE_SLICES:.0f}/{MIG_COMPUTE_SLICES} of its "
           f"compute, {memory * MIG_MEMORY_SLICES:.0f}/{MIG_MEMORY_SLICES} of its bandwidth")
    profile = _normal(device_name).split(" MIG ", 1)[1].lower()
    scaled = {**parent, "name": f"{parent['name']} MIG {profile}", "source": f"{parent['source']}; {how}",
              "peak_flops_per_s": {k: v * compute for k, v in parent["peak_flops_per_s"].items()},
              "bandwidth_bytes_per_s": parent["bandwidth_bytes_per_s"] * memory}
    return scaled, how


NOT_MEASURED = "datasheet, not measured"  # the label every figure made from a datasheet entry carries


def datasheet_names() -> list[str]:
    """The parts a prediction can target from their datasheet alone (``benchlib predict --on "NVIDIA L4"``)."""
    return list(DATASHEET)


def datasheet_ceilings(name: str) -> Ceilings | None:
    """A datasheet entry (its key, or a device name it matches: "H100", "NVIDIA GeForce RTX 4090") as the ceilings
    of a machine nobody measured: each kind of layer meets the dtype's peak, cache and DRAM the one bandwidth.
    ``method`` says "datasheet, not measured" with the entry's source; None where no entry matches."""
    entry = datasheet_for(name)
    if entry is None:
        return None
    peaks = {dtype: float(v) for dtype, v in entry["peak_flops_per_s"].items()}
    bandwidth = float(entry["bandwidth_bytes_per_s"])
    return Ceilings("mps" if entry["name"].startswith("Apple") else "cuda", entry["name"], peaks, bandwidth,
                    method=f"{NOT_MEASURED}: {entry['source']}", machine=f"datasheet {entry['name']}",
                    kind_flops_per_s={kind: dict(peaks) for kind in COMPUTE_KINDS},
                    kind_bandwidth_bytes_per_s={home: {d: bandwidth for d in peaks} for home in ("dram", "cache")})
