"""Does the machine's own speed move, with nothing else running? A fixed probe interleaved with training steps.

Run-to-run spread has two possible homes: the harness (what it does differently from one process to the
next) and the machine (a shared host whose speed changes under every process alike). This separates them
inside one process, so nothing about process start-up can differ: it alternates a fixed reference
workload (an fp32 n x n matmul looped for ``--probe-ms``) with blocks of identical resnet18 training steps,
and reports how much each varied over the run and how closely the step time followed the probe. A probe
whose speed moves as much as the steps, and a step time that follows it, mean the machine is the cause.

    .venv/bin/python benchmarks/machine_speed.py [--blocks 40] [--steps-per-block 5] [--threads 2] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import kit
import numpy as np
import torch
import torchvision


def probe_s(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, probe_ms: float) -> float:
    """Seconds per product, from as many products as fit in ``probe_ms``."""
    t0, products = time.perf_counter(), 0
    while time.perf_counter() - t0 < probe_ms / 1e3:
        torch.matmul(a, b, out=c)
        products += 1
    return (time.perf_counter() - t0) / products


def spread(values: np.ndarray) -> dict[str, float]:
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return {"median": float(med), "iqr_over_median": float((q3 - q1) / med),
            "max_over_min": float(values.max() / values.min())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--steps-per-block", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--probe-size", type=int, default=512)
    parser.add_argument("--probe-ms", type=float, default=30.0)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen),
                torch.randint(0, 10, (args.batch_size,), generator=gen)) for _ in range(8)]
    model = torchvision.models.resnet18(num_classes=10).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    a, b = torch.randn(args.probe_size, args.probe_size), torch.randn(args.probe_size, args.probe_size)
    c = torch.empty(args.probe_size, args.probe_size)

    def step(i: int) -> float:
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        kit.bare_step(model, opt, loss_fn, x, y)
        return time.perf_counter() - t0

    for i in range(5):  # warm-up, untimed
        step(i)
    probes, blocks = [], []
    t_start = time.perf_counter()
    for k in range(args.blocks):
        before = probe_s(a, b, c, args.probe_ms)
        block = statistics.median(step(i) for i in range(args.steps_per_block))
        after = probe_s(a, b, c, args.probe_ms)
        probes.append((before + after) / 2)
        blocks.append(block)
        if (k + 1) % 10 == 0:
            print(f"block {k + 1}/{args.blocks}: step {block * 1e3:.1f} ms, probe {probes[-1] * 1e3:.2f} ms",
                  file=sys.stderr, flush=True)
    p, s = np.array(probes), np.array(blocks)
    result = {
        "probe_s": spread(p), "block_step_s": spread(s), "step_over_probe": spread(s / p),
        "correlation": float(np.corrcoef(p, s)[0, 1]),
        "probe_gflops_per_s_median": 2 * args.probe_size**3 / float(np.median(p)) / 1e9,
        "blocks": args.blocks, "steps_per_block": args.steps_per_block, "threads": args.threads,
        "probe_size": args.probe_size, "probe_ms": args.probe_ms, "wall_s": time.perf_counter() - t_start,
        "torch": torch.__version__,
    }
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
