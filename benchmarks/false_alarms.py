"""False claims of `benchlib diff` and of a variant table on identical runs, and the power to see a planted slowdown.

    .venv/bin/python benchmarks/false_alarms.py [--identical 16] [--planted-runs 8] [--pairs 200] [--json F]

For each model (resnet18 and mobilenet_v2 by default: synthetic data, batch 32, 32 px, one thread, 25 steps),
records ``--identical`` runs of identical settings, each a fresh `benchlib run` process, and ``--planted-runs``
runs with a delay planted in the forward (``benchmarks/planted.py``) sized to slow the training step by 5%,
10% and 20% (the delay is the share of the identical runs' median step); the pools are recorded round-robin,
so the machine's drift lands on all of them. The machine's noise floor is measured once (`benchlib calibrate`)
and every folder carries it, as a study's does.

Then, at 2, 3, 5 and 8 runs a side, ``--pairs`` resampled pairs each:
- A/A: two disjoint sets of identical runs, compared as `benchlib diff` compares a configuration (every default
  metric either side measured, ``compare_rows`` with the table's family), and by ``variant_speedups`` with one
  set labelled a variant of the other. Per metric, the share of
  pairs that claim faster/slower/better/worse; per table, the share with any claim.
- planted: identical runs against planted ones: the share of pairs whose table claims the training step
  slower (``train_step_s`` verdict ``slower``).
Both with the noise floor in the folders and without it. Nothing here asserts: it prints the table
(benchmarks/LAB.md keeps its tables) and, with ``--json``, every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchlib.report.evidence.diff import DEFAULT_METRICS
from benchlib.report.evidence.samples import METRICS, compare_rows
from benchlib.report.evidence.selection import column_median
from benchlib.report.readback.samples import SampleFiles
from benchlib.report.tables.comparisons import variant_speedups
from benchlib.store.rows import read_results

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = {"faster", "slower", "better", "worse"}
SIDES = (2, 3, 5, 8)
SLOWDOWNS = (0.05, 0.10, 0.20)
VARIANT_VERDICTS = ("epoch_verdict", "train_throughput_verdict", "latency_bs1_verdict", "infer_throughput_verdict")


def benchlib(*args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([sys.executable, "-m", "benchlib", *args], capture_output=True, text=True, cwd=ROOT,
                         env=env)
    if out.returncode not in (0, 1):
        raise SystemExit(f"benchlib {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    return out.stdout


def one_run(folder: Path, model: str, seed: int, delay_ms: float, args: argparse.Namespace) -> None:
    env = {**os.environ, "PLANTED_DELAY_MS": f"{delay_ms:.3f}",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])}
    benchlib("run", "--model", f"planted:{model}", "--data", "synthetic", "--batch-size", str(args.batch_size),
             "--image-size", str(args.image_size), "--steps", str(args.steps), "--threads", "1", "--seed", str(seed),
             "--results-dir", str(folder), "--set", "latency_repeats=20", "--set", "latency_budget_s=0", env=env)


def record(work: Path, args: argparse.Namespace) -> dict[str, dict[float, Path]]:
    """Each model's pools: identical runs (slowdown 0) and planted ones, recorded round-robin."""
    pools: dict[str, dict[float, Path]] = {}
    step_s: dict[str, float] = {}
    for model in args.models:
        pools[model] = {0.0: work / f"{model}-same", **{s: work / f"{model}-slow{int(s * 100)}" for s in SLOWDOWNS}}
        one_run(pools[model][0.0], model, 0, 0.0, args)  # the first identical run sizes the delays
        step_s[model] = float(read_results([pools[model][0.0]])["train_step_s_median"].iloc[0])
        print(f"  {model}: a step takes {step_s[model] * 1e3:.1f} ms; delays "
              f"{', '.join(f'{s * step_s[model] * 1e3:.2f} ms' for s in SLOWDOWNS)}", flush=True)
    plan = [(model, 0.0, seed) for seed in range(1, args.identical) for model in args.models]
    plan += [(model, share, seed) for seed in range(args.planted_runs) for model in args.models
             for share in SLOWDOWNS]
    rng = np.random.default_rng(0)
    order = rng.permutation(len(plan))
    t0 = time.perf_counter()
    for i, k in enumerate(order, 1):
        model, share, seed = plan[k]
        one_run(pools[model][share], model, seed, share * step_s[model] * 1e3, args)
        if i % 10 == 0 or i == len(plan):
            print(f"  {i}/{len(plan)} runs recorded ({time.perf_counter() - t0:.0f} s)", flush=True)
    return pools


class NoFloor(SampleFiles):
    """The folders' samples, as if no noise floor had been measured."""

    def floors(self, folder: object) -> list:
        return []


def _table(a: pd.DataFrame, b: pd.DataFrame, reader: SampleFiles, metrics: tuple[str, ...] = DEFAULT_METRICS
           ) -> dict[str, str]:
    """What `benchlib diff` says of B against A for one configuration: each metric either side measured, compared
    with the table's family (``diff``'s own rule), read from the pools in memory (samples read once)."""
    judged = [m for m in metrics if np.isfinite(column_median(a, METRICS[m].column))
              or np.isfinite(column_median(b, METRICS[m].column))]
    return {m: compare_rows(b, a, METRICS[m], reader, family=len(judged)).verdict for m in judged}


def _variant_claims(a: pd.DataFrame, b: pd.DataFrame, reader: SampleFiles) -> bool:
    """Whether a variant table of B's runs (labelled a variant) against A's (the default) claims anything."""
    b = b.assign(variant="copy", run_id=b["run_id"].astype(str) + "-copy")
    table = variant_speedups(pd.concat([a, b], ignore_index=True), reader)
    copy = table[table["variant"] == "copy"]
    return bool(copy[[c for c in VARIANT_VERDICTS if c in copy]].isin(CLAIMS).any(axis=None))


def resample(pools: dict[str, dict[float, Path]], floor: Path, args: argparse.Namespace) -> list[dict]:
    rng = np.random.default_rng(52)
    out = []
    for model, pool in pools.items():
        for folder in pool.values():  # every pool carries the machine's floor, as a study's folder does
            shutil.copytree(floor, folder / "noise_floor", dirs_exist_ok=True)
        same = read_results([pool[0.0]])
        for reader in (SampleFiles(), NoFloor()):
            with_floor = not isinstance(reader, NoFloor)
            for k in SIDES:
                if 2 * k > len(same):
                    continue
                for p in range(args.pairs):
                    pick = rng.permutation(len(same))
                    a, b = same.iloc[pick[:k]], same.iloc[pick[k:2 * k]]
                    verdicts = _table(a, b, reader)
                    out.append({"model": model, "floor": with_floor, "k": k, "kind": "A/A", "pair": p,
                                "claims": [m for m, v in verdicts.items() if v in CLAIMS], "metrics": list(verdicts),
                                "variant_claims": _variant_claims(a, b, reader)})
                for share in SLOWDOWNS:
                    slow = read_results([pool[share]])
                    if k > len(slow):
                        continue
                    for p in range(args.pairs):
                        a = same.iloc[rng.permutation(len(same))[:k]]
                        b = slow.iloc[rng.permutation(len(slow))[:k]]
                        verdict = _table(a, b, reader)["train_step_s"]  # in the whole table, its family
                        out.append({"model": model, "floor": with_floor, "k": k, "kind": f"slow{int(share * 100)}",
                                    "pair": p, "caught": verdict == "slower"})
            print(f"  {model}, floor {with_floor}: resampled", flush=True)
    return out


def summarise(found: list[dict]) -> pd.DataFrame:
    rows = []
    df = pd.DataFrame(found)
    for (model, with_floor, k), grp in df.groupby(["model", "floor", "k"]):
        aa = grp[grp["kind"] == "A/A"]
        per_metric = {m: float(np.mean([m in c for c in aa["claims"]])) for m in sorted({m for ms in aa["metrics"]
                                                                                           for m in ms})}
        rec: dict[str, Any] = {"model": model, "floor": with_floor, "runs a side": k, "pairs": len(aa),
                               "metric rate max": max(per_metric.values(), default=np.nan),
                               "diff tables with a claim": float(np.mean([bool(c) for c in aa["claims"]])),
                               "variant tables with a claim": float(aa["variant_claims"].mean())}
        for share in SLOWDOWNS:
            slow = grp[grp["kind"] == f"slow{int(share * 100)}"]
            rec[f"caught {int(share * 100)}%"] = float(slow["caught"].mean()) if len(slow) else np.nan
        rows.append(rec)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    parser.add_argument("--identical", type=int, default=16, help="identical runs per model (8 a side needs 16)")
    parser.add_argument("--planted-runs", type=int, default=8, help="runs per planted slowdown and model")
    parser.add_argument("--pairs", type=int, default=200, help="resampled pairs per size and kind")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--calibration-runs", type=int, default=5)
    parser.add_argument("--keep", help="record into this folder and keep it (default: a temporary one)")
    parser.add_argument("--analyse", metavar="DIR", help="resample the runs a --keep run recorded in DIR, recording "
                        "nothing")
    parser.add_argument("--json", help="also write every pair's figures to this file")
    args = parser.parse_args()
    t0 = time.perf_counter()
    if args.analyse:
        work = Path(args.analyse)
        pools = {m: {0.0: work / f"{m}-same", **{s: work / f"{m}-slow{int(s * 100)}" for s in SLOWDOWNS}}
                 for m in args.models}
    else:
        work = Path(args.keep or tempfile.mkdtemp(prefix="benchlib-false-alarms-"))
        work.mkdir(parents=True, exist_ok=True)
        print(f"calibrating the noise floor ({args.calibration_runs} runs per thread count) ...", flush=True)
        benchlib("calibrate", "--results-dir", str(work / "calibration"), "--runs", str(args.calibration_runs),
                 "--threads", "1", "2")
        print(f"recording into {work} ...", flush=True)
        pools = record(work, args)
    recorded_min = (time.perf_counter() - t0) / 60
    found = resample(pools, work / "calibration" / "noise_floor", args)
    table = summarise(found)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"recorded in {recorded_min:.1f} min; {(time.perf_counter() - t0) / 60:.1f} min in all; load "
          f"{os.getloadavg()[0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": table.to_dict("records"), "pairs": found}, indent=1,
                                              default=str))


if __name__ == "__main__":
    main()
