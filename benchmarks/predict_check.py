"""Does `benchlib predict` hold? Predict, then measure, on targets this machine can become.

    .venv/bin/python benchmarks/predict_check.py [--models resnet18 ...] [--runs 3] [--work DIR] [--json F]
    .venv/bin/python benchmarks/predict_check.py --work DIR --repredict     # the same truth, predicted again

The source is each model measured layer by layer (`benchlib layers`, synthetic data, 32 px, batch 32) as this
machine runs it: every CPU it may use, every instruction set, its roofs measured fresh as the targets' are. Each
target is this machine limited:

- ``avx2``: oneDNN and MKL held to AVX2 (``ONEDNN_MAX_CPU_ISA=AVX2``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``);
- ``1thread``: one intra-op thread instead of all;
- ``both``: the two limits together;
- ``bf16``: the fp32 source's step and forward under bf16 autocast (where the CPU has bf16 kernels; its roofs and
  the shapes timed in bf16; not in the default list: ``--targets avx2 1thread both bf16``).

For each target it measures the target's ceilings and times the source's layer shapes in that process
environment (`benchlib roofline --threads --shapes-of`, nothing trained), predicts every model from the source
folder and those ceilings twice (`benchlib predict --json`: with the shapes, and `--no-shapes`, by roofs alone),
then measures the models there the same way the source was measured (`benchlib layers`, ``--runs`` fresh
processes; the figure is their median). It prints, per model and target, the predicted training step and batch-1
latency with their 90% intervals beside the measured ones, the error, each target's and the whole MAPE, and
the share of measurements inside their intervals and the log's spread of the errors (what METHOD_LOG_SD holds),
for each method; docs/prediction.md quotes the table. Nothing asserts.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "densenet121")
AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def benchlib(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "benchlib", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise SystemExit(f"benchlib {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-600:]}")
    return done.stdout


def targets(cpus: int) -> dict[str, tuple[dict[str, str], int, str | None]]:
    """Each target's process environment, thread count and precision (None: the source's, fp32)."""
    return {"avx2": (AVX2, cpus, None), "1thread": ({}, 1, None), "both": (AVX2, 1, None), "bf16": ({}, cpus, "bf16")}


def layers(folder: Path, model: str, threads: int, seed: int, args: argparse.Namespace, env: dict[str, str],
           dtype: str | None = None) -> dict:
    """One `benchlib layers` run (``dtype``: under that autocast); its per-layer file's plain step and batch-1
    forward."""
    precision = ["--set", f"precision=amp_{dtype}"] if dtype else []
    out = json.loads(benchlib("layers", "-q", "--model", model, "--data", "synthetic", "--batch-size",
                              str(args.batch_size), "--image-size", str(args.image_size), "--threads", str(threads),
                              "--seed", str(seed), "--steps", str(args.steps), "--block", str(args.block),
                              "--results-dir", str(folder), *precision, "--json", env=env))
    return {"step_s": float(out["step_s"]), "forward_s": float((out.get("inference") or {}).get("step_s") or "nan")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--targets", nargs="+", default=["avx2", "1thread", "both"])
    p.add_argument("--runs", type=int, default=2, help="fresh processes per model on the source and each target")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--block", type=int, default=4)
    p.add_argument("--work", type=Path)
    p.add_argument("--json", type=Path)
    p.add_argument("--reuse-source", action="store_true",
                   help="keep the source already measured under --work (its roofs and per-layer files)")
    p.add_argument("--repredict", action="store_true",
                   help="measure nothing: predict again from --work's source and targets, against the measurements "
                        "kept in its measured.json (a new method checked on the same truth)")
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="benchlib-predict-check-"))
    cpus = len(os.sched_getaffinity(0))
    t0 = time.perf_counter()
    source = work / "source"
    if not ((args.reuse_source or args.repredict) and any(source.glob("layers/*.json"))):
        # each side's roofs measured the same way, once, fresh (the machine cache keeps the highest figures seen)
        benchlib("roofline", "-q", "--threads", str(cpus), "--results-dir", str(source))
        for model in args.models:
            for r in range(args.runs):
                layers(source, model, cpus, r, args, {})
            print(f"source {model}: {args.runs} run(s) ({time.perf_counter() - t0:.0f} s)", flush=True)
    if not any(source.glob("shapes/*.json")):  # the source's own shapes: a layer moves by its shape's ratio
        benchlib("roofline", "-q", "--threads", str(cpus), "--results-dir", str(source), "--shapes-of", str(source))
    kept = work / "measured.json"  # each target's measurements, kept as they come: --repredict reuses them
    measured: dict[str, dict[str, list[dict[str, float]]]] = json.loads(kept.read_text()) if kept.is_file() else {}
    for name in args.targets:
        env, threads, dtype = targets(cpus)[name]
        folder = work / name
        if not args.repredict:
            t_target = time.perf_counter()
            benchlib("roofline", "-q", "--threads", str(threads), "--results-dir", str(folder), "--shapes-of",
                     str(source), *(["--shapes-dtype", dtype] if dtype else []), env=env)
            print(f"{name}: ceilings and shapes measured in {time.perf_counter() - t_target:.0f} s", flush=True)
            for model in args.models:
                measured.setdefault(name, {})[model] = [layers(folder, model, threads, 100 + r, args, env, dtype)
                                                        for r in range(args.runs)]
                kept.write_text(json.dumps(measured, indent=1))
                print(f"{name} {model}: {args.runs} run(s) measured", flush=True)
    found: list[dict[str, Any]] = []
    for name in args.targets:
        (ceilings,) = sorted((work / name / "ceilings").glob("*.json"))
        dtype = targets(cpus)[name][2]
        precision = ["--dtype", dtype] if dtype else []
        by = {"shapes": json.loads(benchlib("predict", str(source), "--on", str(ceilings), *precision,
                                            "--json"))["rows"],
              "roofs": json.loads(benchlib("predict", str(source), "--on", str(ceilings), *precision, "--json",
                                           "--no-shapes"))["rows"]}
        for model in args.models:
            for method, predicted in by.items():
                for figure, key, scale in (("train_step_s", "step_s", 1.0), ("latency_ms_p50", "forward_s", 1e3)):
                    (pred,) = [x for x in predicted if x["model"] == model and x["figure"] == figure]
                    truth = statistics.median(m[key] for m in measured[name][model]) * scale
                    found.append({"model": model, "target": name, "method": method, "figure": figure,
                                  "predicted": pred["predicted"], "low": pred["low"], "high": pred["high"],
                                  "measured_source": pred["measured"], "measured": truth,
                                  "error": pred["predicted"] / truth - 1,
                                  "inside": pred["low"] <= truth <= pred["high"]})
                    f = found[-1]
                    print(f"{name:8s} {model:14s} {method:6s} {figure:15s} source {f['measured_source']:.4g}, "
                          f"predicted {f['predicted']:.4g} [{f['low']:.4g}, {f['high']:.4g}], measured {truth:.4g}: "
                          f"{f['error']:+.1%}{'' if f['inside'] else '  (outside)'}", flush=True)
    took_min = (time.perf_counter() - t0) / 60
    print(f"\n{'target':8s} {'method':6s} {'figure':15s} MAPE   inside  log SD  interval  ({took_min:.0f} min in all)")
    for method in ("shapes", "roofs"):
        for figure in ("train_step_s", "latency_ms_p50"):
            for name in [*args.targets, "all"]:
                rows = [f for f in found if f["figure"] == figure and f["method"] == method
                        and name in ("all", f["target"])]
                if rows:
                    mape = statistics.mean(abs(f["error"]) for f in rows)
                    inside = sum(f["inside"] for f in rows)
                    logs = [math.log(f["predicted"] / f["measured"]) for f in rows]
                    sd = statistics.stdev(logs) if len(logs) > 1 else math.nan
                    half = statistics.mean(math.log(f["high"] / f["low"]) / 2 for f in rows)  # the interval's
                    print(f"{name:8s} {method:6s} {figure:15s} {mape:5.1%}  {inside}/{len(rows)}  {sd:.3f}   "
                          f"x/÷{math.exp(half):.2f}")
    if args.json:
        args.json.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()}, "found": found},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
