"""benchlib's training throughput against a bare PyTorch loop of identical work, each in a fresh process.

Comparing two loops inside one warmed process hides what a real run pays: the allocator and caches left
by FLOP counting, the telemetry thread, the first-touch of memory. Here every measurement is its own
process: ``benchlib run`` (resnet18, synthetic data on the device, batch 64, 32 px, 30 timed steps after
5 warmup steps) against a bare loop in plain PyTorch (the same model, SGD with the same momentum and
weight decay, the same threads, random batches generated once and cycled, throughput as samples over
the summed step times), alternated over several rounds so drift on the machine lands on both. The ratio
(benchlib / bare) comes with the 95% bootstrap interval of the ratio of medians over rounds, and, since
each round's two processes run back to back, with the median of the per-round ratios and its interval
(pairing cancels drift slower than a round; the machine's own speed moves within seconds, see
machine_speed.py, so many rounds and longer runs narrow it more than pairing does).

    .venv/bin/python benchmarks/overhead.py [--rounds 5] [--steps 30] [--threads 2] [--json out.json]
        [--suspect NAME=KEY=VALUE ...]

Each ``--suspect`` adds an arm: ``benchlib run`` with one of its parts switched off (``--suspect
no-telemetry=telemetry=false``: the sampler thread and the interference watch that reads it), run in the
same rounds, its order rotated with the others; its ratio to the bare loop says what that part costs.

Target (issues 15 and 40): ratio within 0.99-1.01, its interval included, on a quiet machine, telemetry on.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHLIB = [sys.executable, "-m", "benchlib"]

# The bare loop: nothing of benchlib, the same work. Timed like benchlib times a CPU step: perf_counter
# around zero_grad, forward, loss, backward and step, one sample of the sum per timed step.
BARE = r"""
import sys, time, torch, torchvision
threads, batch, size, warmup, steps, seed = (int(a) for a in sys.argv[1:7])
torch.set_num_threads(threads)
torch.manual_seed(seed)
gen = torch.Generator().manual_seed(seed)
batches = [(torch.randn(batch, 3, size, size, generator=gen), torch.randint(0, 10, (batch,), generator=gen))
           for _ in range(8)]
model = torchvision.models.resnet18(num_classes=10)
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
loss_fn = torch.nn.CrossEntropyLoss()
timed_s = 0.0
for i in range(warmup + steps):
    x, y = batches[i % len(batches)]
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    opt.step()
    dt = time.perf_counter() - t0
    if i >= warmup:
        timed_s += dt
print(batch * steps / timed_s)
"""


def bare(args: argparse.Namespace) -> float:
    out = subprocess.run([sys.executable, "-c", BARE, str(args.threads), str(args.batch_size), str(args.image_size),
                          str(args.warmup), str(args.steps), "0"], capture_output=True, text=True, check=True,
                         env=_env(args))
    return float(out.stdout.strip().splitlines()[-1])


def benchlib_run(args: argparse.Namespace, more: tuple[str, ...] = ()) -> dict:
    cmd = [*BENCHLIB, "run", "--model", "resnet18", "--data", "synthetic", "--batch-size", str(args.batch_size),
           "--steps", str(args.steps), "--threads", str(args.threads), "--set", f"image_size={args.image_size}",
           "--set", f"warmup_steps={args.warmup}", "--set", "lr=0.01", "--set", "synthetic_classes=10",
           "--no-save", "--json", *args.extra, *more]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT, env=_env(args))
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(args.threads)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--extra", nargs="*", default=[], help="more arguments for benchlib run (e.g. --set ...)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--suspect", action="append", default=[], metavar="NAME=KEY=VALUE",
                        help="an arm of benchlib run with one setting changed (repeatable)")
    args = parser.parse_args()
    suspects = {}
    for text in args.suspect:
        name, _, setting = text.partition("=")
        if not name or "=" not in setting:
            parser.error(f"--suspect {text!r}; allowed: NAME=KEY=VALUE, e.g. no-telemetry=telemetry=false")
        suspects[name] = ("--set", setting)

    from benchlib.report.evidence.stats import compare, spread

    bench, plain, ratios, interfered, drifted = [], [], [], [], []
    arms: dict[str, list[float]] = {name: [] for name in suspects}
    t_start = time.perf_counter()
    for r in range(args.rounds):
        order = ["benchlib", "bare", *suspects]
        order = order[r % len(order):] + order[:r % len(order)]  # rotated, so a drifting machine favours none
        for arm in order:
            if arm == "bare":
                plain.append(bare(args))
            elif arm == "benchlib":
                row = benchlib_run(args)
                bench.append(float(row["train_samples_per_s"]))
                interfered.append(row.get("interference"))
                drifted.append(row.get("machine_drifted"))
            else:
                arms[arm].append(float(benchlib_run(args, suspects[arm])["train_samples_per_s"]))
        ratios.append(bench[-1] / plain[-1])
        others = "".join(f", {name} {values[-1]:.1f}" for name, values in arms.items())
        print(f"round {r + 1}/{args.rounds}: benchlib {bench[-1]:.1f} samples/s, bare {plain[-1]:.1f} samples/s"
              f"{others}, ratio {ratios[-1]:.3f}"
              f"{'  INTERFERED: ' + row['interference'] if row.get('interference') else ''}",
              file=sys.stderr, flush=True)
    c = compare(bench, plain, higher_is_better=True)
    suspect_ratios = {}
    for name, values in arms.items():
        s = compare(values, plain, higher_is_better=True)
        suspect_ratios[name] = {"samples_per_s": values, "ratio_to_bare": s.ratio, "ci_low": s.ci_low,
                                "ci_high": s.ci_high}
        print(f"{name}: {s.ratio:.3f} of the bare loop [{s.ci_low:.3f}, {s.ci_high:.3f}]", file=sys.stderr)
    # the rounds are pairs run back to back: the median of the per-round ratios cancels drift slower than a
    # round, which the ratio of the two sides' medians does not
    paired, paired_low, paired_high = spread(ratios)
    result = {"benchlib_samples_per_s": bench, "bare_samples_per_s": plain, "round_ratios": ratios,
              "ratio_of_medians": c.ratio, "ci_low": c.ci_low, "ci_high": c.ci_high, "verdict": c.verdict,
              "p_value": c.p_value, "test": c.test, "paired_ratio_median": paired, "paired_ci_low": paired_low,
              "paired_ci_high": paired_high, "machine_drifted_rounds": sum(bool(d) for d in drifted),
              "target": [0.99, 1.01], "meets_target": 0.99 <= c.ci_low and c.ci_high <= 1.01,
              "suspects": suspect_ratios, "interfered_rounds": sum(bool(i) for i in interfered),
              "rounds": args.rounds, "steps": args.steps, "threads": args.threads, "batch_size": args.batch_size,
              "image_size": args.image_size, "extra": args.extra, "wall_s": time.perf_counter() - t_start}
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
