"""Training throughput with the telemetry sampler running against without it, on the same work.

Same model, batch, data (digits at 32x32), steps and threads in both arms; the "with" arm wraps
``benchlib.run.measure.measure`` in a ``TelemetrySampler`` at 100 ms. Arms alternate, and their order flips
every round (ABBA), so drift on a shared machine hits both; each round's with/without ratio is printed
with the load average, since other work on the machine moves throughput far more than 1%. Also prints
the cost of one sample taken in the foreground: the sampler's share of one core, free of that noise.
Target: <= 1% slower (ratio of medians >= 0.99).

    .venv/bin/python benchmarks/telemetry_overhead.py [--model resnet18] [--batch-size 64] [--steps 40] [--rounds 5]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import time

import torch

from benchlib.env.threads import apply_threads
from benchlib.instruments.telemetry import DEFAULT_INTERVAL_S, TelemetrySampler
from benchlib.run.columns import measured_row
from benchlib.run.measure import measure
from benchlib.spec.settings import RunConfig, RunSettings

TARGET_SLOWDOWN = 0.01


def sample_cost_s(interval_s: float, repeats: int = 200) -> float:
    """Median wall time of one telemetry sample taken in the foreground (the thread's work per tick)."""
    sampler = TelemetrySampler(interval_s=3600.0).start()  # the thread sleeps; samples are taken here
    costs = []
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            sampler.sample_now()  # the unit of work this benchmark prices
            costs.append(time.perf_counter() - t0)
    finally:
        sampler.stop()
    return statistics.median(costs)


def train_samples_per_s(cfg: RunConfig, interval_s: float | None) -> tuple[float, int | None]:
    """Training throughput of one measure() call, with the sampler running when ``interval_s`` is given."""
    if interval_s is None:
        off = measure(dataclasses.replace(cfg, settings=dataclasses.replace(cfg.settings, telemetry=False)))
        assert off is not None
        return measured_row(off)["train_samples_per_s"], None
    settings = dataclasses.replace(cfg.settings, telemetry=True, telemetry_interval_s=interval_s)
    on = measure(dataclasses.replace(cfg, settings=settings))  # measure's own sampler, as every run has
    assert on is not None
    sampled = measured_row(on)
    return sampled["train_samples_per_s"], sampled["telemetry_samples"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval-s", type=float, default=DEFAULT_INTERVAL_S)
    args = parser.parse_args()
    apply_threads()
    settings = RunSettings(lr=0.05, train_steps=args.steps, warmup_steps=args.warmup, latency_repeats=3,
                           infer_warmup_batches=1)
    cfg = RunConfig("telemetry-overhead", "cpu", args.model, args.batch_size, settings)
    cost_s = sample_cost_s(args.interval_s)
    print(f"one sample costs {cost_s * 1e3:.3f} ms in the foreground: {cost_s / args.interval_s:.3%} of one core "
          f"at {args.interval_s:g} s", flush=True)
    with_s, without_s, samples, load = [], [], [], []
    for r in range(args.rounds):
        order = ("without", "with") if r % 2 == 0 else ("with", "without")
        for arm in order:
            rate, n = train_samples_per_s(cfg, args.interval_s if arm == "with" else None)
            (with_s if arm == "with" else without_s).append(rate)
            if n is not None:
                samples.append(n)
        load.append(os.getloadavg()[0])
        print(f"round {r + 1}/{args.rounds} ({' then '.join(order)}): with sampler {with_s[-1]:.1f} samples/s "
              f"({samples[-1]} telemetry samples), without {without_s[-1]:.1f} samples/s, "
              f"paired ratio {with_s[-1] / without_s[-1]:.3f}, load average {load[-1]:.2f} on {os.cpu_count()} CPUs",
              flush=True)
    ratio = statistics.median(with_s) / statistics.median(without_s)
    paired = [w / o for w, o in zip(with_s, without_s)]
    slowdown = 1.0 - ratio
    print(json.dumps({
        "model": args.model, "batch_size": args.batch_size, "steps": args.steps, "rounds": args.rounds,
        "threads": torch.get_num_threads(), "interval_s": args.interval_s, "sample_cost_ms": cost_s * 1e3,
        "sample_cost_fraction_of_interval": cost_s / args.interval_s,
        "with_samples_per_s": with_s, "without_samples_per_s": without_s, "telemetry_samples": samples,
        "load_average_1min": load, "paired_ratios": paired, "median_paired_ratio": statistics.median(paired),
        "ratio_of_medians": ratio, "slowdown": slowdown, "target_slowdown": TARGET_SLOWDOWN,
        "meets_target": slowdown <= TARGET_SLOWDOWN,
    }))


if __name__ == "__main__":
    main()
