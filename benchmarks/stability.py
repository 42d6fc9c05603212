"""Run-to-run spread: the train-step median of the same configuration over several fresh processes.

One run's step times say how steady the steps were; whether the next run of the same command gives the
same figure is another question, and the one a comparison between two commits depends on. This runs
``benchlib run`` (resnet18, batch 64, 32 px, 2 threads, 30 timed steps by default) in N fresh processes,
one after another, and reports the IQR/median of their step medians, how many runs flagged their own
steps noisy, how many were measured under interference (with the figure), and how many saw the machine's
own speed drift under them (``machine_drifted``, see instruments/drift.py): where the machine is the
cause, the rows say so.

    .venv/bin/python benchmarks/stability.py [--runs 5] [--steps 30] [--env KEY=VALUE ...] [--extra ...]

Goal (issue 15): spread <= 5% on a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def one_run(args: argparse.Namespace, env: dict[str, str]) -> dict:
    cmd = [sys.executable, "-m", "benchlib", "run", "--model", args.model, "--batch-size", str(args.batch_size),
           "--steps", str(args.steps), "--threads", str(args.threads), "--set", f"image_size={args.image_size}",
           "--data", args.data, "--no-save", "--json", *args.extra]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--data", default="digits")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--env", nargs="*", default=[], metavar="KEY=VALUE", help="environment for the runs")
    parser.add_argument("--extra", nargs="*", default=[], help="more arguments for benchlib run (e.g. --set ...)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    env = dict(os.environ, **dict(kv.split("=", 1) for kv in args.env))

    medians, noisy, interference, steal, drift_pct, drifted = [], [], [], [], [], []
    t0 = time.perf_counter()
    for i in range(args.runs):
        row = one_run(args, env)
        medians.append(float(row["train_step_s_median"]))
        noisy.append(bool(row["train_step_noisy"]))
        interference.append(row.get("interference_cpu_pct"))
        steal.append(row.get("steal_pct"))
        drift_pct.append(row.get("train_step_drift_pct"))
        drifted.append(bool(row.get("machine_drifted")))
        print(f"run {i + 1}/{args.runs}: step median {medians[-1] * 1e3:.1f} ms (IQR "
              f"{row['train_step_s_iqr'] * 1e3:.1f} ms{', noisy' if noisy[-1] else ''}), other processes "
              f"{interference[-1] or 0:.1f}% of the CPUs, steal {steal[-1] or 0:.1f}%, steps drifted "
              f"{drift_pct[-1] or 0:.0f}%{' (machine drifted)' if drifted[-1] else ''}"
              f"{'  INTERFERED' if row.get('interfered') else ''}", file=sys.stderr, flush=True)
    q1, med, q3 = np.percentile(medians, [25, 50, 75])
    result = {"step_median_s": medians, "spread_iqr_over_median": float((q3 - q1) / med),
              "range_over_median": (max(medians) - min(medians)) / med, "runs_noisy": sum(noisy),
              "interference_cpu_pct": interference, "steal_pct": steal, "goal": 0.05,
              "train_step_drift_pct": drift_pct, "runs_machine_drifted": sum(drifted),
              "meets_goal": bool((q3 - q1) / med <= 0.05),
              "runs": args.runs, "steps": args.steps, "threads": args.threads,
              "env": args.env, "extra": args.extra, "wall_s": time.perf_counter() - t0}
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
