"""Does running two configurations' per-layer runs in lockstep make their explained difference add up?

``benchlib diff --explain`` splits B's step less A's into parts, each from the configurations' per-layer runs
(``benchlib layers``), and checks the parts' sum against the plain steps' difference (the coverage). On a
host whose speed moves by a quarter between processes, a difference of ~10% of the step (channels_last
against nchw, resnet18, 32 px) is not reached by three runs a side recorded one after another: each run's
parts add up within a few % of its own step, but A's and B's runs meet the host at different speeds.

This script records the same two configurations both ways, ``--rounds`` runs a side each:

- ``sequence``: each run in a fresh process, A and B alternating (A B, B A, ...), as a study records them;
- ``lockstep``: each round's A and B in fresh processes side by side, one training step (or batch-1 forward)
  each in turn, the other stopped (``kit.py``), so a slow stretch of the host lands on both alike.

and prints, for the training step and the batch-1 forward, the explanation's difference and coverage with
its interval, as ``benchlib diff --explain`` computes them (``report.tables.explain``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kit
import numpy as np
from overhead import PINNED_MALLOC

from benchlib.report.tables.explain import INFERENCE, TRAINING, explain, run_of
from benchlib.roofline.cache import ensure_ceilings

LAYERS_CODE = kit.LAYERS_CODE  # ``benchlib layers`` gated before each timed step and forward

WAYS = ("sequence", "lockstep")  # one after another, as a study records; side by side, a step each in turn


def layers_cmd(args: argparse.Namespace, side: str, folder: Path, seed: int) -> list[str]:
    extra = ["--set", f"memory_format={args.b_format}"] if side == "B" else ["--set", f"memory_format={args.a_format}"]
    return [sys.executable, "-c", LAYERS_CODE, "layers", "--quiet", "--model", args.model, "--data", "synthetic",
            "--batch-size", str(args.batch_size), "--image-size", str(args.image_size), "--threads",
            str(args.threads), "--steps", str(args.steps), "--block", str(args.block), "--seed", str(seed),
            "--results-dir", str(folder), *extra, "--json"]


def record(args: argparse.Namespace, how: str, root: Path) -> dict[str, list[Path]]:
    """``--rounds`` per-layer files a side, recorded ``how`` (sequence or lockstep)."""
    files: dict[str, list[Path]] = {"A": [], "B": []}
    for r in range(args.rounds):
        folders = {side: root / how / f"{side}{r}" for side in ("A", "B")}
        commands = {side: layers_cmd(args, side, folders[side], r) for side in ("A", "B")}
        t0 = time.perf_counter()
        env = {**os.environ, **(PINNED_MALLOC if args.pin_allocator else {})}
        if how == "lockstep":
            done = kit.run(commands, env=env, timeout_s=1200)
            failed = {n: f.stderr[-2000:] for n, f in done.items() if f.returncode}
        else:
            failed = {}
            for side in (("A", "B") if r % 2 == 0 else ("B", "A")):
                p = subprocess.run(commands[side], capture_output=True, text=True, timeout=1200, env=env)
                if p.returncode:
                    failed[side] = p.stderr[-2000:]
        if failed:
            raise SystemExit(f"explain_lockstep: {how} round {r}: {failed}")
        for side in ("A", "B"):
            (path,) = sorted(folders[side].glob("layers/*.json"))
            files[side].append(path)
        print(f"{how} round {r + 1}/{args.rounds}: {time.perf_counter() - t0:.0f} s", flush=True)
    return files


def explained(files: dict[str, list[Path]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for metric, inference in ((TRAINING, False), (INFERENCE, True)):
        runs = {side: [run_of(json.loads(p.read_text()), inference) for p in paths] for side, paths in files.items()}
        e = explain([r for r in runs["A"] if r], [r for r in runs["B"] if r], metric=metric, verdict="unknown")
        out[metric] = {"a_ms": e.a_s * 1e3, "b_ms": e.b_s * 1e3, "delta_ms": e.delta_s * 1e3,
                       "delta_ci_ms": [e.ci_low * 1e3, e.ci_high * 1e3], "coverage": e.coverage,
                       "coverage_ci": [e.coverage_low, e.coverage_high], "why": e.why,
                       "per_run_median_ms": {s: [float(np.median(r.whole_s) * 1e3) for r in runs[s] if r]
                                             for s in runs}}
        # round r's A and B ran side by side (lockstep) or one after the other: B/A of their medians, per round
        out[metric]["round_ratios"] = [b / a for a, b in zip(*out[metric]["per_run_median_ms"].values())]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--block", type=int, default=5)
    p.add_argument("--a-format", default="nchw")
    p.add_argument("--b-format", default="channels_last")
    p.add_argument("--ways", default=",".join(WAYS), help="comma-separated: " + ", ".join(WAYS))
    p.add_argument("--pin-allocator", action="store_true",
                   help="every run with glibc malloc held still (overhead.PINNED_MALLOC): no mmap, no trim")
    p.add_argument("--work", type=Path, required=True, help="a folder for the runs' results")
    p.add_argument("--json", type=Path, help="also write the figures to this file")
    args = p.parse_args()
    if bad := [w for w in args.ways.split(",") if w not in WAYS]:
        p.error(f"--ways {','.join(bad)}; allowed: a comma-separated list of {', '.join(WAYS)}")
    figures: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}}
    ensure_ceilings(args.work / "seed", "cpu")  # once, into the machine cache: no child measures them beside another
    for how in args.ways.split(","):
        figures[how] = explained(record(args, how, args.work))
        for metric, f in figures[how].items():
            print(f"{how:9s} {metric:10s} A {f['a_ms']:.2f} ms, B {f['b_ms']:.2f} ms, delta {f['delta_ms']:+.2f} ms "
                  f"[{f['delta_ci_ms'][0]:+.2f}, {f['delta_ci_ms'][1]:+.2f}], coverage {f['coverage']:.3f} "
                  f"[{f['coverage_ci'][0]:.2f}, {f['coverage_ci'][1]:.2f}] {f['why'] or ''}", flush=True)
            print(f"{'':9s} {metric:10s} B/A a round: " + ", ".join(f"{x:.3f}" for x in f["round_ratios"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
