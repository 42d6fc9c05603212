"""False alarms of `benchlib diff` across fresh processes, and the difference it must still see.

A verdict is only worth what it claims on identical settings. This runs, for K pairs, two folders of
identical settings (resnet18, synthetic data, batch 32, 32 px, one thread by default), each run of each
folder in its own fresh `benchlib run` process, and a third folder with two threads; then `benchlib diff`
of the identical pair (every default metric) and of one thread against two (training throughput). It
does so at two sizes: one run a side, and R runs a side recorded interleaved A B B A A B (so the machine's
slow drift lands on both sides). The folders get this machine's noise floor first (`benchlib calibrate`,
measured once, as a study does), so one-run comparisons are judged at the floor level.

    .venv/bin/python benchmarks/false_alarms.py [--pairs 10] [--runs 3] [--calibration-runs 5] [--json F]

Goal (issue 23): at both sizes at most 5% of identical-settings comparisons say faster/slower/better/worse,
while one thread against two is claimed in every pair. Prints each pair's verdicts, then the rates.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = {"faster", "slower", "better", "worse"}


def benchlib(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "benchlib", *args], capture_output=True, text=True, cwd=ROOT)
    if out.returncode not in (0, 1):
        raise SystemExit(f"benchlib {' '.join(args)} failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    return out.stdout


def one_run(folder: Path, args: argparse.Namespace, threads: int, seed: int) -> None:
    """One configuration in a fresh process, its row written to ``folder`` (the seed keeps a side's runs apart:
    a row file is named by its run id)."""
    benchlib("run", "--model", args.model, "--data", "synthetic", "--batch-size", str(args.batch_size),
             "--image-size", str(args.image_size), "--steps", str(args.steps), "--threads", str(threads),
             "--seed", str(seed), "--results-dir", str(folder), *args.extra)


def verdicts(a: Path, b: Path, *extra: str) -> list[dict]:
    """`benchlib diff --json` rows of B against A."""
    return list(json.loads(benchlib("diff", str(a), str(b), "--json", *extra))["rows"])


def one_pair(work: Path, machine: Path, args: argparse.Namespace, runs: int, index: int) -> dict:
    """Folders A and B (identical) and C (two threads), ``runs`` fresh processes each, interleaved; diffs."""
    names = ("a", "b", "c")
    folders = {n: work / f"r{runs}-p{index}-{n}" for n in names}
    for folder in folders.values():  # the machine's floor and ceilings, measured once, as a study keeps them
        for part in ("noise_floor", "ceilings"):
            shutil.copytree(machine / part, folder / part)
    for r in range(runs):
        order = ("a", "b", "c") if r % 2 == 0 else ("c", "b", "a")
        for name in order:
            one_run(folders[name], args, args.threads_b if name == "c" else args.threads, seed=r)
    same = verdicts(folders["a"], folders["b"])
    threads = [r for r in verdicts(folders["a"], folders["c"], "--ignore", "threads", "--metric",
                                   "train_samples_per_s")]
    judged = [r for r in same if r["verdict"] not in ("only in A", "only in B")]
    alarms = [f"{r['metric']} {r['ratio']:.3f}x {r['verdict']} ({r['level']})" for r in judged
              if r["verdict"] in CLAIMS]
    (t,) = threads
    return {"runs_a_side": runs, "pair": index, "comparisons": len(judged), "alarms": alarms,
            "levels": sorted({str(r["level"]) for r in judged}),
            "verdicts": {r["metric"]: f"{r['verdict']} ({r['level']})" for r in judged},
            "threads_verdict": t["verdict"], "threads_ratio": t["ratio"], "threads_level": t["level"],
            "threads_interval": [t["ci_low"], t["ci_high"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10, help="pairs at each size")
    parser.add_argument("--runs", type=int, default=3, help="runs a side of the larger size (the smaller is 1)")
    parser.add_argument("--pairs-multi", type=int, help="pairs at the larger size (default: --pairs)")
    parser.add_argument("--calibration-runs", type=int, default=5)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="threads of the identical pair")
    parser.add_argument("--threads-b", type=int, default=2, help="threads of the folder that must differ")
    parser.add_argument("--extra", nargs="*", default=["--set", "latency_repeats=20", "--set", "latency_budget_s=0"],
                        help="more arguments for benchlib run (default: 20 latency repeats, no budget, to keep runs "
                        "short; p99 is then not published, p50 is)")
    parser.add_argument("--json", help="also write every pair's figures to this file")
    args = parser.parse_args()

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="benchlib-false-alarms-") as tmp:
        work = Path(tmp)
        print(f"calibrating the noise floor ({args.calibration_runs} runs per thread count) ...", flush=True)
        print(benchlib("calibrate", "--results-dir", str(work / "calibration"), "--runs",
                       str(args.calibration_runs), "--threads", str(args.threads), str(args.threads_b)), flush=True)
        calibration_min = (time.perf_counter() - t0) / 60
        benchlib("roofline", "--device", "cpu", "--results-dir", str(work / "calibration"), "--json")
        pairs = []
        for runs in (1, args.runs):
            count = args.pairs if runs == 1 or args.pairs_multi is None else args.pairs_multi
            for index in range(count):
                found = one_pair(work, work / "calibration", args, runs, index)
                pairs.append(found)
                print(f"[{runs} run(s) a side, pair {index + 1}/{count}] identical: "
                      f"{len(found['alarms'])}/{found['comparisons']} claimed {found['alarms'] or ''}; levels "
                      f"{', '.join(found['levels'])}; 1 vs {args.threads_b} threads: {found['threads_ratio']:.2f}x "
                      f"{found['threads_verdict']} ({found['threads_level']}) "
                      f"[{found['threads_interval'][0]:.2f}, {found['threads_interval'][1]:.2f}]", flush=True)
    summary = {}
    for runs in (1, args.runs):
        mine = [p for p in pairs if p["runs_a_side"] == runs]
        if not mine:
            continue
        comparisons = sum(p["comparisons"] for p in mine)
        alarms = sum(len(p["alarms"]) for p in mine)
        summary[f"{runs}_run"] = {
            "pairs": len(mine), "comparisons": comparisons, "false_alarms": alarms,
            "false_alarm_rate": alarms / comparisons if comparisons else None,
            "pairs_with_any_alarm": sum(bool(p["alarms"]) for p in mine),
            "threads_detected": sum(p["threads_verdict"] in CLAIMS for p in mine)}
        s = summary[f"{runs}_run"]
        print(f"{runs} run(s) a side: {alarms} of {comparisons} identical-settings comparisons claimed a difference "
              f"({100 * (s['false_alarm_rate'] or 0):.1f}%; {s['pairs_with_any_alarm']} of {len(mine)} pairs had "
              f"any); 1 against {args.threads_b} threads claimed in {s['threads_detected']} of {len(mine)} pairs")
    minutes = (time.perf_counter() - t0) / 60
    print(f"calibration {calibration_min:.1f} min; {minutes:.1f} min in all")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "pairs": pairs, "minutes": minutes,
                                               "calibration_minutes": calibration_min}, indent=1))


if __name__ == "__main__":
    main()
