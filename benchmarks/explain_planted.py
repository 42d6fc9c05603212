"""Does `benchlib diff --explain` find one slowed layer? A delay planted in one layer's forward on side B, ranked.

    .venv/bin/python benchmarks/explain_planted.py [--trials 10] [--runs 2] [--layer layer3.0.conv1] [--delay-ms 4]

Each trial records ``--runs`` fresh runs a side (`benchlib run`, then `benchlib layers` for each row, as a study
with ``layers: true`` does): A is resnet18 as torchvision builds it, B the same with ``--delay-ms`` of sleep
planted in ``--layer``'s forward (``benchmarks/planted.py``), sides alternating run by run. It then runs
`benchlib diff A B --explain --json` (with ``--floor``, each side carries that noise floor) and reads, for the
training step and the batch-1 forward:

- the rows' verdict and interval (the diff table's, corrected for its family);
- whether the split was made and which part it ranks first (largest share of the difference);
- that part's difference against the planted delay (within 20% passes).

It also runs the other way (A against A', two folders of identical runs, ``--aa`` trials): how often an
explanation of identical sides names any part a cause. Nothing here asserts; it prints a line per trial and a
summary, and with ``--json`` every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib.report.tables.explain import INFERENCE, TRAINING, explain, run_of
from benchlib.report.tables.explain_rows import layers_command

ROOT = Path(__file__).resolve().parents[1]
WITHIN = 0.20  # a ranked-first part's difference within this share of the planted delay is a hit


def benchlib(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "benchlib", *args], capture_output=True, text=True, cwd=ROOT, env=env)
    if done.returncode not in (0, 1):
        raise SystemExit(f"benchlib {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-600:]}")
    return done.stdout


def one_side_run(folder: Path, seed: int, delay_ms: float, args: argparse.Namespace) -> None:
    """One row and its per-layer file, each a fresh process."""
    env = {**os.environ, "PLANTED_DELAY_MS": f"{delay_ms:.3f}", "PLANTED_LAYER": args.layer,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")])}
    common = ["--model", f"planted:{args.model}", "--data", "synthetic", "--batch-size", str(args.batch_size),
              "--image-size", str(args.image_size), "--threads", "1", "--seed", str(seed), "--results-dir",
              str(folder)]
    row = json.loads(benchlib("run", "-q", *common, "--steps", str(args.steps), "--set", "latency_repeats=20",
                              "--set", "latency_budget_s=0", "--json", env=env))
    # the per-layer file under the row's own run id: the command `diff --explain` names for a row without one
    words = shlex.split(layers_command({**row, "results_dir": str(folder)}))
    benchlib(*words[1:], "-q", "--steps", str(args.layer_steps), "--block", str(args.block), env=env)


def record(work: Path, name: str, seed: int, delay_b_ms: float, args: argparse.Namespace) -> tuple[Path, Path]:
    a, b = work / f"{name}-A", work / f"{name}-B"
    for r in range(args.runs):  # A B, B A, ...: the host's drift lands on both sides
        for side, delay in ((a, 0.0), (b, delay_b_ms)) if r % 2 == 0 else ((b, delay_b_ms), (a, 0.0)):
            one_side_run(side, seed + r, delay, args)
    return a, b


def split_alone(a: Path, b: Path, verdict: str) -> dict[str, Any]:
    """The split of the per-layer runs themselves, told the whole's ``verdict`` (``slower`` where a delay was
    planted in B, so it is made however sure the rows are): which part it ranks first. What ``diff --explain``
    shows once the rows' own verdict claims."""
    out: dict[str, Any] = {}
    for metric, inference in ((TRAINING, False), (INFERENCE, True)):
        runs = [[r for p in sorted((side / "layers").glob("*.json")) if (r := run_of(json.loads(p.read_text()),
                                                                                 inference)) is not None]
                for side in (a, b)]
        e = explain(runs[0], runs[1], metric=metric, verdict=verdict)
        parts = e.parts.sort_values("share", ascending=False)
        top = parts.iloc[0] if len(parts) else None
        out[metric] = {"delta_ms": e.delta_s * 1e3, "ci_ms": [e.ci_low * 1e3, e.ci_high * 1e3], "why": e.why,
                       "top": f"{top['layer']} {top['phase']}" if top is not None else None,
                       "top_delta_ms": float(top["delta_s"]) * 1e3 if top is not None else None}
    return out


def judged(a: Path, b: Path) -> dict[str, Any]:
    """The diff's verdicts and its explanation, as `benchlib diff --explain --json` prints them."""
    out = json.loads(benchlib("diff", str(a), str(b), "--explain", "--json", env=dict(os.environ)))
    rows = {r["metric"]: r for r in out["rows"]}
    found: dict[str, Any] = {}
    for e in out.get("explain", []):
        parts = sorted(e["parts"], key=lambda p: -(p["share"] if p["share"] is not None else -1e9))
        top = parts[0] if parts else None
        row = rows.get("train_step_s" if e["metric"] != "forward_bs1_s" else "latency_ms_p50", {})
        found[e["metric"]] = {
            "verdict": row.get("verdict"), "ratio": row.get("ratio"), "ci": [row.get("ci_low"), row.get("ci_high")],
            "family": row.get("family"), "explained": e["explained"], "why": e["why"],
            "top": f"{top['layer']} {top['phase']}" if top else None,
            "top_delta_ms": top["delta_s"] * 1e3 if top else None, "causes": e.get("causes", [])}
    return found


def _hit(top: str | None, top_delta_ms: float | None, planted: str, delay_ms: float) -> bool | None:
    """The planted part ranked first with a difference within ``WITHIN`` of the delay (None: nothing planted)."""
    if not delay_ms:
        return None
    return top == planted and top_delta_ms is not None and abs(top_delta_ms - delay_ms) <= WITHIN * delay_ms


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--aa", type=int, default=5, help="A/A trials: identical sides, any part named a cause")
    p.add_argument("--runs", type=int, default=2, help="runs a side in each trial")
    p.add_argument("--model", default="resnet18", choices=("resnet18", "mobilenet_v2"))
    p.add_argument("--layer", default="layer3.0.conv1")
    p.add_argument("--delay-ms", type=float, default=4.0)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--layer-steps", type=int, default=12)
    p.add_argument("--block", type=int, default=4)
    p.add_argument("--floor", type=Path, help="a noise_floor folder (`benchlib calibrate`) copied into every side, as "
                   "a study's folder carries its machine's")
    p.add_argument("--work", type=Path, help="record here and keep it (default: a temporary folder)")
    p.add_argument("--analyse", action="store_true", help="judge the trials recorded in --work again (with --floor: "
                   "that floor in place of theirs), recording nothing")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="benchlib-explain-planted-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    planted_part = f"net.{args.layer} forward"  # planted.py's wrapper holds the torchvision model as ``net``
    trials: list[dict[str, Any]] = []
    for kind, count, delay in (("planted", args.trials, args.delay_ms), ("A/A", args.aa, 0.0)):
        for t in range(count):
            name = f"{kind.replace('/', '')}{t}"
            a, b = (work / f"{name}-A", work / f"{name}-B") if args.analyse else record(work, name, 100 * t, delay,
                                                                                         args)
            for side in (a, b) if args.floor else ():
                shutil.rmtree(side / "noise_floor", ignore_errors=True)  # the floor given, alone
                shutil.copytree(args.floor, side / "noise_floor")
            found, alone = judged(a, b), split_alone(a, b, "slower" if delay else "unknown")
            trials.append({"kind": kind, "trial": t, **found, "split": alone})
            for metric, f in found.items():
                f["hit"] = _hit(f["top"], f["top_delta_ms"], planted_part, delay)
                said = (f"first {f['top']} {f['top_delta_ms']:+.2f} ms" if f["top"] else f"not split: {f['why']}")
                print(f"{kind} {t + 1}/{count} {metric}: {f['verdict']} {f['ratio'] or float('nan'):.3f}x "
                      f"[{f['ci'][0] or float('nan'):.3f}, {f['ci'][1] or float('nan'):.3f}]; {said}; "
                      f"causes {len(f['causes'])}" + ("" if f["hit"] is None else f"; {'hit' if f['hit'] else 'MISS'}"),
                      flush=True)
            for metric, f in alone.items():
                f["hit"] = _hit(f["top"], f["top_delta_ms"], planted_part, delay)
                print(f"  the split alone, {metric}: whole {f['delta_ms']:+.2f} ms [{f['ci_ms'][0]:+.2f}, "
                      f"{f['ci_ms'][1]:+.2f}]; first {f['top']} {f['top_delta_ms'] or float('nan'):+.2f} ms"
                      + ("" if f["hit"] is None else f"; {'hit' if f['hit'] else 'MISS'}"), flush=True)
    print(f"\nplanted {args.delay_ms:g} ms in {planted_part}, {args.model} bs{args.batch_size} {args.image_size} px, "
          f"{args.runs} runs a side ({(time.perf_counter() - t0) / 60:.1f} min):")
    for metric in ("train_step_s", "forward_bs1_s"):
        planted = [t[metric] for t in trials if t["kind"] == "planted" and metric in t]
        aa = [t[metric] for t in trials if t["kind"] == "A/A" and metric in t]
        hits = sum(bool(f["hit"]) for f in planted)
        told = sum(f["verdict"] in ("slower", "faster") for f in planted)
        named = sum(bool(f["causes"]) for f in aa)
        alone = sum(bool(t["split"][metric]["hit"]) for t in trials if t["kind"] == "planted")
        print(f"  {metric}: diff --explain ranked the planted part first within {WITHIN:.0%} in {hits}/{len(planted)}"
              f" trials (whole told apart in {told}); the split alone in {alone}/{len(planted)}; A/A explanations "
              f"naming a cause: {named}/{len(aa)}")
    if args.json:
        args.json.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()}, "trials": trials},
                                        indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
