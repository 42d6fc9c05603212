"""benchlib's measured train-step throughput against a bare PyTorch loop on the same work.

Same model, batch, data (digits at 32x32, already built into tensors), optimizer and threads; both
loops run the same number of steps after the same warmup, alternating several rounds so drift on a
shared machine hits both. Target (issue 2): benchlib / bare >= 0.97.

    .venv/bin/python benchmarks/overhead.py [--model resnet18] [--batch-size 64] [--steps 40] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

from benchlib.data.loaders import build_loaders
from benchlib.engine.setup import seed_everything
from benchlib.env.threads import apply_threads
from benchlib.nets.models import build_model
from benchlib.run.measure import measure
from benchlib.spec.settings import RunConfig, RunSettings


def bare_loop(model_name: str, batch_size: int, warmup: int, steps: int, settings: RunSettings) -> float:
    """Samples/s of a plain training loop over the same DataLoader (timed steps only, like benchlib)."""
    seed_everything(settings.seed)
    loaders = build_loaders(settings, batch_size, torch.device("cpu"))
    model = build_model(model_name, loaders.num_classes)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=settings.momentum,
                          weight_decay=settings.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    done, timed_s, samples = 0, 0.0, 0
    while done < warmup + steps:
        for x, y in loaders.train:
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
            dt = time.perf_counter() - t0
            if done >= warmup:
                timed_s += dt
                samples += y.shape[0]
            done += 1
            if done >= warmup + steps:
                break
    return samples / timed_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    apply_threads()
    settings = RunSettings(lr=0.05, train_steps=args.steps, warmup_steps=args.warmup, latency_repeats=3,
                           infer_warmup_batches=1)
    bench, bare = [], []
    for r in range(args.rounds):
        measured = measure(RunConfig("overhead", "cpu", args.model, args.batch_size, settings))
        assert measured is not None
        bench.append(measured.row["train_samples_per_s"])
        bare.append(bare_loop(args.model, args.batch_size, args.warmup, args.steps, settings))
        print(
            f"round {r + 1}/{args.rounds}: benchlib {bench[-1]:.1f} samples/s, bare {bare[-1]:.1f} samples/s",
            flush=True,
        )
    ratio = statistics.median(bench) / statistics.median(bare)
    print(json.dumps({"model": args.model, "batch_size": args.batch_size, "steps": args.steps,
                      "threads": torch.get_num_threads(), "benchlib_samples_per_s": bench,
                      "bare_samples_per_s": bare, "ratio_of_medians": ratio, "target": 0.97,
                      "meets_target": ratio >= 0.97}))


if __name__ == "__main__":
    main()
