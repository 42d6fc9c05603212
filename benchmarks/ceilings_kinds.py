"""How long this machine's ceilings take and how repeatable each roof is, over fresh processes.

Each run is ``benchlib roofline --json`` in a process of its own (nothing carried over: allocator, oneDNN's
primitive cache, the clock). Reported per figure (the whole roof per dtype, the copy's bandwidth, and the
roof of each kind of operation: conv3x3, conv1x1, depthwise, matmul FLOP/s; dram and cache bytes/s): the
median over the runs and the spread, (max - min) / median. The target on a quiet 2-core VM: every run under
90 s, every figure within 3%.

    .venv/bin/python benchmarks/ceilings_kinds.py [--runs 5] [--device cpu] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one_run(device: str) -> tuple[float, dict]:
    """One fresh process's ceilings and its wall-clock seconds."""
    benchlib = Path(sys.executable).with_name("benchlib")
    start = time.perf_counter()
    out = subprocess.run([str(benchlib), "-q", "roofline", "--device", device, "--json"], check=True,
                         capture_output=True, text=True)
    return time.perf_counter() - start, json.loads(out.stdout)


def figures(c: dict) -> dict[str, float]:
    """Every roof of one ceilings file, flat: 'peak fp32', 'conv1x1 bf16', 'cache fp32', 'copy' ..."""
    out = {f"peak {d}": v for d, v in c["peak_flops_per_s"].items()}
    out["copy bandwidth"] = c["bandwidth_bytes_per_s"]
    for table in ("kind_flops_per_s", "kind_bandwidth_bytes_per_s"):
        for kind, per_dtype in c.get(table, {}).items():
            out.update({f"{kind} {d}": v for d, v in per_dtype.items()})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures here")
    args = parser.parse_args()
    runs = []
    for i in range(args.runs):
        took, ceilings = one_run(args.device)
        runs.append({"seconds": took, "figures": figures(ceilings), "interfered": ceilings.get("interfered")})
        print(f"run {i + 1}/{args.runs}: {took:.1f} s", flush=True)
    names = list(runs[0]["figures"])
    print(f"\n{'figure':<16} {'median':>12} {'spread':>8}  (over {len(runs)} fresh processes)")
    worst = 0.0
    for name in names:
        values = [r["figures"][name] for r in runs if name in r["figures"]]
        med = statistics.median(values)
        spread = (max(values) - min(values)) / med
        worst = max(worst, spread)
        unit = "GB/s" if name.split()[0] in ("copy", "dram", "cache") else "GFLOP/s"
        print(f"{name:<16} {med / 1e9:>8.1f} {unit:<7} {spread:>6.1%}")
    seconds = [r["seconds"] for r in runs]
    print(f"\nseconds per run: median {statistics.median(seconds):.1f}, max {max(seconds):.1f}; widest spread "
          f"{worst:.1%}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
